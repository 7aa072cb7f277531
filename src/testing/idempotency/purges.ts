/**
 * The idempotency store suite's cases: batched and windowed purges, `purgeExclusive`, the retention.
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { defaultRetention, type IdempotencyStoreShape } from "../../services/IdempotencyStore.js"
import { type Context, key, tagOf } from "./shared.js"

/** @internal */
export const register = <S extends IdempotencyStoreShape, R>(
  { age, backend, count, it, make }: Context<S, R>
): void => {
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
}
