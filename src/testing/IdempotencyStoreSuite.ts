/**
 * The conformance suite of `IdempotencyStore`: the contract every store shares, as `@effect/vitest`
 * tests that any implementation can run against itself, the in-memory and PostgreSQL stores included.
 *
 * @example
 * ```ts
 * // test/my-store.test.ts
 * import { exerciseIdempotencyStore } from "effect-outbox/testing"
 *
 * exerciseIdempotencyStore("my store", {
 *   make: (options) => MyStore.make(options),
 *   age: (store, by) => MyStore.backdate(store, by),
 *   count: (store) => MyStore.count(store),
 *   awaitWaiting: () => MyStore.awaitLockWaiter,
 *   holdPurgeLock: (store) => MyStore.lockAsAnotherPurger(store)
 * })
 * ```
 *
 * @since 0.1.0
 */
import { describe, expect, layer } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { IdempotencyKey } from "../domain/IdempotencyKey.js"
import * as MessageId from "../domain/MessageId.js"
import { defaultRetention, type IdempotencyStoreShape } from "../services/IdempotencyStore.js"

/**
 * How the suite makes, inspects and drives one kind of store. `S` is what `make` returns (a store plus
 * whatever the other members need to find its storage again, such as its table name), `R` what `layer`
 * provides. A member's failure fails the test that called it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Backend<S extends IdempotencyStoreShape, R = never> {
  /**
   * What the stores need, built once for the whole suite and shared by its tests: a database for a
   * store over SQL. Omit it when the members need nothing from the context.
   */
  readonly layer?: Layer.Layer<R, unknown>
  /**
   * A new store, set up and empty, that sees no record of any other test (its own table, for example).
   * Fails with an `OutboxConfigError` when `retention` is not a positive duration.
   */
  readonly make: (options: { readonly retention?: Duration.DurationInput }) => Effect.Effect<S, unknown, R>
  /**
   * Makes every record the store holds `by` older, as if it had been recorded that much earlier: a
   * store that reads the `Clock` advances `TestClock`, one that reads the database's `now()` moves its
   * timestamps back.
   */
  readonly age: (store: S, by: Duration.Duration) => Effect.Effect<void, unknown, R>
  /** How many records the store holds. */
  readonly count: (store: S) => Effect.Effect<number, unknown, R>
  /**
   * Returns once a `runOnce`, forked while another `runOnce` of the same key is running, waits behind
   * it (PostgreSQL: a backend waits on a lock); it must not return before that.
   */
  readonly awaitWaiting: (store: S) => Effect.Effect<void, unknown, R>
  /** Takes the store's purge lock as another purger, another process, would; released with the scope. */
  readonly holdPurgeLock: (store: S) => Effect.Effect<void, unknown, R | Scope.Scope>
  /**
   * The capability to join a caller's transaction: runs `self` inside one, so that the records of the
   * store's operations in `self` commit or roll back with it (PostgreSQL: `sql.withTransaction`). Omit it
   * for a store without transactions; the tests of the capability are then skipped.
   */
  readonly transaction?: <A, E, R2>(self: Effect.Effect<A, E, R2>) => Effect.Effect<A, unknown, R | R2>
}

class Boom {
  readonly _tag = "Boom"
  constructor(readonly detail = "boom") {}
}

const key = (consumer = "invoices"): IdempotencyKey => ({ messageId: MessageId.make(), consumer })

const tagOf = (u: unknown): unknown => typeof u === "object" && u !== null ? (u as { _tag?: unknown })._tag : undefined

/**
 * Registers the conformance tests of an `IdempotencyStore` under `describe(name)`: one run per
 * (message id, consumer), failures, defects and interruptions recording nothing, concurrent runs of a key
 * waiting for each other, batched and windowed purges, `purgeExclusive`, key and option validation, and,
 * when the backend has the capability, records joining the caller's transaction. The tests run under
 * `TestClock`, which the suite's tests share (through `layer`): they only ever move time forward and
 * compare relative ages.
 *
 * @since 0.1.0
 * @category conformance
 */
export const exerciseIdempotencyStore = <S extends IdempotencyStoreShape, R = never>(
  name: string,
  backend: Backend<S, R>
): void => {
  // Without a layer the members need nothing from the context (R is never).
  const services = backend.layer ?? (Layer.empty as unknown as Layer.Layer<R>)
  const { age, count } = backend
  const make = (options: { readonly retention?: Duration.DurationInput } = {}) => backend.make(options)

  layer(services)(name, (it) => {
    describe("runOnce", () => {
      it.effect("runs the effect once per key: Some(result) the first time, None after", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const k = key()
          let effects = 0
          const issue = Effect.sync(() => ++effects)
          expect(yield* store.isProcessed(k)).toBe(false)
          expect(yield* store.runOnce(k, issue)).toEqual(Option.some(1))
          expect(yield* store.runOnce(k, issue)).toEqual(Option.none())
          // An upper-case spelling of the id is the same message.
          const upper = { ...k, messageId: k.messageId.toUpperCase() }
          expect(yield* store.runOnce(upper, issue)).toEqual(Option.none())
          expect(yield* store.isProcessed(k)).toBe(true)
          expect(yield* store.isProcessed(upper)).toBe(true)
          expect(effects).toBe(1)
          expect(yield* count(store)).toBe(1)
        }))

      it.effect("keeps consumers apart: each consumer of a message runs once, and so does each message", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const invoices = key("invoices")
          const ledger = { ...invoices, consumer: "ledger" }
          let effects = 0
          const issue = Effect.sync(() => ++effects)
          expect(yield* store.runOnce(invoices, issue)).toEqual(Option.some(1))
          expect(yield* store.isProcessed(ledger)).toBe(false)
          expect(yield* store.runOnce(ledger, issue)).toEqual(Option.some(2))
          expect(yield* store.runOnce(ledger, issue)).toEqual(Option.none())
          expect(yield* store.runOnce(invoices, issue)).toEqual(Option.none())
          expect(yield* store.isProcessed({ ...invoices, consumer: "shipping" })).toBe(false)
          // Another message, same consumer.
          expect(yield* store.runOnce(key("invoices"), issue)).toEqual(Option.some(3))
          expect(effects).toBe(3)
          expect(yield* count(store)).toBe(3)
        }))

      it.effect("a failure or a defect records nothing and reaches the caller intact; the retry runs", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const k = key()
          let effects = 0
          const issue = Effect.sync(() => ++effects)
          // Intact: the same class and fields (Effect may hand back a copy that carries a span's stack).
          const failed = yield* Effect.either(store.runOnce(k, Effect.zipRight(issue, Effect.fail(new Boom("mine")))))
          expect(Either.isLeft(failed) && failed.left).toBeInstanceOf(Boom)
          expect(Either.isLeft(failed) && failed.left instanceof Boom && failed.left.detail).toBe("mine")
          expect(yield* store.isProcessed(k)).toBe(false)
          const died = yield* Effect.exit(store.runOnce(k, Effect.zipRight(issue, Effect.dieMessage("bug"))))
          expect(Exit.isFailure(died) && Exit.causeOption(died).pipe(Option.map((c) => c._tag))).toEqual(
            Option.some("Die")
          )
          expect(yield* store.isProcessed(k)).toBe(false)
          expect(yield* count(store)).toBe(0)
          expect(yield* store.runOnce(k, issue)).toEqual(Option.some(3))
          expect(yield* store.runOnce(k, issue)).toEqual(Option.none())
          expect(effects).toBe(3)
          expect(yield* count(store)).toBe(1)
        }))

      it.effect("an interrupted run records nothing and lets the next one run", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const k = key()
          const started = yield* Deferred.make<void>()
          const hanging = Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
          const fiber = yield* Effect.fork(store.runOnce(k, hanging))
          yield* Deferred.await(started)
          yield* Fiber.interrupt(fiber)
          expect(yield* store.isProcessed(k)).toBe(false)
          expect(yield* store.runOnce(k, Effect.succeed(1))).toEqual(Option.some(1))
          expect(yield* count(store)).toBe(1)
        }))

      it.effect("a nested run of the key inside its own effect is skipped; a nested run of another key runs", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const outer = key()
          const inner = key()
          let effects = 0
          const issue = Effect.sync(() => ++effects)
          expect(yield* store.runOnce(outer, store.runOnce(outer, issue))).toEqual(Option.some(Option.none()))
          expect(effects).toBe(0)
          expect(yield* store.runOnce(inner, store.runOnce(outer, issue))).toEqual(Option.some(Option.none()))
          const other = key()
          expect(yield* store.runOnce(key(), store.runOnce(other, issue))).toEqual(Option.some(Option.some(1)))
          expect(yield* store.isProcessed(outer)).toBe(true)
          expect(yield* store.isProcessed(other)).toBe(true)
          expect(yield* count(store)).toBe(4)
        }))
    })

    describe("concurrent runs of one key", () => {
      const outcomes = [
        { first: "succeeds", second: "skips" },
        { first: "fails", second: "runs" },
        { first: "dies", second: "runs" },
        { first: "is interrupted", second: "runs" }
      ] as const
      for (const outcome of outcomes) {
        it.effect(`a second run waits for the running one; when that ${outcome.first}, it ${outcome.second}`, () =>
          Effect.gen(function*() {
            const store = yield* make()
            const k = key()
            const started = yield* Deferred.make<void>()
            const gate = yield* Deferred.make<void>()
            const first = yield* Effect.fork(store.runOnce(
              k,
              Effect.gen(function*() {
                yield* Deferred.succeed(started, undefined)
                yield* Deferred.await(gate)
                if (outcome.first === "fails") return yield* Effect.fail(new Boom())
                if (outcome.first === "dies") return yield* Effect.dieMessage("bug")
                return "first"
              })
            ))
            yield* Deferred.await(started)
            const second = yield* Effect.fork(store.runOnce(k, Effect.succeed("second")))
            yield* backend.awaitWaiting(store)
            expect(Option.isNone(yield* Fiber.poll(second))).toBe(true)
            expect(yield* store.isProcessed(k)).toBe(false)
            if (outcome.first === "is interrupted") yield* Fiber.interrupt(first)
            else yield* Deferred.succeed(gate, undefined)
            const firstExit = yield* Fiber.await(first)
            const secondResult = yield* Fiber.join(second)
            switch (outcome.first) {
              case "succeeds":
                expect(firstExit).toEqual(Exit.succeed(Option.some("first")))
                break
              case "fails":
                expect(Exit.isFailure(firstExit) && Cause.failureOption(firstExit.cause).pipe(Option.map(tagOf)))
                  .toEqual(Option.some("Boom"))
                break
              case "dies":
                expect(Exit.isFailure(firstExit) && Cause.isDie(firstExit.cause)).toBe(true)
                break
              case "is interrupted":
                expect(Exit.isInterrupted(firstExit)).toBe(true)
                break
            }
            expect(secondResult).toEqual(outcome.second === "skips" ? Option.none() : Option.some("second"))
            expect(yield* store.isProcessed(k)).toBe(true)
            expect(yield* count(store)).toBe(1)
          }))
      }

      it.effect("ten runs of one key released together: exactly one runs, round after round", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const contenders = 10
          let runs = 0
          for (let round = 1; round <= 5; round++) {
            const k = key()
            const ready = yield* Deferred.make<void>()
            const latch = yield* Deferred.make<void>()
            let arrived = 0
            const contender = Effect.gen(function*() {
              if (++arrived === contenders) yield* Deferred.succeed(ready, undefined)
              yield* Deferred.await(latch)
              return yield* store.runOnce(k, Effect.zipRight(Effect.sync(() => runs++), Effect.yieldNow()))
            })
            const all = yield* Effect.fork(
              Effect.all(Array.from({ length: contenders }, () => contender), { concurrency: "unbounded" })
            )
            // Every contender is parked on the latch before it opens.
            yield* Deferred.await(ready)
            yield* Deferred.succeed(latch, undefined)
            const results = yield* Fiber.join(all)
            expect(results.filter(Option.isSome).length).toBe(1)
            expect(runs).toBe(round)
          }
          expect(yield* count(store)).toBe(5)
        }))
    })

    describe("purge", () => {
      it.effect("deletes only the records older than the window (the retention by default), in bounded batches", () =>
        Effect.gen(function*() {
          const store = yield* make({ retention: "30 days" })
          const old = Array.from({ length: 7 }, () => key("old"))
          const recent = Array.from({ length: 5 }, () => key("new"))
          for (const k of old) yield* store.runOnce(k, Effect.void)
          yield* age(store, Duration.days(10))
          for (const k of recent) yield* store.runOnce(k, Effect.void)
          yield* age(store, Duration.subtract(Duration.days(20), Duration.minutes(1)))
          // Inside the window: nothing.
          expect(yield* store.purge()).toBe(0)
          expect(yield* store.purge({ olderThan: "32 days" })).toBe(0)
          yield* age(store, Duration.minutes(2))
          const batches: Array<number> = []
          expect(yield* store.purge({ batchSize: 3, onBatch: (n) => Effect.sync(() => batches.push(n)) })).toBe(7)
          expect(batches).toEqual([3, 3, 1])
          for (const k of old) expect(yield* store.isProcessed(k)).toBe(false)
          for (const k of recent) expect(yield* store.isProcessed(k)).toBe(true)
          expect(yield* count(store)).toBe(5)
          // maxBatches bounds one run.
          const limited: Array<number> = []
          const onBatch = (n: number) => Effect.sync(() => limited.push(n))
          expect(yield* store.purge({ olderThan: "10 days", batchSize: 2, maxBatches: 2, onBatch })).toBe(4)
          expect(limited).toEqual([2, 2])
          expect(yield* count(store)).toBe(1)
          // An infinite window purges nothing; a zero window every committed record.
          expect(yield* store.purge({ olderThan: Duration.infinity })).toBe(0)
          expect(yield* count(store)).toBe(1)
          expect(yield* store.purge({ olderThan: 0 })).toBe(1)
          expect(yield* count(store)).toBe(0)
          expect(yield* store.purge()).toBe(0)
        }))

      it.effect("deletes the oldest records first", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const [a, b, c] = [key(), key(), key()]
          for (const k of [a, b, c]) {
            yield* store.runOnce(k, Effect.void)
            yield* age(store, Duration.days(1))
          }
          expect(yield* store.purge({ olderThan: "12 hours", batchSize: 1, maxBatches: 2 })).toBe(2)
          expect([yield* store.isProcessed(a), yield* store.isProcessed(b), yield* store.isProcessed(c)]).toEqual([
            false,
            false,
            true
          ])
        }))

      it.effect("rejects invalid options with an OutboxConfigError, before deleting anything", () =>
        Effect.gen(function*() {
          const store = yield* make()
          yield* store.runOnce(key(), Effect.void)
          yield* age(store, Duration.days(365))
          const invalid = [
            { batchSize: 0 },
            { batchSize: -1 },
            { batchSize: 1.5 },
            { maxBatches: 0 },
            { maxBatches: 2.5 },
            { olderThan: "soon" as Duration.DurationInput }
          ]
          for (const options of invalid) {
            expect(tagOf(yield* Effect.flip(store.purge({ olderThan: 0, ...options })))).toBe("OutboxConfigError")
            expect(tagOf(yield* Effect.flip(store.purgeExclusive({ olderThan: 0, ...options })))).toBe(
              "OutboxConfigError"
            )
          }
          expect(yield* count(store)).toBe(1)
        }))
    })

    describe("purgeExclusive", () => {
      it.effect("None while another purger holds the lock; Some(deleted), in batches, once it is free", () =>
        Effect.gen(function*() {
          const store = yield* make()
          for (let i = 0; i < 5; i++) yield* store.runOnce(key(), Effect.void)
          yield* age(store, Duration.days(40))
          yield* Effect.scoped(Effect.gen(function*() {
            yield* backend.holdPurgeLock(store)
            expect(yield* store.purgeExclusive({ batchSize: 2 })).toEqual(Option.none())
            expect(yield* count(store)).toBe(5)
          }))
          const batches: Array<number> = []
          expect(yield* store.purgeExclusive({ batchSize: 2, onBatch: (n) => Effect.sync(() => batches.push(n)) }))
            .toEqual(Option.some(5))
          expect(batches).toEqual([2, 2, 1])
          expect(yield* count(store)).toBe(0)
          expect(yield* store.purgeExclusive()).toEqual(Option.some(0))
        }))

      it.effect("a plain purge does not wait for the purge lock", () =>
        Effect.gen(function*() {
          const store = yield* make()
          for (let i = 0; i < 3; i++) yield* store.runOnce(key(), Effect.void)
          yield* age(store, Duration.days(40))
          yield* Effect.scoped(Effect.gen(function*() {
            yield* backend.holdPurgeLock(store)
            expect(yield* store.purge({ batchSize: 2 })).toBe(3)
          }))
          expect(yield* count(store)).toBe(0)
        }))
    })

    describe("retention", () => {
      it.effect("defaults to IdempotencyStore.defaultRetention; a given retention is what purge uses", () =>
        Effect.gen(function*() {
          expect(Duration.toMillis((yield* make()).retention)).toBe(Duration.toMillis(defaultRetention))
          expect(Duration.toMillis(defaultRetention)).toBe(Duration.toMillis(Duration.days(30)))
          const store = yield* make({ retention: "1 day" })
          expect(Duration.toMillis(store.retention)).toBe(Duration.toMillis(Duration.days(1)))
          yield* store.runOnce(key(), Effect.void)
          yield* age(store, Duration.hours(23))
          expect(yield* store.purge()).toBe(0)
          yield* age(store, Duration.hours(2))
          expect(yield* store.purge()).toBe(1)
        }))

      it.effect("an infinite retention keeps records forever", () =>
        Effect.gen(function*() {
          const store = yield* make({ retention: Duration.infinity })
          const k = key()
          yield* store.runOnce(k, Effect.void)
          yield* age(store, Duration.days(3650))
          expect(yield* store.purge()).toBe(0)
          expect(yield* store.purgeExclusive()).toEqual(Option.some(0))
          expect(yield* store.isProcessed(k)).toBe(true)
        }))

      it.effect("rejects a retention that is not a positive duration with an OutboxConfigError", () =>
        Effect.gen(function*() {
          for (const retention of [0, -1, "soon" as Duration.DurationInput, Duration.zero]) {
            expect(tagOf(yield* Effect.flip(make({ retention })))).toBe("OutboxConfigError")
          }
        }))
    })

    describe("keys", () => {
      it.effect("rejects invalid keys with an InvalidIdempotencyKeyError, without running the effect", () =>
        Effect.gen(function*() {
          const store = yield* make()
          let effects = 0
          const issue = Effect.sync(() => ++effects)
          const invalid: ReadonlyArray<IdempotencyKey> = [
            { messageId: "nope", consumer: "c" },
            { messageId: "", consumer: "c" },
            { messageId: MessageId.make(), consumer: "" },
            { messageId: MessageId.make(), consumer: "x".repeat(191) },
            { messageId: MessageId.make(), consumer: "a\u0000b" }
          ]
          for (const k of invalid) {
            expect(tagOf(yield* Effect.flip(store.runOnce(k, issue)))).toBe("InvalidIdempotencyKeyError")
            expect(tagOf(yield* Effect.flip(store.isProcessed(k)))).toBe("InvalidIdempotencyKeyError")
          }
          expect(effects).toBe(0)
          expect(yield* count(store)).toBe(0)
        }))

      it.effect("accepts consumer names of up to 190 characters, not bytes", () =>
        Effect.gen(function*() {
          const store = yield* make()
          const k = { messageId: MessageId.make(), consumer: "ü".repeat(190) }
          expect(yield* store.runOnce(k, Effect.succeed(1))).toEqual(Option.some(1))
          expect(yield* store.isProcessed(k)).toBe(true)
        }))
    })

    describe("setup", () => {
      it.effect("is idempotent: on a set-up store it applies nothing, also when run concurrently", () =>
        Effect.gen(function*() {
          const store = yield* make()
          expect(yield* store.setup).toEqual([])
          expect(yield* Effect.all([store.setup, store.setup, store.setup], { concurrency: "unbounded" })).toEqual([
            [],
            [],
            []
          ])
        }))
    })

    describe("with the caller's transaction (capability)", () => {
      const transaction = backend.transaction
      const within = <A, E2, R2>(self: Effect.Effect<A, E2, R2>) => transaction!(self)

      it.effect.skipIf(transaction === undefined)(
        "records commit and roll back with the caller's transaction; a failing effect takes only its own",
        () =>
          Effect.gen(function*() {
            const store = yield* make()
            const k = key()
            let effects = 0
            const issue = Effect.sync(() => ++effects)
            const rolledBack = yield* Effect.flip(within(Effect.gen(function*() {
              expect(yield* store.runOnce(k, issue)).toEqual(Option.some(1))
              // Within the transaction the record is seen, and a second run is skipped.
              expect(yield* store.isProcessed(k)).toBe(true)
              expect(yield* store.runOnce(k, issue)).toEqual(Option.none())
              return yield* Effect.fail(new Boom())
            })))
            expect(rolledBack).toBeInstanceOf(Boom)
            expect(yield* store.isProcessed(k)).toBe(false)
            expect(yield* count(store)).toBe(0)
            expect(yield* within(store.runOnce(k, issue))).toEqual(Option.some(2))
            expect(yield* store.isProcessed(k)).toBe(true)
            const other = key()
            yield* within(Effect.gen(function*() {
              const failed = yield* Effect.either(store.runOnce(other, Effect.zipRight(issue, Effect.fail(new Boom()))))
              expect(Either.isLeft(failed)).toBe(true)
              expect(yield* store.runOnce({ ...other, consumer: "ledger" }, issue)).toEqual(Option.some(4))
            }))
            expect(yield* store.isProcessed(other)).toBe(false)
            expect(yield* store.isProcessed({ ...other, consumer: "ledger" })).toBe(true)
            expect(yield* count(store)).toBe(2)
          })
      )

      it.effect.skipIf(transaction === undefined)(
        "purge never joins the caller's transaction: each batch commits on its own",
        () =>
          Effect.gen(function*() {
            const store = yield* make()
            for (let i = 0; i < 4; i++) yield* store.runOnce(key(), Effect.void)
            yield* age(store, Duration.days(40))
            const failed = yield* Effect.flip(
              within(Effect.zipRight(store.purge({ batchSize: 3 }), Effect.fail(new Boom())))
            )
            expect(failed).toBeInstanceOf(Boom)
            expect(yield* count(store)).toBe(0)
          })
      )
    })
  })
}
