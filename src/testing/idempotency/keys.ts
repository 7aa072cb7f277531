/**
 * The idempotency store suite's cases: key validation, setup, and records joining the caller's transaction (a capability).
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type { IdempotencyKey } from "../../domain/IdempotencyKey.js"
import * as MessageId from "../../domain/MessageId.js"
import { type IdempotencyStoreShape } from "../../services/IdempotencyStore.js"
import { Boom, type Context, key, tagOf } from "./shared.js"

/** @internal */
export const register = <S extends IdempotencyStoreShape, R>(
  { age, backend, count, it, make }: Context<S, R>
): void => {
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
}
