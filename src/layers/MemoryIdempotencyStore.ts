/**
 * An in-memory idempotency store for users' unit tests, with the semantics of the PostgreSQL one.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberRef from "effect/FiberRef"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { OutboxConfigError } from "../domain/Errors.js"
import * as IdempotencyKey from "../domain/IdempotencyKey.js"
import { IdempotencyStore, type IdempotencyStoreShape } from "../services/IdempotencyStore.js"
import { purgeLoop, resolvePurgeOptions, validateRetention } from "./internal/purge.js"

/**
 * A processed record, as the in-memory store keeps it. `processedAt` is in `Clock` milliseconds, so
 * `TestClock` drives retention and purges.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProcessedRecord {
  readonly messageId: string
  readonly consumer: string
  readonly processedAt: number
}

/**
 * Options of the in-memory store.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** How long records are kept by default (default 30 days, see `IdempotencyStore.defaultRetention`). */
  readonly retention?: Duration.DurationInput
}

/**
 * The in-memory store plus inspection for assertions.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryIdempotencyStoreShape extends IdempotencyStoreShape {
  /** Every record, oldest first. */
  readonly records: Effect.Effect<ReadonlyArray<ProcessedRecord>>
}

/**
 * Tag of the in-memory store, for inspection in tests.
 *
 * @since 0.1.0
 * @category tags
 */
export class MemoryIdempotencyStore extends Context.Tag("effect-outbox/MemoryIdempotencyStore")<
  MemoryIdempotencyStore,
  MemoryIdempotencyStoreShape
>() {}

const identity = (key: IdempotencyKey.IdempotencyKey) => `${key.messageId}\u0000${key.consumer}`

/**
 * Builds the in-memory store. There are no transactions: a key is recorded only when its effect
 * succeeds, and while it runs every other `runOnce` of the key waits — then skips (success) or takes
 * its turn (failure, defect or interruption), as a concurrent PostgreSQL transaction would. A nested
 * `runOnce` of the key inside its own effect is skipped, as on PostgreSQL, where it sees its own
 * uncommitted record.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<MemoryIdempotencyStoreShape, OutboxConfigError> =>
  Effect.gen(function*() {
    const retention = yield* validateRetention(options.retention)
    const processed = new Map<string, ProcessedRecord>()
    const inFlight = new Map<string, Deferred.Deferred<void>>()
    /** The keys whose effect the current fiber (or an ancestor) is running. */
    const running = FiberRef.unsafeMake<ReadonlySet<string>>(new Set())
    const purging = yield* Effect.makeSemaphore(1)

    const runOnce: IdempotencyStoreShape["runOnce"] = <A, E, R>(
      key: IdempotencyKey.IdempotencyKey,
      effect: Effect.Effect<A, E, R>
    ) =>
      Effect.flatMap(IdempotencyKey.validate(key), (valid) => {
        const id = identity(valid)
        const attempt: Effect.Effect<Option.Option<A>, E, R> = Effect.uninterruptibleMask((restore) =>
          Effect.gen(function*() {
            const mine = yield* FiberRef.get(running)
            // No yield between these checks and the registration below: they are atomic.
            if (mine.has(id) || processed.has(id)) return Option.none<A>()
            const other = inFlight.get(id)
            if (other !== undefined) {
              yield* restore(Deferred.await(other))
              return yield* attempt
            }
            const done = yield* Deferred.make<void>()
            inFlight.set(id, done)
            const exit = yield* Effect.exit(restore(Effect.locally(effect, running, new Set([...mine, id]))))
            if (Exit.isSuccess(exit)) {
              processed.set(id, {
                messageId: valid.messageId,
                consumer: valid.consumer,
                processedAt: yield* Clock.currentTimeMillis
              })
            }
            inFlight.delete(id)
            yield* Deferred.succeed(done, undefined)
            return yield* Exit.map(exit, Option.some)
          })
        )
        return attempt
      })

    const oldestFirst = () => Array.from(processed.values()).sort((a, b) => a.processedAt - b.processedAt)

    const purge: IdempotencyStoreShape["purge"] = (purgeOptions) =>
      Effect.flatMap(resolvePurgeOptions(purgeOptions, retention), (o) =>
        purgeLoop(
          o,
          Effect.map(Clock.currentTimeMillis, (now) => {
            const cutoff = now - Duration.toMillis(o.olderThan)
            const doomed = oldestFirst().filter((r) => r.processedAt < cutoff).slice(0, o.batchSize)
            doomed.forEach((r) => processed.delete(identity(r)))
            return Option.some(doomed.length)
          })
        ).pipe(Effect.map(Option.getOrElse(() => 0))))

    const store: MemoryIdempotencyStoreShape = {
      retention,
      setup: Effect.succeed([]),
      runOnce,
      isProcessed: (key) => Effect.map(IdempotencyKey.validate(key), (valid) => processed.has(identity(valid))),
      purge,
      purgeExclusive: (purgeOptions) => purging.withPermitsIfAvailable(1)(purge(purgeOptions)),
      records: Effect.sync(oldestFirst)
    }
    return store
  })

/**
 * A layer providing both `IdempotencyStore` and `MemoryIdempotencyStore` (for inspection).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<IdempotencyStore | MemoryIdempotencyStore, OutboxConfigError> =>
  Layer.effectContext(
    Effect.map(make(options), (store) =>
      Context.make(IdempotencyStore, store).pipe(Context.add(MemoryIdempotencyStore, store)))
  )
