/**
 * The whole message path against a real PostgreSQL: dispatch in the business transaction, claim,
 * typed handlers, ack / retry / failure queue.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { RecoverableMessageHandlingError, UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import type * as Message from "../src/domain/Message.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid, OrderShipped } from "./support/messages.js"

const { withPg } = testDatabase("outbox")

const drain = (options: Partial<Worker.WorkerOptions> = {}) =>
  Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis", ...options })

const rows = (table: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{
      id: string
      message_id: string
      queue_name: string
      headers: string
      body: string
      delivery_count: number
      in_ms: number
    }>`SELECT id::text, message_id::text, queue_name, headers, body, delivery_count,
         extract(epoch FROM available_at - now()) * 1000 AS in_ms
       FROM ${sql(table)} ORDER BY id`)

/** Fakes the passage of time: every delayed message of the table becomes due now. */
const makeDue = (table: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE ${sql(table)} SET available_at = now()`)

describe("outbox on PostgreSQL", () => {
  it.live("commit delivers; rollback — also of a nested savepoint — never does", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      const handled: Array<number> = []
      yield* sql`CREATE TABLE orders_${sql.literal(table)} (id int primary key, paid boolean not null default false)`
      yield* sql`INSERT INTO orders_${sql.literal(table)} SELECT g, false FROM generate_series(1, 5) g`
      const pay = (id: number) =>
        Effect.gen(function*() {
          yield* sql`UPDATE orders_${sql.literal(table)} SET paid = true WHERE id = ${id}`
          yield* Outbox.dispatch(new OrderPaid({ orderId: id, amount: id * 10 }))
        })
      const program = Effect.gen(function*() {
        yield* sql.withTransaction(pay(1))
        yield* sql.withTransaction(Effect.zipRight(pay(2), Effect.fail("boom" as const))).pipe(Effect.ignore)
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* pay(3)
          yield* sql.withTransaction(Effect.zipRight(pay(4), Effect.fail("inner" as const))).pipe(Effect.ignore)
          yield* pay(5)
        }))
        const summary = yield* drain()
        expect(summary).toMatchObject({ handled: 3, retried: 0, failed: 0 })
      })
      yield* program.pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => handled.push(m.orderId)))]
      })))
      expect(handled).toEqual([1, 3, 5])
      const paid = yield* sql<{ id: number }>`SELECT id FROM orders_${sql.literal(table)} WHERE paid ORDER BY id`
      expect(paid.map((r) => r.id)).toEqual([1, 3, 5])
      expect(yield* rows(table)).toEqual([])
    })))

  it.live("stores a UUIDv7 message id, the tag as type, and the Schema-encoded body", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 7, amount: 1.5 }), { headers: { tenant: "a" } }).pipe(
        Effect.provide(outboxStack({ table, handlers: [] }))
      )
      const [row] = yield* rows(table)
      expect(row!.message_id).toBe(id)
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      expect(JSON.parse(row!.body)).toEqual({ _tag: "OrderPaid", orderId: 7, amount: 1.5 })
      expect(JSON.parse(row!.headers)).toEqual({ type: "OrderPaid", custom: { tenant: "a" } })
      expect(row!.queue_name).toBe("outbox")
    })))

  it.live("N concurrent workers handle every message exactly once", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      const total = 2_000
      const seen = new Map<number, number>()
      const stack = outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) =>
          Effect.sync(() => seen.set(m.orderId, (seen.get(m.orderId) ?? 0) + 1)).pipe(
            Effect.zipRight(Effect.yieldNow())
          ))]
      })
      yield* Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        for (let start = 0; start < total; start += 250) {
          yield* sql.withTransaction(outbox.dispatchAll(
            Array.from({ length: 250 }, (_, i) =>
              new OrderPaid({ orderId: start + i, amount: 1 }))
          ))
        }
        const summaries = yield* Effect.all(
          Array.from({ length: 4 }, () => drain({ batchSize: 25 })),
          { concurrency: "unbounded" }
        )
        expect(summaries.reduce((n, s) => n + s.handled, 0)).toBe(total)
        expect(summaries.filter((s) => s.handled > 0).length).toBeGreaterThan(1)
      }).pipe(Effect.provide(stack))
      expect(seen.size).toBe(total)
      expect([...seen.values()].every((count) => count === 1)).toBe(true)
      expect(yield* rows(table)).toEqual([])
    })))

  it.live("one consumer sees messages in (available_at, id) order across batches", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      const order: Array<number> = []
      yield* Effect.gen(function*() {
        const delays = [900, 0, 300, 0, 600, 0, 300, 900, 0, 100, 0, 600, 300, 0, 100]
        for (let i = 0; i < delays.length; i++) {
          yield* Outbox.dispatch(new OrderPaid({ orderId: i, amount: 0 }), { delay: Duration.millis(delays[i]!) })
        }
        // Fake the passage of time: everything due, relative order kept.
        yield* sql`UPDATE ${sql(table)} SET available_at = available_at - interval '1 second'`
        const expected = yield* sql<{ body: string }>`SELECT body FROM ${sql(table)} ORDER BY available_at, id`
        yield* drain({ batchSize: 4 })
        expect(order).toEqual(expected.map((r) => JSON.parse(r.body).orderId))
        expect(order).not.toEqual([...order].sort((a, b) => a - b))
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => order.push(m.orderId)))]
      })))
    })))

  it.live("retries after 1, 3, 9, 27, 81 s measured in the database, then the failure queue", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      let calls = 0
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        const delays: Array<number> = []
        for (let attempt = 1; attempt <= 5; attempt++) {
          expect(yield* drain()).toMatchObject({ handled: 0, retried: 1, failed: 0 })
          const [row] = yield* rows(table)
          delays.push(row!.in_ms)
          expect(row!.queue_name).toBe("outbox")
          yield* makeDue(table)
        }
        expect(delays.map((ms) => Math.round(ms / 1000))).toEqual([1, 3, 9, 27, 81])
        delays.forEach((ms, i) => expect(Math.abs(ms - [1, 3, 9, 27, 81][i]! * 1000)).toBeLessThan(1000))
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 0, failed: 1 })
        const [failed] = yield* rows(table)
        expect(failed!.queue_name).toBe("failed")
        expect(failed!.message_id).toBe(id)
        const headers = JSON.parse(failed!.headers)
        expect(headers.originalTransport).toBe("outbox")
        expect(headers.errorDetails.tag).toBe("Error")
        expect(headers.errorDetails.message).toBe("payment gateway down")
        expect(headers.redeliveries.map((r: { retryCount: number }) => r.retryCount)).toEqual([1, 2, 3, 4, 5])
        expect(headers.redeliveries.map((r: { delayMs: number }) => r.delayMs)).toEqual([
          1000,
          3000,
          9000,
          27000,
          81000
        ])
        expect(calls).toBe(6)
        // The failure queue is not consumed by the outbox worker.
        yield* makeDue(table)
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 0, failed: 0 })
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, () =>
          Effect.suspend(() => {
            calls++
            return Effect.fail(new Error("payment gateway down"))
          }))]
      })))
    })))

  it.live("RecoverableMessageHandlingError retries past the budget, after its retryDelay", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      let calls = 0
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        for (let i = 0; i < 3; i++) {
          expect(yield* drain()).toMatchObject({ handled: 0, retried: 1, failed: 0 })
          const [row] = yield* rows(table)
          expect(Math.abs(row!.in_ms - 7_000)).toBeLessThan(1000)
          yield* makeDue(table)
        }
        expect(yield* drain()).toMatchObject({ handled: 1, retried: 0, failed: 0 })
        expect(calls).toBe(4)
      }).pipe(Effect.provide(outboxStack({
        table,
        retry: { default: { maxRetries: 1 } },
        handlers: [Handlers.handler(OrderPaid, () =>
          Effect.suspend(() =>
            ++calls <= 3
              ? Effect.fail(new RecoverableMessageHandlingError({ message: "locked", retryDelay: Duration.seconds(7) }))
              : Effect.void
          ))]
      })))
    })))

  it.live("UnrecoverableMessageHandlingError skips every retry", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      let calls = 0
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: -1 }))
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 0, failed: 1 })
        const [row] = yield* rows(table)
        expect(row!.queue_name).toBe("failed")
        expect(row!.message_id).toBe(id)
        const headers = JSON.parse(row!.headers)
        expect(headers.errorDetails).toMatchObject({
          tag: "UnrecoverableMessageHandlingError",
          message: "negative amount"
        })
        expect(headers.redeliveries).toBeUndefined()
        expect(calls).toBe(1)
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, () =>
          Effect.suspend(() => {
            calls++
            return Effect.fail(new UnrecoverableMessageHandlingError({ message: "negative amount" }))
          }))]
      })))
    })))

  it.live("a defect goes through the retry strategy like any failure", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 1, failed: 0 })
        const headers = JSON.parse((yield* rows(table))[0]!.headers)
        expect(headers.redeliveries[0]).toMatchObject({ retryCount: 1, errorTag: "TypeError", errorMessage: "bad" })
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, () =>
          Effect.sync(() => {
            throw new TypeError("bad")
          }))]
      })))
    })))

  it.live("on retry, only the handlers that failed run again", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      const calls = { mail: 0, ledger: 0 }
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 1, failed: 0 })
        expect(JSON.parse((yield* rows(table))[0]!.headers).handledBy).toEqual(["mail"])
        yield* makeDue(table)
        expect(yield* drain()).toMatchObject({ handled: 1, retried: 0, failed: 0 })
        expect(calls).toEqual({ mail: 1, ledger: 2 })
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [
          Handlers.handler(OrderPaid, () => Effect.sync(() => void calls.mail++), { name: "mail" }),
          Handlers.handler(OrderPaid, () =>
            Effect.suspend(() => ++calls.ledger === 1 ? Effect.fail(new Error("ledger busy")) : Effect.void), {
            name: "ledger"
          })
        ]
      })))
    })))

  it.live("corrupt JSON, unknown types, schema-invalid bodies and corrupt headers reach the failure queue with their reasons", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      const handled: Array<number> = []
      yield* Effect.gen(function*() {
        const insert = (body: string, headers: string) =>
          sql`INSERT INTO ${sql(table)} (message_id, body, headers, queue_name, available_at)
              VALUES (gen_random_uuid(), ${body}, ${headers}, 'outbox', now())`
        yield* insert(`{"_tag":"OrderPaid","orderId":`, `{"type":"OrderPaid"}`)
        yield* insert(`{"_tag":"Refund","orderId":1}`, `{"type":"Refund"}`)
        yield* insert(`{"_tag":"OrderPaid","orderId":"one","amount":1}`, `{"type":"OrderPaid"}`)
        yield* insert(`{"_tag":"OrderPaid","orderId":2,"amount":1}`, `{"type":`)
        yield* insert(`{"_tag":"OrderPaid","orderId":3,"amount":1}`, `["not","an","object"]`)
        yield* insert(`{"_tag":"OrderShipped","orderId":4,"carrier":"ups"}`, `{"type":"OrderShipped"}`)
        yield* Outbox.dispatch(new OrderPaid({ orderId: 5, amount: 1 }))
        expect(yield* drain()).toMatchObject({ handled: 1, retried: 0, failed: 6 })
        expect(handled).toEqual([5])
        const stored = yield* rows(table)
        expect(stored.length).toBe(6)
        expect(stored.every((r) => r.queue_name === "failed")).toBe(true)
        const reasons = stored.map((r) => JSON.parse(r.headers).errorDetails)
        expect(reasons.map((d) => d.tag)).toEqual([
          "MessageDecodeError",
          "MessageDecodeError",
          "MessageDecodeError",
          "MessageDecodeError",
          "MessageDecodeError",
          "NoHandlerForMessageError"
        ])
        expect(reasons[0].message).toContain("not valid JSON")
        expect(reasons[1].message).toContain("Unknown message type \"Refund\"")
        expect(reasons[2].message).toContain("orderId")
        expect(reasons[3].message).toContain("Headers cannot be decoded")
        expect(stored.map((r) => JSON.parse(r.headers).originalTransport)).toEqual(Array(6).fill("outbox"))
        expect(JSON.parse(stored[3]!.headers).rawHeaders).toBe(`{"type":`)
        expect(stored[0]!.body).toBe(`{"_tag":"OrderPaid","orderId":`)
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [
          Handlers.handler(OrderPaid, (m) => Effect.sync(() => handled.push(m.orderId))),
          Handlers.handler(OrderShipped, () => Effect.void, { fromTransport: "amqp" })
        ]
      })))
    })))

  it.live("routing sends a type to its transports; an explicit transport list overrides it", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        yield* Outbox.dispatch(new OrderShipped({ orderId: 1, carrier: "dhl" }))
        yield* Outbox.dispatch(new OrderShipped({ orderId: 2, carrier: "dhl" }), { transportNames: ["outbox"] })
        const stored = yield* rows(table)
        expect(stored.map((r) => [JSON.parse(r.body).orderId, r.queue_name])).toEqual([
          [1, "outbox"],
          [1, "shipping"],
          [1, "audit"],
          [2, "outbox"]
        ])
        expect(JSON.parse(stored[3]!.headers).transportNames).toEqual(["outbox"])
        // both copies of a routed message share the message id
        expect(stored[1]!.message_id).toBe(stored[2]!.message_id)
      }).pipe(Effect.provide(outboxStack({
        table,
        transports: { outbox: {}, shipping: {}, audit: {} },
        routing: { routes: { OrderShipped: ["shipping", "audit"] } },
        handlers: []
      })))
    })))

  it.live("dispatch fails with a typed error for a message that is not a schema class or breaks its schema", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable()
      yield* Effect.gen(function*() {
        // A plain object does not compile (Outbox.MessageInstance): cast, as a JavaScript caller would pass it.
        const notSchema = yield* Effect.flip(Outbox.dispatch({ _tag: "Plain" } as Message.Tagged))
        expect(notSchema._tag).toBe("MessageEncodeError")
        const invalid = yield* Effect.flip(Outbox.dispatch(new OrderShipped({ orderId: 1, carrier: "" }, true)))
        expect(invalid._tag).toBe("MessageEncodeError")
        expect(invalid.message).toContain("carrier")
        const unknown = yield* Effect.flip(
          Outbox.dispatch(new OrderShipped({ orderId: 1, carrier: "x" }), { transportNames: ["nowhere"] })
        )
        expect(unknown._tag).toBe("UnknownTransportError")
        expect(yield* rows(table)).toEqual([])
      }).pipe(Effect.provide(outboxStack({ table, handlers: [] })))
    })))
})
