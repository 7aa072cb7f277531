/**
 * The in-memory idempotency store as users would use it in unit tests: the semantics of the
 * PostgreSQL store, with retention and purges driven by TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import * as MessageId from "../src/domain/MessageId.js"
import * as MemoryIdempotencyStore from "../src/layers/MemoryIdempotencyStore.js"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as IdempotencyStore from "../src/services/IdempotencyStore.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { OrderPaid } from "./support/messages.js"

class Boom {
  readonly _tag = "Boom"
}

const key = (consumer = "invoices") => ({ messageId: MessageId.make(), consumer })

describe("in-memory idempotency store", () => {
  it.effect("runs once per (message id, consumer); a failure records nothing, so the retry runs", () =>
    Effect.gen(function*() {
      const store = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
      const k = key()
      let effects = 0
      const issue = Effect.sync(() => ++effects)
      const failed = yield* Effect.either(store.runOnce(k, Effect.zipRight(issue, Effect.fail(new Boom()))))
      expect(Either.isLeft(failed) && failed.left).toBeInstanceOf(Boom)
      expect(yield* store.isProcessed(k)).toBe(false)
      expect(yield* store.runOnce(k, issue)).toEqual(Option.some(2))
      expect(yield* store.runOnce(k, issue)).toEqual(Option.none())
      expect(yield* store.runOnce({ ...k, messageId: k.messageId.toUpperCase() }, issue)).toEqual(Option.none())
      expect(yield* store.runOnce({ ...k, consumer: "ledger" }, issue)).toEqual(Option.some(3))
      expect(yield* store.runOnce({ ...k, consumer: "ledger" }, issue)).toEqual(Option.none())
      // A nested run of the key inside its own effect is skipped, as on PostgreSQL.
      const nested = key()
      expect(yield* store.runOnce(nested, store.runOnce(nested, issue))).toEqual(Option.some(Option.none()))
      expect(effects).toBe(3)
      const bad = yield* Effect.flip(store.runOnce({ messageId: "nope", consumer: "c" }, issue))
      expect(bad._tag).toBe("InvalidIdempotencyKeyError")
      expect((yield* store.records).length).toBe(3)
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer())))

  it.effect("a concurrent run of the key waits for the running one, then skips — or runs if it failed", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyStore.IdempotencyStore
      for (const outcome of ["succeeds", "fails"] as const) {
        const k = key()
        const started = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        const first = yield* Effect.fork(store.runOnce(k, Effect.gen(function*() {
          yield* Deferred.succeed(started, undefined)
          yield* Deferred.await(gate)
          if (outcome === "fails") return yield* Effect.fail(new Boom())
          return "first"
        })))
        yield* Deferred.await(started)
        const second = yield* Effect.fork(store.runOnce(k, Effect.succeed("second")))
        yield* TestClock.adjust("1 hour")
        expect(Option.isNone(yield* Fiber.poll(second))).toBe(true)
        yield* Deferred.succeed(gate, undefined)
        const firstResult = yield* Effect.either(Fiber.join(first))
        const secondResult = yield* Fiber.join(second)
        if (outcome === "succeeds") {
          expect(firstResult).toEqual(Either.right(Option.some("first")))
          expect(secondResult).toEqual(Option.none())
        } else {
          expect(Either.isLeft(firstResult)).toBe(true)
          expect(secondResult).toEqual(Option.some("second"))
        }
      }
      // Many at once: one runs.
      const k = key()
      let runs = 0
      const results = yield* Effect.all(
        Array.from({ length: 10 }, () =>
          store.runOnce(k, Effect.zipRight(Effect.sync(() => runs++), Effect.yieldNow()))),
        { concurrency: "unbounded" }
      )
      expect(results.filter(Option.isSome).length).toBe(1)
      expect(runs).toBe(1)
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer())))

  it.effect("an interrupted run records nothing and lets the next one run", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyStore.IdempotencyStore
      const k = key()
      const started = yield* Deferred.make<void>()
      const hanging = Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
      const fiber = yield* Effect.fork(store.runOnce(k, hanging))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      expect(yield* store.isProcessed(k)).toBe(false)
      expect(yield* store.runOnce(k, Effect.succeed(1))).toEqual(Option.some(1))
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer())))

  it.effect("purge follows the Clock: only records older than the window, in bounded batches", () =>
    Effect.gen(function*() {
      const store = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
      expect(Duration.toMillis(store.retention)).toBe(Duration.toMillis(Duration.days(30)))
      for (let i = 0; i < 5; i++) yield* store.runOnce(key("old"), Effect.void)
      yield* TestClock.adjust(Duration.days(10))
      for (let i = 0; i < 3; i++) yield* store.runOnce(key("new"), Effect.void)
      yield* TestClock.adjust(Duration.days(20))
      // The old ones are exactly 30 days old: not older than the window yet.
      expect(yield* store.purge()).toBe(0)
      yield* TestClock.adjust("1 millis")
      const batches: Array<number> = []
      expect(yield* store.purge({ batchSize: 2, onBatch: (n) => Effect.sync(() => batches.push(n)) })).toBe(5)
      expect(batches).toEqual([2, 2, 1])
      expect((yield* store.records).map((r) => r.consumer)).toEqual(["new", "new", "new"])
      expect(yield* store.purge({ olderThan: "10 days", batchSize: 1, maxBatches: 2 })).toBe(2)
      expect((yield* store.records).length).toBe(1)
      expect((yield* Effect.flip(store.purge({ maxBatches: 0 })))._tag).toBe("OutboxConfigError")
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer())))

  it.effect("purgeExclusive: None while another purge runs", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyStore.IdempotencyStore
      for (let i = 0; i < 4; i++) yield* store.runOnce(key(), Effect.void)
      yield* TestClock.adjust(Duration.days(2))
      const inBatch = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(store.purgeExclusive({
        batchSize: 2,
        onBatch: () => Effect.zipRight(Deferred.succeed(inBatch, undefined), Deferred.await(gate))
      }))
      yield* Deferred.await(inBatch)
      expect(yield* store.purgeExclusive()).toEqual(Option.none())
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(holder)).toEqual(Option.some(4))
      expect(yield* store.purgeExclusive()).toEqual(Option.some(0))
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer({ retention: "1 day" }))))

  it.effect("with the worker and the in-memory transport: a message delivered twice runs its side effect once", () =>
    Effect.gen(function*() {
      let invoices = 0
      let calls = 0
      const handlers = Handlers.layer([
        Handlers.handler(OrderPaid, IdempotencyStore.idempotent("invoices")((paid) =>
          Effect.sync(() => {
            calls++
            invoices += paid.amount
          })), { name: "invoices" })
      ])
      const stack = Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layerDefault).pipe(
        Layer.provideMerge(MemoryTransport.layer()),
        Layer.provideMerge(MemoryIdempotencyStore.layer())
      )
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const memory = yield* MemoryTransport.MemoryTransport
        const [stored] = yield* memory.messages
        // The same message sent again (a manual requeue): another row, the same message id.
        const transport = yield* Transport
        yield* transport.send("outbox", [{
          messageId: id,
          type: "OrderPaid",
          body: stored!.body,
          headers: stored!.headers,
          delayMs: 0
        }])
        expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({ handled: 2 })
        const store = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
        expect((yield* store.records).map((r) => [r.messageId, r.consumer])).toEqual([[id, "invoices"]])
      }).pipe(Effect.provide(stack))
      expect(calls).toBe(1)
      expect(invoices).toBe(5)
    }))
})
