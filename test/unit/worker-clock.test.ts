/**
 * A long-running worker on the in-memory layers, driven by `TestClock` alone: every wait of the worker (idle
 * polls, retry delays, the ack writer's interval) is on Effect's clock, and the tests synchronize on the
 * worker's own events, never on the event loop or a sleep.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Queue from "effect/Queue"
import * as TestClock from "effect/TestClock"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { OrderPaid } from "../support/messages.js"

/** The memory stack, with each ack the worker writes reported on `acked` (the transport itself unchanged). */
const memoryStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(
  handlers: Hs,
  acked?: Queue.Queue<ReadonlyArray<string>>
) => {
  const reporting = Layer.effect(
    Transport,
    Effect.map(Transport, (transport) =>
      acked === undefined ? transport : {
        ...transport,
        ack: (name: string, ids: ReadonlyArray<string>) =>
          Effect.zipLeft(transport.ack(name, ids), Queue.offer(acked, ids))
      })
  )
  return Layer.mergeAll(Outbox.layer(), Handlers.layer(handlers), ScheduleRetryStrategy.layerDefault).pipe(
    Layer.provideMerge(Layer.provideMerge(reporting, MemoryTransport.layer()))
  )
}

/** Forks a worker that reports every event on a queue; returns the fiber and the next event of a tag. */
const forkWorker = (options: Partial<Worker.WorkerOptions> = {}) =>
  Effect.gen(function*() {
    const events = yield* Queue.unbounded<Worker.WorkerEvent>()
    const fiber = yield* Effect.fork(
      Worker.run({ transports: ["outbox"], ...options, onEvent: (event) => Queue.offer(events, event) })
    )
    const next = <T extends Worker.WorkerEvent["_tag"]>(tag: T) =>
      Effect.flatMap(Queue.take(events), (event) =>
        event._tag === tag
          ? Effect.succeed(event as Extract<Worker.WorkerEvent, { _tag: T }>)
          : Effect.dieMessage(`expected ${tag}, got ${event._tag}`))
    yield* next("Started")
    return { fiber, next }
  })

describe("a worker driven by TestClock", () => {
  it.effect("retries on the clock's time, then moves to the failure queue; stops with a Stopped event", () =>
    Effect.gen(function*() {
      let calls = 0
      yield* Effect.gen(function*() {
        const { fiber, next } = yield* forkWorker()
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const delays: Array<number> = []
        for (let attempt = 1; attempt <= 5; attempt++) {
          const retried = yield* next("Retried")
          expect(retried).toMatchObject({ messageId: id, attempt })
          delays.push(retried.delayMs)
          yield* TestClock.adjust(retried.delayMs)
        }
        expect(delays).toEqual([1000, 3000, 9000, 27000, 81000])
        const failed = yield* next("Failed")
        expect(failed.messageId).toBe(id)
        expect(calls).toBe(6)
        const memory = yield* MemoryTransport.MemoryTransport
        expect((yield* memory.messagesOf("failed")).map((m) => m.messageId)).toEqual([id])
        yield* Fiber.interrupt(fiber)
      }).pipe(Effect.provide(memoryStack([
        Handlers.handler(OrderPaid, () => Effect.suspend(() => (calls++, Effect.fail("declined"))))
      ])))
    }))

  it.effect("a retried message succeeds once its delay has passed on the clock, not before", () =>
    Effect.gen(function*() {
      let calls = 0
      yield* Effect.gen(function*() {
        const { fiber, next } = yield* forkWorker()
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const retried = yield* next("Retried")
        yield* TestClock.adjust(retried.delayMs - 1)
        expect(calls).toBe(1)
        yield* TestClock.adjust(1)
        const handled = yield* next("Handled")
        expect(handled.messageId).toBe(retried.messageId)
        expect(calls).toBe(2)
        yield* Fiber.interrupt(fiber)
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messages).toEqual([])
      }).pipe(Effect.provide(memoryStack([
        Handlers.handler(OrderPaid, () => Effect.suspend(() => ++calls === 1 ? Effect.fail("once") : Effect.void))
      ])))
    }))

  it.effect("a delayed message is handled when the clock reaches it", () =>
    Effect.gen(function*() {
      const seen: Array<number> = []
      yield* Effect.gen(function*() {
        const { fiber, next } = yield* forkWorker({ sleep: "1 hour" })
        yield* Outbox.dispatch(new OrderPaid({ orderId: 7, amount: 5 }), { delay: "1 minute" })
        yield* TestClock.adjust("59 seconds")
        expect(seen).toEqual([])
        yield* TestClock.adjust("1 second")
        yield* next("Handled")
        expect(seen).toEqual([7])
        yield* Fiber.interrupt(fiber)
      }).pipe(
        Effect.provide(memoryStack([Handlers.handler(OrderPaid, (m) => Effect.sync(() => seen.push(m.orderId)))]))
      )
    }))

  it.effect("in a long batch, the finished messages are acked after the ack interval on the clock", () =>
    Effect.gen(function*() {
      const acked = yield* Queue.unbounded<ReadonlyArray<string>>()
      const release = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const memory = yield* MemoryTransport.MemoryTransport
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 5 }))
        const { fiber, next } = yield* forkWorker({ batchSize: 10 })
        const first = yield* next("Handled")
        // The second handler hangs: without the interval the first ack would wait for the batch's end.
        expect(yield* Queue.size(acked)).toBe(0)
        yield* TestClock.adjust("25 millis") // the ack interval
        yield* Queue.take(acked)
        expect((yield* memory.messages).map((m) => m.messageId)).not.toContain(first.messageId)
        yield* Deferred.succeed(release, undefined)
        yield* next("Handled")
        yield* Fiber.interrupt(fiber)
        expect(yield* memory.messages).toEqual([])
      }).pipe(Effect.provide(memoryStack([
        Handlers.handler(OrderPaid, (m) => m.orderId === 2 ? Deferred.await(release) : Effect.void)
      ], acked)))
    }))

  it.effect("a hook that dies is logged and the worker goes on; start and stop are one line each", () =>
    Effect.gen(function*() {
      const logs: Array<string> = []
      const recorder = Logger.make(({ message }) => void logs.push(String(message)))
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 5 }))
        const summary = yield* Worker.run({
          transports: ["outbox"],
          stopWhenEmpty: true,
          onEvent: (event) =>
            event._tag === "Handled" ?
              Effect.sync(() => {
                throw new Error("hook bug")
              }) :
              Effect.void
        })
        expect(summary).toMatchObject({ handled: 2, stoppedBy: "empty" })
      }).pipe(
        Effect.provide(memoryStack([Handlers.handler(OrderPaid, () => Effect.void)])),
        Effect.provide(Logger.replace(Logger.defaultLogger, recorder))
      )
      expect(logs.filter((line) => line.includes("onEvent hook failed on Handled"))).toHaveLength(2)
      const started = logs.filter((line) => line.startsWith("outbox worker: started"))
      expect(started).toHaveLength(1)
      expect(started[0]).toMatch(
        /^outbox worker: started \(pid \d+\): transports outbox; batch 50, concurrency 1, prefetch on; lease outbox 30s$/
      )
      const stopped = logs.filter((line) => line.startsWith("outbox worker: stopped"))
      expect(stopped).toEqual([
        "outbox worker: stopped (no message ready) after 0 ms: 2 handled, 0 retried, 0 moved to the failure queue"
      ])
    }))

  it.effect("an interrupted worker reports Stopped with its counts", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        const events: Array<Worker.WorkerEvent> = []
        const handled = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(Worker.run({
          transports: ["outbox"],
          onEvent: (event) =>
            Effect.zipRight(
              Effect.sync(() => events.push(event)),
              event._tag === "Handled" ? Deferred.succeed(handled, undefined) : Effect.void
            )
        }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        yield* Deferred.await(handled)
        yield* TestClock.adjust("10 seconds")
        yield* Fiber.interrupt(fiber)
        expect(events.map((e) => e._tag)).toEqual(["Started", "Handled", "Stopped"])
        expect(events[2]).toMatchObject({
          stoppedBy: "interrupted",
          handled: 1,
          retried: 0,
          failed: 0,
          durationMs: 10_000
        })
      }).pipe(Effect.provide(memoryStack([Handlers.handler(OrderPaid, () => Effect.void)])))
    }))
})
