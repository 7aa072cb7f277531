/**
 * Unit tests of the application's handlers (examples/http-api/app.ts) on the in-memory layers: no database, and
 * time is `TestClock`'s, so a retry 1 second later, or the failure queue after the whole retry budget
 * (1 + 3 + 9 + 27 + 81 s), takes no time at all. The tests wait on the worker's own events (`onEvent`), never on a
 * sleep.
 */
import { SqlError } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Queue, TestClock } from "effect"
import { MemoryTransport, Outbox, ScheduleRetryStrategy, Worker } from "effect-outbox"
import { handlers, Invoices, OrderPaid } from "../http-api/app.js"

/** An invoice service that is down for its first `failures` calls; `issued` lists the invoices it issued. */
const fakeInvoices = (failures: number) => {
  const issued: Array<number> = []
  let calls = 0
  const layer = Layer.succeed(Invoices, {
    issue: (orderId) =>
      Effect.suspend(() =>
        ++calls <= failures
          ? Effect.fail(new SqlError.SqlError({ cause: new Error("connection refused"), message: "invoicing is down" }))
          : Effect.sync(() => issued.push(orderId))
      )
  })
  return { issued, layer }
}

/** Forks the worker with every event offered to a queue; `next(tag)` takes the next event and checks its tag. */
const startWorker = Effect.gen(function*() {
  const events = yield* Queue.unbounded<Worker.WorkerEvent>()
  const fiber = yield* Effect.fork(
    Worker.run({ transports: ["outbox"], onEvent: (event) => Queue.offer(events, event) })
  )
  const next = <T extends Worker.WorkerEvent["_tag"]>(tag: T) =>
    Effect.flatMap(Queue.take(events), (event) =>
      event._tag === tag
        ? Effect.succeed(event as Extract<Worker.WorkerEvent, { _tag: T }>)
        : Effect.dieMessage(`expected ${tag}, got ${event._tag}`))
  yield* next("Started")
  return { fiber, next }
})

// #region testing
const TestOutbox = (invoices: Layer.Layer<Invoices>) =>
  Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layerDefault).pipe(
    Layer.provide(invoices),
    Layer.provideMerge(MemoryTransport.layer())
  )

it.effect("retries when invoicing is down, and invoices once it is back", () => {
  const invoices = fakeInvoices(1)
  return Effect.gen(function*() {
    const { fiber, next } = yield* startWorker
    const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amountCents: 1200 }))
    const retried = yield* next("Retried")
    expect(retried).toMatchObject({ messageId: id, attempt: 1, delayMs: 1000 })
    expect(invoices.issued).toEqual([])
    yield* TestClock.adjust(retried.delayMs) // the retry is due: no real second passes
    expect(yield* next("Handled")).toMatchObject({ messageId: id })
    expect(invoices.issued).toEqual([1])
    const memory = yield* MemoryTransport.MemoryTransport
    expect(yield* memory.messages).toEqual([]) // acked: nothing left, nothing failed
    yield* Fiber.interrupt(fiber)
  }).pipe(Effect.provide(TestOutbox(invoices.layer)))
})
// #endregion

describe("the OrderPaid handler's other outcomes", () => {
  it.effect("moves a negative amount to the failure queue at once, without retrying", () => {
    const invoices = fakeInvoices(0)
    return Effect.gen(function*() {
      const { fiber, next } = yield* startWorker
      const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amountCents: -500 }))
      const failed = yield* next("Failed")
      expect(failed.messageId).toBe(id)
      expect(failed.error.message).toContain("negative amount")
      const memory = yield* MemoryTransport.MemoryTransport
      expect((yield* memory.messagesOf("failed")).map((m) => m.messageId)).toEqual([id])
      expect(yield* memory.messagesOf("outbox")).toEqual([])
      expect(invoices.issued).toEqual([])
      yield* Fiber.interrupt(fiber)
    }).pipe(Effect.provide(TestOutbox(invoices.layer)))
  })

  it.effect("gives up after the retry budget (1, 3, 9, 27, 81 s) and moves the message to the failure queue", () => {
    const invoices = fakeInvoices(Infinity)
    return Effect.gen(function*() {
      const { fiber, next } = yield* startWorker
      const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 3, amountCents: 700 }))
      const delays: Array<number> = []
      for (let attempt = 1; attempt <= 5; attempt++) {
        const retried = yield* next("Retried")
        expect(retried).toMatchObject({ messageId: id, attempt })
        delays.push(retried.delayMs)
        yield* TestClock.adjust(retried.delayMs)
      }
      expect(delays).toEqual([1000, 3000, 9000, 27000, 81000])
      const failed = yield* next("Failed")
      expect(failed.error.tag).toBe("SqlError")
      const memory = yield* MemoryTransport.MemoryTransport
      expect((yield* memory.messagesOf("failed")).map((m) => m.messageId)).toEqual([id])
      expect(invoices.issued).toEqual([])
      yield* Fiber.interrupt(fiber)
    }).pipe(Effect.provide(TestOutbox(invoices.layer)))
  })
})
