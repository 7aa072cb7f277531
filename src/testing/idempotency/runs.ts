/**
 * The idempotency store suite's cases: one run per (message id, consumer); failures, defects and interruptions recording nothing; concurrent runs of a key.
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import { type IdempotencyStoreShape } from "../../services/IdempotencyStore.js"
import { Boom, type Context, key, tagOf } from "./shared.js"

/** @internal */
export const register = <S extends IdempotencyStoreShape, R>(
  { age, backend, count, it, make }: Context<S, R>
): void => {
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
}
