/**
 * The whole message path against MariaDB: dispatch in the business transaction, claim, typed handlers, ack, retry
 * and the failure queue; the claim's plan; a Symfony table adopted; a worker woken by a producer of its process.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { beforeAll } from "vitest"
import * as MysqlTransport from "../src/layers/MysqlTransport.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { claimNow, uniqueTable } from "./support/harness.js"
import { numbers, OrderPaid, outgoing } from "./support/messages.js"
import { createTestMysqlDatabase, mysqlLayer, mysqlOutboxStack } from "./support/mysql.js"

let url = ""
beforeAll(async () => {
  url = await createTestMysqlDatabase("outbox_mysql")
})
const withMysql = <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.suspend(() => Effect.provide(self, Layer.orDie(mysqlLayer(url))))

const drain = (options: Partial<Worker.WorkerOptions> = {}) =>
  Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis", ...options })

const rows = (table: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ id: string; message_id: string; queue_name: string; headers: string; delivery_count: number }>`
      SELECT CAST(id AS CHAR) AS id, message_id, queue_name, headers, delivery_count FROM ${sql(table)}
      ORDER BY ${sql(table)}.id`
  )

/** Fakes the passage of time: every delayed message of the table becomes due now. */
const makeDue = (table: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE ${sql(table)} SET available_at = UTC_TIMESTAMP(6)`)

describe("outbox on MariaDB", () => {
  it.live("commit delivers; rollback — also of a nested savepoint — never does", () =>
    withMysql(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      const orders = `orders_${table}`
      const handled: Array<number> = []
      yield* sql`CREATE TABLE ${sql(orders)} (id INT PRIMARY KEY, paid BOOLEAN NOT NULL DEFAULT FALSE)`
      yield* sql`INSERT INTO ${sql(orders)} (id) VALUES (1), (2), (3), (4), (5)`
      const pay = (id: number) =>
        Effect.gen(function*() {
          yield* sql`UPDATE ${sql(orders)} SET paid = TRUE WHERE id = ${id}`
          yield* Outbox.dispatch(new OrderPaid({ orderId: id, amount: id * 10 }))
        })
      yield* Effect.gen(function*() {
        yield* sql.withTransaction(pay(1))
        yield* sql.withTransaction(Effect.zipRight(pay(2), Effect.fail("boom" as const))).pipe(Effect.ignore)
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* pay(3)
          yield* sql.withTransaction(Effect.zipRight(pay(4), Effect.fail("inner" as const))).pipe(Effect.ignore)
          yield* pay(5)
        }))
        expect(yield* drain()).toMatchObject({ handled: 3, retried: 0, failed: 0 })
      }).pipe(Effect.provide(mysqlOutboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => handled.push(m.orderId)))]
      })))
      expect(handled).toEqual([1, 3, 5])
      const paid = yield* sql<{ id: number }>`SELECT id FROM ${sql(orders)} WHERE paid ORDER BY id`
      expect(paid.map((r) => r.id)).toEqual([1, 3, 5])
      expect(yield* rows(table)).toEqual([])
    })))

  it.live("retries in place with the strategy's delays, then moves the message to the failure queue", () =>
    withMysql(Effect.gen(function*() {
      const table = uniqueTable()
      let calls = 0
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        const [first] = yield* rows(table)
        for (let attempt = 1; attempt <= 2; attempt++) {
          expect(yield* drain()).toMatchObject({ handled: 0, retried: 1, failed: 0 })
          const [row] = yield* rows(table)
          expect(row).toMatchObject({ id: first!.id, queue_name: "outbox", message_id: id })
          yield* makeDue(table)
        }
        expect(yield* drain()).toMatchObject({ handled: 0, retried: 0, failed: 1 })
        const [failed] = yield* rows(table)
        expect(failed).toMatchObject({ id: first!.id, queue_name: "failed", message_id: id })
        const headers = JSON.parse(failed!.headers)
        expect(headers.originalTransport).toBe("outbox")
        expect(headers.errorDetails.message).toBe("payment gateway down")
        expect(headers.redeliveries.map((r: { delayMs: number }) => r.delayMs)).toEqual([1000, 3000])
        expect(calls).toBe(3)
      }).pipe(Effect.provide(mysqlOutboxStack({
        table,
        retry: { default: { maxRetries: 2 } },
        handlers: [Handlers.handler(OrderPaid, () =>
          Effect.suspend(() => {
            calls++
            return Effect.fail(new Error("payment gateway down"))
          }))]
      })))
    })))

  it.live("a worker polling every ten minutes handles what its own process dispatches at once, in a transaction too", () =>
    withMysql(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      const handled = yield* Deferred.make<number>()
      const next = yield* Deferred.make<number>()
      yield* Effect.scoped(
        Effect.gen(function*() {
          yield* Effect.forkScoped(Worker.run({ transports: ["outbox"], sleep: "10 minutes" }))
          // Let the worker find the queue empty and wait.
          expect((yield* claimNow("outbox", 1)).length).toBe(0)
          yield* Effect.sleep("50 millis")
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
          expect(yield* Deferred.await(handled)).toBe(1)
          yield* Effect.sleep("50 millis")
          // Committed 30 ms after the send: the hint comes before the row is visible.
          yield* sql.withTransaction(
            Effect.zipRight(Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 })), Effect.sleep("30 millis"))
          )
          expect(yield* Deferred.await(next)).toBe(2)
        }).pipe(Effect.provide(mysqlOutboxStack({
          table,
          handlers: [
            Handlers.handler(
              OrderPaid,
              (m) =>
                Effect.flatMap(
                  Deferred.succeed(handled, m.orderId),
                  (first) => first ? Effect.void : Effect.asVoid(Deferred.succeed(next, m.orderId))
                )
            )
          ]
        })))
      )
    })))

  it.live("a claim inside the caller's transaction joins it: its lease and acks commit or roll back with it", () =>
    withMysql(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      const transport = yield* MysqlTransport.make({ table, autoSetup: true })
      yield* transport.send("outbox", [outgoing(1), outgoing(2)])
      const inTransaction = (acks: ReadonlyArray<string>) =>
        sql.withTransaction(
          Effect.scoped(Effect.flatMap(transport.open(["outbox"]), (session) => session.claim("outbox", 1, acks)))
        )
      // Rolled back: the lease goes with it, and the message is claimable again.
      const rolledBack = yield* Effect.flip(
        sql.withTransaction(Effect.zipRight(inTransaction([]), Effect.fail("undo" as const)))
      )
      expect(rolledBack).toBe("undo")
      const [first] = (yield* inTransaction([])).messages
      expect(numbers([first!])).toEqual([1])
      // Committed: the lease holds; the ack of the first rides on the claim of the second.
      const claimed = yield* inTransaction([first!.id])
      expect(numbers(claimed.messages)).toEqual([2])
      const empty = yield* inTransaction([claimed.messages[0]!.id])
      expect(empty.messages).toEqual([])
      expect(yield* rows(table)).toEqual([])
    })))

  it.live("the claim reads the claim index in its order: no sort, so it locks only the rows it takes", () =>
    withMysql(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable()
      yield* Effect.flatMap(TransportAdmin, (admin) => admin.setup).pipe(
        Effect.provide(MysqlTransport.layer({ table }))
      )
      const plan = yield* sql.unsafe<{ key: string | null; Extra: string | null }>(
        `EXPLAIN SELECT id FROM \`${table}\` WHERE queue_name = 'outbox' AND available_at <= UTC_TIMESTAMP(6)
          AND (delivered_at IS NULL OR delivered_at < UTC_TIMESTAMP(6) - INTERVAL 30000000 MICROSECOND)
          ORDER BY \`${table}\`.available_at, \`${table}\`.delivered_at, \`${table}\`.id LIMIT 50
          FOR UPDATE SKIP LOCKED`
      )
      expect(plan[0]!.key).toBe(`${table}_claim_idx`)
      expect(plan[0]!.Extra ?? "").not.toMatch(/filesort/)
    })))
})
