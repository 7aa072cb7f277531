/**
 * Handlers' log lines carry the message they handle (messageId, messageType, transport, orderingKey, attempt), also
 * from the fibers a handler forks and with several handlers running at once; the worker's own lines about no message
 * do not.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"
import * as TestClock from "effect/TestClock"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { memoryStack } from "../support/memory.js"
import { OrderPaid, OrderShipped, outgoing } from "../support/messages.js"

interface Line {
  readonly message: string
  readonly annotations: Record<string, unknown>
}

/** A logger that keeps every line with its annotations. */
const capture = () => {
  const lines: Array<Line> = []
  const logger = Logger.make(({ annotations, message }) => {
    lines.push({
      message: String(Array.isArray(message) ? message.join(" ") : message),
      annotations: Object.fromEntries(HashMap.toEntries(annotations))
    })
  })
  return { lines, layer: Logger.replace(Logger.defaultLogger, logger) }
}

const stack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(handlers: Hs) =>
  memoryStack(handlers, { default: { maxRetries: 1, delay: "1 second" } })

const about = (lines: ReadonlyArray<Line>, text: string) => lines.filter((line) => line.message.includes(text))

describe("handler log annotations", () => {
  it.effect("a handler's lines, and those of a fiber it forks, carry its message and attempt", () => {
    const { layer, lines } = capture()
    let runs = 0
    const handler = Handlers.handler(OrderPaid, (paid) =>
      Effect.gen(function*() {
        runs++
        yield* Effect.log(`handling order ${paid.orderId}`)
        yield* Fiber.join(yield* Effect.fork(Effect.log(`forked for order ${paid.orderId}`)))
        if (runs === 1) return yield* Effect.fail("first run fails")
      }))
    return Effect.gen(function*() {
      const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 7, amount: 1 }))
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], stopWhenEmpty: false, limit: 2 }))
      yield* TestClock.adjust("2 seconds")
      expect(yield* Fiber.join(worker)).toMatchObject({ handled: 1, retried: 1 })
      const expected = { messageId: id, messageType: "OrderPaid", transport: "outbox", worker: "effect-outbox" }
      expect(about(lines, "handling order 7").map((l) => l.annotations)).toEqual([
        { ...expected, attempt: 1 },
        { ...expected, attempt: 2 }
      ])
      expect(about(lines, "forked for order 7").map((l) => l.annotations)).toEqual([
        { ...expected, attempt: 1 },
        { ...expected, attempt: 2 }
      ])
      // The worker's line about the retry is about this message too; its start line is about none.
      expect(about(lines, "retry #1")[0]?.annotations).toMatchObject(expected)
      expect(about(lines, "started")[0]?.annotations).toEqual({ worker: "effect-outbox" })
    }).pipe(Effect.provide(stack([handler])), Effect.provide(layer))
  })

  it.effect("with concurrency, each handler's lines carry its own message", () => {
    const { layer, lines } = capture()
    return Effect.gen(function*() {
      const ids = []
      for (const orderId of [1, 2, 3, 4]) ids.push(yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 })))
      const shipped = yield* Outbox.dispatch(new OrderShipped({ orderId: 5, carrier: "post" }), {
        orderingKey: "order-5"
      })
      yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, concurrency: 3 })
      for (const [i, id] of ids.entries()) {
        const [before, after] = about(lines, `order ${i + 1} `)
        expect(before?.annotations).toMatchObject({ messageId: id, messageType: "OrderPaid" })
        expect(after?.annotations).toMatchObject({ messageId: id, messageType: "OrderPaid" })
      }
      expect(about(lines, "shipping 5")[0]?.annotations).toMatchObject({
        messageId: shipped,
        messageType: "OrderShipped",
        orderingKey: "order-5"
      })
      expect(about(lines, "order 1 starts")[0]?.annotations).not.toHaveProperty("orderingKey")
    }).pipe(
      Effect.provide(stack([
        Handlers.handler(OrderPaid, (paid) =>
          Effect.log(`order ${paid.orderId} starts`).pipe(
            Effect.zipRight(Effect.yieldNow()),
            Effect.zipRight(Effect.log(`order ${paid.orderId} ends`))
          )),
        Handlers.handler(OrderShipped, (shipped) => Effect.log(`shipping ${shipped.orderId}`))
      ])),
      Effect.provide(layer)
    )
  })

  it.effect("a message that cannot be decoded is not logged under the message before it", () => {
    const { layer, lines } = capture()
    return Effect.gen(function*() {
      yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
      const transport = yield* Transport
      yield* transport.send("outbox", [{ ...outgoing(1), type: "OrderPaid", body: "{ not json" }])
      yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, batchSize: 10 })
      const moved = about(lines, "moved to the failure queue:")
      expect(moved).toHaveLength(1)
      expect(moved[0]!.annotations).not.toHaveProperty("messageId")
    }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, () => Effect.log("handled"))])), Effect.provide(layer))
  })
})
