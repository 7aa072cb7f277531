/**
 * The idempotency retention job: deletes the records older than the retention, in batches, one process at a
 * time (the store's exclusive purge), forever. `Worker.run` runs it while it consumes, when an
 * `IdempotencyStore` is in context; run it yourself (or its layer) where no worker runs.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as IdempotencyStore from "../services/IdempotencyStore.js"

/**
 * Options of the retention job.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** How often it runs (default 5 minutes). */
  readonly every?: Duration.DurationInput
  /** Records older than this go (default: the store's retention). */
  readonly olderThan?: Duration.DurationInput
  /** Records deleted per statement (default `IdempotencyStore.defaultPurgeBatchSize`). */
  readonly batchSize?: number
  /** Statements per run at most (default 100). */
  readonly maxBatches?: number
}

/**
 * One exclusive purge, logged; failures are logged and left for the next run.
 *
 * @since 0.1.0
 * @category constructors
 */
export const once = (options: Options = {}): Effect.Effect<void, never, IdempotencyStore.IdempotencyStore> =>
  Effect.flatMap(IdempotencyStore.IdempotencyStore, (store) =>
    store.purgeExclusive({
      ...(options.olderThan === undefined ? {} : { olderThan: options.olderThan }),
      batchSize: options.batchSize ?? IdempotencyStore.defaultPurgeBatchSize,
      maxBatches: options.maxBatches ?? 100
    }).pipe(
      Effect.tap((deleted) =>
        Option.match(deleted, {
          onNone: () => Effect.logDebug("outbox: another process is purging idempotency records"),
          onSome: (n) => n > 0 ? Effect.logInfo(`outbox: purged ${n} idempotency records`) : Effect.void
        })
      ),
      Effect.catchAll((error) => Effect.logWarning("outbox: idempotency purge failed", error)),
      Effect.asVoid
    ))

/**
 * The job: `once` every `every`, forever (the first run after one period).
 *
 * @since 0.1.0
 * @category constructors
 */
export const run = (options: Options = {}): Effect.Effect<never, never, IdempotencyStore.IdempotencyStore> =>
  once(options).pipe(Effect.delay(Duration.decode(options.every ?? "5 minutes")), Effect.forever)

/**
 * The job as a layer: runs for the layer's life.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<never, never, IdempotencyStore.IdempotencyStore> =>
  Layer.scopedDiscard(Effect.forkScoped(run(options)))
