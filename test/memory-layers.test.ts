/**
 * The in-memory layers as users would use them in unit tests: the same worker, the same outcome
 * rules, with delays and leases driven by TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import { UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { OrderPaid, OrderShipped } from "./support/messages.js"

const memoryStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(handlers: Hs) =>
  Layer.mergeAll(Outbox.layer(), Handlers.layer(handlers), ScheduleRetryStrategy.layerDefault).pipe(
    Layer.provideMerge(MemoryTransport.layer())
  )

const drain = Worker.run({ transports: ["outbox"], stopWhenEmpty: true })

describe("in-memory layers", () => {
  it.effect("deliver dispatched messages to their handlers and ack them", () =>
    Effect.gen(function*() {
      const seen: Array<number> = []
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 5 }))
        expect(yield* drain).toMatchObject({ handled: 2, retried: 0, failed: 0 })
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messages).toEqual([])
      }).pipe(
        Effect.provide(memoryStack([Handlers.handler(OrderPaid, (m) => Effect.sync(() => seen.push(m.orderId)))]))
      )
      expect(seen).toEqual([1, 2])
    }))

  it.effect("retry with the default backoff on TestClock, then the failure queue", () =>
    Effect.gen(function*() {
      let calls = 0
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const memory = yield* MemoryTransport.MemoryTransport
        for (const seconds of [1, 3, 9, 27, 81]) {
          expect((yield* drain).retried).toBe(1)
          yield* TestClock.adjust(Duration.seconds(seconds - 0.5))
          expect(yield* drain).toMatchObject({ handled: 0, retried: 0, failed: 0 })
          yield* TestClock.adjust(Duration.seconds(0.5))
        }
        expect((yield* drain).failed).toBe(1)
        const [failed] = yield* memory.messagesOf("failed")
        expect(failed!.messageId).toBe(id)
        expect(JSON.parse(failed!.headers).redeliveries.length).toBe(5)
        expect(calls).toBe(6)
      }).pipe(Effect.provide(memoryStack([
        Handlers.handler(OrderPaid, () => Effect.suspend(() => (calls++, Effect.fail("nope"))))
      ])))
    }))

  it.effect("delayed dispatch waits for TestClock; Unrecoverable fails at once", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderShipped({ orderId: 1, carrier: "ups" }), { delay: "1 minute" })
        expect(yield* drain).toMatchObject({ handled: 0, retried: 0, failed: 0 })
        yield* TestClock.adjust("1 minute")
        expect(yield* drain).toMatchObject({ handled: 0, retried: 0, failed: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        const [failed] = yield* memory.messagesOf("failed")
        expect(JSON.parse(failed!.headers).errorDetails.tag).toBe("UnrecoverableMessageHandlingError")
      }).pipe(Effect.provide(memoryStack([
        Handlers.handler(OrderShipped, () => Effect.fail(new UnrecoverableMessageHandlingError({ message: "no" })))
      ])))
    }))

  it.effect("reject bad configuration with a typed error", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(MemoryTransport.make({ transports: { "bad name": {} } }))
      expect(error._tag).toBe("OutboxConfigError")
      const lease = yield* Effect.flip(MemoryTransport.make({ transports: { outbox: { redeliverTimeout: 0 } } }))
      expect(lease._tag).toBe("OutboxConfigError")
      const dup = yield* Effect.flip(Handlers.make([
        Handlers.handler(OrderPaid, () => Effect.void, { name: "x" }),
        Handlers.handler(OrderShipped, () => Effect.void, { name: "x" })
      ]))
      expect(dup.message).toContain("Duplicate handler name x")
    }))
})
