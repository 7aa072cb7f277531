/**
 * Batch handlers (`Handlers.batch`) and the forwarder built on them, on the in-memory layers: one call for a claimed
 * batch's messages of a type, an outcome per message by the usual rules, the call's timeout, and a forward that
 * sends a batch in one `Transport.send` and isolates a message the target refuses.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import {
  RecoverableMessageHandlingError,
  TransportError,
  UnrecoverableMessageHandlingError
} from "../../src/domain/Errors.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Forwarder from "../../src/programs/Forwarder.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { OrderPaid, OrderShipped } from "../support/messages.js"

const stack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(
  handlers: Hs,
  around: Layer.Layer<Transport, never, Transport> = Layer.empty as any
) =>
  Layer.mergeAll(Outbox.layer(), Handlers.layer(handlers), ScheduleRetryStrategy.layerDefault).pipe(
    Layer.provideMerge(Layer.provideMerge(around, MemoryTransport.layer({ transports: { outbox: {}, far: {} } })))
  )

const drain = (options: Partial<Worker.WorkerOptions> = {}) =>
  Worker.run({ transports: ["outbox"], stopWhenEmpty: true, ...options })

const paid = (n: number) =>
  Effect.forEach(
    Array.from({ length: n }, (_, i) => i + 1),
    (orderId) => Outbox.dispatch(new OrderPaid({ orderId, amount: orderId }))
  )

/** The Transport with its `send` calls to `far` counted (messages per call), around the in-memory one. */
const countingSends = (calls: Array<number>, refuse?: (body: string) => boolean) =>
  Layer.effect(
    Transport,
    Effect.map(Transport, (inner) => ({
      ...inner,
      send: (name, messages) =>
        Effect.suspend(() => {
          if (name !== "far") return inner.send(name, messages)
          calls.push(messages.length)
          return refuse !== undefined && messages.some((m) => refuse(m.body))
            ? Effect.fail(new TransportError({ transport: name, operation: "send", message: "refused" }))
            : inner.send(name, messages)
        })
    } satisfies Context.Tag.Service<typeof Transport>))
  )

describe("batch handlers", () => {
  it.effect("one call for a claimed batch's messages of the type, in claim order; an outcome per message", () =>
    Effect.gen(function*() {
      const calls: Array<Array<number>> = []
      let shipped = 0
      const handlers = [
        Handlers.batch(OrderPaid, (items) =>
          Effect.sync(() => {
            calls.push(items.map((i) => i.message.orderId))
            return items.map(({ message }) =>
              message.orderId === 2
                ? Either.left(new RecoverableMessageHandlingError({ message: "later" }))
                : message.orderId === 3
                ? Either.left(new UnrecoverableMessageHandlingError({ message: "never" }))
                : Either.right(undefined)
            )
          })),
        Handlers.handler(OrderShipped, () => Effect.sync(() => void shipped++))
      ] as const
      yield* Effect.gen(function*() {
        yield* paid(5)
        yield* Outbox.dispatch(new OrderShipped({ orderId: 9, carrier: "ups" }))
        expect(yield* drain({ batchSize: 10 })).toMatchObject({ handled: 4, retried: 1, failed: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        const [failed] = yield* memory.messagesOf("failed")
        expect(JSON.parse(failed!.body).orderId).toBe(3)
        // The retried one comes back alone: a batch of one.
        yield* TestClock.adjust("1 second")
        expect(yield* drain({ batchSize: 10 })).toMatchObject({ handled: 0, retried: 1, failed: 0 })
      }).pipe(Effect.provide(stack(handlers)))
      expect(calls).toEqual([[1, 2, 3, 4, 5], [2]])
      expect(shipped).toBe(1)
    }))

  it.effect("a failed call fails each of its messages; a retry skips a batch handler that already succeeded", () =>
    Effect.gen(function*() {
      const calls: Array<number> = []
      let perMessage = 0
      yield* Effect.gen(function*() {
        yield* paid(3)
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 3 })
        yield* TestClock.adjust("1 second")
        expect(yield* drain()).toMatchObject({ handled: 3, retried: 0 })
      }).pipe(Effect.provide(stack([
        Handlers.batch(OrderPaid, (items) => Effect.sync(() => void calls.push(items.length))),
        Handlers.handler(
          OrderPaid,
          () => Effect.suspend(() => ++perMessage <= 3 ? Effect.fail("first time") : Effect.void)
        )
      ])))
      // Called once: on the retry, the messages carry its success (handledBy) and only the failed handler runs.
      expect(calls).toEqual([3])
      expect(perMessage).toBe(6)
    }))

  it.effect("a call past its timeout fails each of its messages with HandlerTimeoutError", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        yield* paid(2)
        const run = yield* Effect.fork(drain())
        yield* TestClock.adjust("5 seconds")
        expect(yield* Fiber.join(run)).toMatchObject({ handled: 0, retried: 2 })
        const memory = yield* MemoryTransport.MemoryTransport
        const headers = (yield* memory.messagesOf("outbox")).map((m) => JSON.parse(m.headers))
        expect(headers.map((h) => h.redeliveries[0].errorTag)).toEqual(["HandlerTimeoutError", "HandlerTimeoutError"])
      }).pipe(Effect.provide(stack([
        // It ignores its interruption: the worker does not wait for it.
        Handlers.batch(OrderPaid, () => Effect.uninterruptible(Effect.never), { timeout: Duration.seconds(5) })
      ])))
    }))

  it.effect("a result count that does not match the messages is a defect of each; idempotent is refused", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        yield* paid(2)
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 2 })
        const memory = yield* MemoryTransport.MemoryTransport
        const [first] = yield* memory.messagesOf("outbox")
        expect(JSON.parse(first!.headers).redeliveries[0].errorMessage).toContain("returned 1 results for 2 messages")
      }).pipe(Effect.provide(stack([Handlers.batch(OrderPaid, () => Effect.succeed([Either.right(1)]))])))
      const refused = yield* Effect.flip(Handlers.make([
        { ...Handlers.batch(OrderPaid, () => Effect.void), idempotent: true }
      ]))
      expect(refused.message).toContain("cannot be idempotent")
    }))
})

describe("Forwarder on batch handlers", () => {
  it.effect("forwards a claimed batch in one send, in order; a refused message fails alone", () =>
    Effect.gen(function*() {
      const calls: Array<number> = []
      yield* Effect.gen(function*() {
        yield* paid(6)
        expect(yield* drain({ batchSize: 50 })).toMatchObject({ handled: 6 })
        expect(calls).toEqual([6])
        const memory = yield* MemoryTransport.MemoryTransport
        expect((yield* memory.messagesOf("far")).map((m) => JSON.parse(m.body).orderId)).toEqual([1, 2, 3, 4, 5, 6])
      }).pipe(Effect.provide(stack(Forwarder.handlers([OrderPaid], { to: "far" }), countingSends(calls))))

      const refused: Array<number> = []
      yield* Effect.gen(function*() {
        yield* paid(4)
        expect(yield* drain({ batchSize: 50 })).toMatchObject({ handled: 3, retried: 1 })
        // The shared send, then its halves, then the halves of the half that failed.
        expect(refused).toEqual([4, 2, 2, 1, 1])
        const memory = yield* MemoryTransport.MemoryTransport
        expect((yield* memory.messagesOf("far")).map((m) => JSON.parse(m.body).orderId)).toEqual([1, 2, 4])
        expect((yield* memory.messagesOf("outbox")).map((m) => JSON.parse(m.body).orderId)).toEqual([3])
      }).pipe(Effect.provide(
        stack(
          Forwarder.handlers([OrderPaid], { to: "far" }),
          countingSends(refused, (body) => JSON.parse(body).orderId === 3)
        )
      ))
    }))

  it.effect("a target that refuses everything is given up after a few sends: every message retried, none failed", () =>
    Effect.gen(function*() {
      const sends: Array<number> = []
      yield* Effect.gen(function*() {
        yield* paid(100)
        expect(yield* drain({ batchSize: 100 })).toMatchObject({ handled: 0, retried: 100, failed: 0 })
      }).pipe(Effect.provide(
        stack(Forwarder.handlers([OrderPaid], { to: "far" }), countingSends(sends, () => true))
      ))
      expect(sends).toEqual([100, 50, 50, 25, 25, 25, 25, 13])
    }))
})
