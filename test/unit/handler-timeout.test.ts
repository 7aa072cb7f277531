/**
 * The handler timeout on the in-memory layers, driven by TestClock: a handler that never finishes is interrupted
 * once its timeout (the worker's `handlerTimeout`, 15 minutes by default, or the handler's own `timeout`) has
 * passed, and its message is retried by the retry strategy with a `HandlerTimeoutError` — or goes to the failure
 * queue when the strategy gives up. A shutdown still releases the message it interrupts.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import { HandlerTimeoutError } from "../../src/domain/Errors.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { memoryStack } from "../support/memory.js"
import { OrderPaid, OrderShipped } from "../support/messages.js"

const stack = memoryStack

/** A handler that signals its start, then never finishes; `interrupted` is set when it is interrupted. */
const hanging = () => {
  const started = Deferred.unsafeMake<void>(undefined as never)
  const state = { calls: 0, interrupted: 0 }
  const handle = () =>
    Effect.zipRight(
      Effect.sync(() => state.calls++),
      Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
    ).pipe(Effect.onInterrupt(() => Effect.sync(() => state.interrupted++)))
  return { started, state, handle }
}

/**
 * Waits until a fiber sleeps until `at` (ms on the TestClock), so that `TestClock.adjust` past it wakes it (the
 * lease renewal sleeps too, every 10 seconds: the instants waited for are not its). Gives
 * up with a defect after many turns of the scheduler rather than spinning for ever when nothing ever sleeps there.
 */
const sleepingUntil = (at: number) =>
  Effect.gen(function*() {
    for (let turn = 0; turn < 10_000; turn++) {
      if (Chunk.some(yield* TestClock.sleeps(), (instant) => instant === at)) return
      yield* Effect.yieldNow()
    }
    return yield* Effect.dieMessage(`No fiber sleeps until ${at} ms`)
  })

/**
 * The worker, stopping once nothing is ready. No shutdown grace by default: a test that fails leaves its worker to
 * be interrupted, and a grace period on the TestClock would never end.
 */
const run = (options: Partial<Worker.WorkerOptions> = {}) =>
  Worker.run({ transports: ["outbox"], stopWhenEmpty: true, shutdownTimeout: 0, ...options })

const redeliveries = (headers: string) =>
  JSON.parse(headers).redeliveries as ReadonlyArray<{ errorTag: string; errorMessage: string }>

describe("handler timeout", () => {
  it.effect("interrupts a handler that never finishes after 15 minutes and retries its message", () =>
    Effect.gen(function*() {
      const hang = hanging()
      const events: Array<Worker.WorkerEvent> = []
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run({ onEvent: (event) => Effect.sync(() => void events.push(event)) }))
        yield* Deferred.await(hang.started)
        yield* sleepingUntil(Duration.toMillis("15 minutes"))
        yield* TestClock.adjust(Duration.millis(Duration.toMillis("15 minutes") - 1))
        expect(Option.isNone(yield* Fiber.poll(worker))).toBe(true)
        expect(hang.state.interrupted).toBe(0)
        yield* TestClock.adjust("1 millis")
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 0, retried: 1, failed: 0 })
        expect(hang.state).toEqual({ calls: 1, interrupted: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        const [row] = yield* memory.messagesOf("outbox")
        expect(row!.messageId).toBe(id)
        expect(redeliveries(row!.headers)).toMatchObject([{
          errorTag: "HandlerTimeoutError",
          errorMessage: "Handler OrderPaid did not finish within 15m"
        }])
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, hang.handle)])))
      expect(events).toMatchObject([
        { _tag: "Started" },
        { _tag: "Retried", attempt: 1, error: { tag: "HandlerTimeoutError" } },
        { _tag: "Stopped" }
      ])
    }))

  it.effect("sends the message to the failure queue when the strategy does not retry", () =>
    Effect.gen(function*() {
      const hang = hanging()
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run({ handlerTimeout: "2 seconds" }))
        yield* Deferred.await(hang.started)
        yield* sleepingUntil(2_000)
        yield* TestClock.adjust("2 seconds")
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 0, retried: 0, failed: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messagesOf("outbox")).toEqual([])
        const [failed] = yield* memory.messagesOf("failed")
        expect(JSON.parse(failed!.headers).errorDetails).toMatchObject({
          tag: "HandlerTimeoutError",
          message: "Handler OrderPaid did not finish within 2s"
        })
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, hang.handle)], { default: { maxRetries: 0 } })))
    }))

  it.effect("lets a handler's own timeout override the worker's: a longer one", () =>
    Effect.gen(function*() {
      const slow = hanging()
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run({ handlerTimeout: "1 minute" }))
        yield* Deferred.await(slow.started)
        // The watchdog, idle at the start, looks again after the worker's timeout, then sleeps till the handler's.
        yield* sleepingUntil(60_000)
        yield* TestClock.adjust("59 minutes")
        expect(Option.isNone(yield* Fiber.poll(worker))).toBe(true)
        expect(slow.state.interrupted).toBe(0)
        yield* TestClock.adjust("1 minute")
        expect(yield* Fiber.join(worker)).toMatchObject({ retried: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        const [row] = yield* memory.messagesOf("outbox")
        expect(redeliveries(row!.headers)).toMatchObject([{
          errorTag: "HandlerTimeoutError",
          errorMessage: "Handler slow did not finish within 1h"
        }])
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, slow.handle, { name: "slow", timeout: "1 hour" })])))
    }))

  it.effect("lets a handler's own timeout override the worker's: a shorter one", () =>
    Effect.gen(function*() {
      const quick = hanging()
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run())
        yield* Deferred.await(quick.started)
        yield* sleepingUntil(5_000)
        yield* TestClock.adjust("5 seconds")
        expect(yield* Fiber.join(worker)).toMatchObject({ retried: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        const [row] = yield* memory.messagesOf("outbox")
        expect(redeliveries(row!.headers)).toMatchObject([{
          errorMessage: "Handler OrderPaid did not finish within 5s"
        }])
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, quick.handle, { timeout: Duration.seconds(5) })])))
    }))

  it.effect("retries only what timed out among several handlers: the others' success is kept", () =>
    Effect.gen(function*() {
      const hang = hanging()
      let fast = 0
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run())
        yield* Deferred.await(hang.started)
        yield* sleepingUntil(7_000)
        yield* TestClock.adjust("7 seconds")
        expect(yield* Fiber.join(worker)).toMatchObject({ retried: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        const [row] = yield* memory.messagesOf("outbox")
        const headers = JSON.parse(row!.headers)
        expect(headers.handledBy).toEqual(["fast"])
        expect(headers.redeliveries).toMatchObject([{ errorMessage: "Handler slow did not finish within 7s" }])
        expect(fast).toBe(1)
      }).pipe(Effect.provide(stack([
        Handlers.handler(OrderPaid, () => Effect.sync(() => fast++), { name: "fast" }),
        Handlers.handler(OrderPaid, hang.handle, { name: "slow", timeout: "7 seconds" })
      ])))
    }))

  it.effect("acks a handler that finishes within its timeout", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run({ handlerTimeout: "1 minute" }))
        yield* sleepingUntil(1_000)
        yield* TestClock.adjust("1 second")
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 1, retried: 0, failed: 0 })
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messages).toEqual([])
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, () => Effect.sleep("1 second"))])))
    }))

  it.effect("with concurrency, a timeout stops its own message only: the others in flight finish, once each", () =>
    Effect.gen(function*() {
      const hang = hanging()
      // OrderShipped 2, 3 and 4 start with the slow OrderPaid and finish only after its timeout has been recorded.
      const calls = new Map<number, number>()
      const effects = new Map<number, number>()
      let interruptedOthers = 0
      const othersStarted = Deferred.unsafeMake<void>(undefined as never)
      const finishOthers = Deferred.unsafeMake<void>(undefined as never)
      const timeoutRecorded = Deferred.unsafeMake<void>(undefined as never)
      const shipped = (message: OrderShipped) =>
        Effect.suspend(() => {
          calls.set(message.orderId, (calls.get(message.orderId) ?? 0) + 1)
          const started = calls.size === 3 ? Deferred.succeed(othersStarted, undefined) : Effect.void
          return Effect.zipRight(started, Deferred.await(finishOthers)).pipe(
            Effect.zipRight(
              Effect.sync(() => void effects.set(message.orderId, (effects.get(message.orderId) ?? 0) + 1))
            ),
            Effect.onInterrupt(() => Effect.sync(() => interruptedOthers++))
          )
        })
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        for (const orderId of [2, 3, 4]) yield* Outbox.dispatch(new OrderShipped({ orderId, carrier: "post" }))
        const worker = yield* Effect.fork(run({
          concurrency: 4,
          batchSize: 4,
          handlerTimeout: "1 hour",
          onEvent: (event) => event._tag === "Failed" ? Deferred.succeed(timeoutRecorded, undefined) : Effect.void
        }))
        yield* Deferred.await(hang.started)
        yield* Deferred.await(othersStarted)
        yield* sleepingUntil(60_000)
        yield* TestClock.adjust("1 minute")
        // The slow message is failed while its three neighbours are still in flight, none of them interrupted.
        yield* Deferred.await(timeoutRecorded)
        expect(hang.state).toEqual({ calls: 1, interrupted: 1 })
        expect(interruptedOthers).toBe(0)
        expect(effects.size).toBe(0)
        yield* Deferred.succeed(finishOthers, undefined)
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 3, retried: 0, failed: 1 })
        expect(Object.fromEntries(calls)).toEqual({ 2: 1, 3: 1, 4: 1 })
        expect(Object.fromEntries(effects)).toEqual({ 2: 1, 3: 1, 4: 1 })
        expect(interruptedOthers).toBe(0)
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messagesOf("outbox")).toEqual([])
        const [failed] = yield* memory.messagesOf("failed")
        expect(JSON.parse(failed!.body)).toMatchObject({ orderId: 1 })
        expect(JSON.parse(failed!.headers).errorDetails).toMatchObject({
          tag: "HandlerTimeoutError",
          message: "Handler OrderPaid did not finish within 1m"
        })
      }).pipe(Effect.provide(stack([
        Handlers.handler(OrderPaid, hang.handle, { timeout: "1 minute" }),
        Handlers.handler(OrderShipped, shipped)
      ], { default: { maxRetries: 0 } })))
    }))

  it.effect("with concurrency, does not wait for a handler that ignores its interruption", () =>
    Effect.gen(function*() {
      const started = Deferred.unsafeMake<void>(undefined as never)
      let others = 0
      yield* Effect.gen(function*() {
        for (const orderId of [1, 2, 3]) yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 5 }))
        const worker = yield* Effect.fork(run({ concurrency: 2, batchSize: 3, handlerTimeout: "1 minute" }))
        yield* Deferred.await(started)
        yield* sleepingUntil(60_000)
        yield* TestClock.adjust("1 minute")
        // The others are handled while the first handler still sleeps, uninterruptibly, for an hour.
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 2, failed: 1 })
        expect(others).toBe(2)
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messagesOf("outbox")).toEqual([])
        expect((yield* memory.messagesOf("failed")).map((row) => JSON.parse(row.body).orderId)).toEqual([1])
      }).pipe(Effect.provide(stack([
        Handlers.handler(OrderPaid, (paid) =>
          paid.orderId === 1
            ? Effect.zipRight(Deferred.succeed(started, undefined), Effect.uninterruptible(Effect.sleep("1 hour")))
            : Effect.sync(() => void others++))
      ], { default: { maxRetries: 0 } })))
    }))

  it.effect("does not wait for a handler that ignores its interruption", () =>
    Effect.gen(function*() {
      const started = Deferred.unsafeMake<void>(undefined as never)
      yield* Effect.gen(function*() {
        for (const orderId of [1, 2]) yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 5 }))
        const worker = yield* Effect.fork(run({ batchSize: 1, handlerTimeout: "1 minute" }))
        yield* Deferred.await(started)
        yield* sleepingUntil(60_000)
        yield* TestClock.adjust("1 minute")
        // The next message is handled while the first handler still sleeps, uninterruptibly, for an hour.
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 1, failed: 1 })
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messagesOf("outbox")).toEqual([])
        expect((yield* memory.messagesOf("failed")).map((row) => JSON.parse(row.body).orderId)).toEqual([1])
      }).pipe(Effect.provide(stack([
        Handlers.handler(OrderPaid, (paid) =>
          paid.orderId === 1
            ? Effect.zipRight(Deferred.succeed(started, undefined), Effect.uninterruptible(Effect.sleep("1 hour")))
            : Effect.void)
      ], { default: { maxRetries: 0 } })))
    }))

  it.effect("wakes for a handler whose deadline comes before the one the watchdog sleeps until", () =>
    Effect.gen(function*() {
      const hang = hanging()
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderShipped({ orderId: 1, carrier: "post" }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run({ batchSize: 1, handlerTimeout: "1 hour" }))
        // OrderShipped's handler takes 10 seconds of its hour; then OrderPaid's hangs, with 5 seconds to run.
        yield* sleepingUntil(10_000)
        yield* TestClock.adjust("10 seconds")
        yield* Deferred.await(hang.started)
        yield* sleepingUntil(15_000)
        yield* TestClock.adjust("5 seconds")
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 1, retried: 1 })
      }).pipe(Effect.provide(stack([
        Handlers.handler(OrderShipped, () => Effect.sleep("10 seconds")),
        Handlers.handler(OrderPaid, hang.handle, { timeout: "5 seconds" })
      ])))
    }))

  it.effect("a shutdown is not a timeout: the interrupted handler's message is released, not retried", () =>
    Effect.gen(function*() {
      const hang = hanging()
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const worker = yield* Effect.fork(run({ shutdownTimeout: "1 second" }))
        yield* Deferred.await(hang.started)
        const stopping = yield* Effect.fork(Fiber.interrupt(worker))
        yield* sleepingUntil(1_000)
        yield* TestClock.adjust("1 second")
        yield* Fiber.join(stopping)
        expect(hang.state.interrupted).toBe(1)
        const memory = yield* MemoryTransport.MemoryTransport
        const [row] = yield* memory.messagesOf("outbox")
        expect(row!.messageId).toBe(id)
        expect(JSON.parse(row!.headers).redeliveries).toBeUndefined()
        expect(yield* memory.messagesOf("failed")).toEqual([])
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, hang.handle)])))
    }))
})

describe("handler timeout, messages side by side", () => {
  it.effect("a shutdown is not a timeout: the handlers in flight are interrupted and their messages released", () =>
    Effect.gen(function*() {
      let started = 0
      let interrupted = 0
      const bothStarted = Deferred.unsafeMake<void>(undefined as never)
      const handle = () =>
        Effect.suspend(() => {
          const signal = ++started === 2 ? Deferred.succeed(bothStarted, undefined) : Effect.void
          return Effect.zipRight(signal, Effect.never)
        }).pipe(Effect.onInterrupt(() => Effect.sync(() => void interrupted++)))
      yield* Effect.gen(function*() {
        for (const orderId of [1, 2, 3]) yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 5 }))
        const worker = yield* Effect.fork(run({ concurrency: 2, batchSize: 3, shutdownTimeout: "1 second" }))
        yield* Deferred.await(bothStarted)
        const stopping = yield* Effect.fork(Fiber.interrupt(worker))
        yield* sleepingUntil(1_000)
        yield* TestClock.adjust("1 second")
        yield* Fiber.join(stopping)
        expect({ started, interrupted }).toEqual({ started: 2, interrupted: 2 })
        const memory = yield* MemoryTransport.MemoryTransport
        const rows = yield* memory.messagesOf("outbox")
        expect(rows.map((row) => [JSON.parse(row.body).orderId, row.deliveredAt, row.deliveries])).toEqual([
          [1, null, 0],
          [2, null, 0],
          [3, null, 0]
        ])
        expect(rows.map((row) => JSON.parse(row.headers).redeliveries)).toEqual([undefined, undefined, undefined])
        expect(yield* memory.messagesOf("failed")).toEqual([])
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, handle)])))
    }))
})

describe("handler timeout options", () => {
  const handlers = stack([Handlers.handler(OrderPaid, () => Effect.void)])

  it.effect("reject a worker handlerTimeout that is not a finite duration greater than zero", () =>
    Effect.gen(function*() {
      for (
        const [value, shown] of [
          [Infinity, "Infinity"],
          [0, "0"],
          [-1, "-1"],
          [NaN, "NaN"],
          ["0 seconds", "\"0 seconds\""],
          [Duration.infinity, "Infinity"],
          ["soon", "\"soon\""],
          [-5n, "-5"]
        ] as ReadonlyArray<readonly [unknown, string]>
      ) {
        // Cast: JavaScript callers and configuration can pass anything.
        const error = yield* Effect.flip(run({ handlerTimeout: value as Duration.DurationInput }))
        expect(error._tag, String(value)).toBe("OutboxConfigError")
        expect(error.message).toBe(
          `Worker option handlerTimeout must be a finite duration greater than zero, got ${shown}`
        )
      }
      expect(yield* run({ handlerTimeout: 50 })).toMatchObject({ stoppedBy: "empty" })
      expect(yield* run({ handlerTimeout: "15 minutes" })).toMatchObject({ stoppedBy: "empty" })
    }).pipe(Effect.provide(handlers)))

  it.effect("reject a handler timeout that is not a finite duration greater than zero", () =>
    Effect.gen(function*() {
      for (const value of [Infinity, 0, -1, NaN, "0 millis", Duration.infinity, "soon"] as ReadonlyArray<unknown>) {
        const timeout = value as Duration.DurationInput
        const error = yield* Effect.flip(Handlers.make([Handlers.handler(OrderPaid, () => Effect.void, { timeout })]))
        expect(error._tag, String(value)).toBe("OutboxConfigError")
        expect(error.message).toContain("Handler OrderPaid option timeout must be a finite duration greater than zero")
      }
    }))

  it("describe the timeout in the error", () => {
    const error = new HandlerTimeoutError({ handler: "invoices", timeoutMs: 900_000, message: "m" })
    expect(error).toMatchObject({ _tag: "HandlerTimeoutError", handler: "invoices", timeoutMs: 900_000 })
  })
})
