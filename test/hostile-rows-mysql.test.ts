/**
 * Rows no worker writes, on MariaDB, must not stop, hang or wedge a worker: bodies and headers that are not JSON, an
 * unknown type, JSON nested past the stack, a 5 MB body, a delivery count at the integer's limit, a zero date and the
 * largest date in the time columns. Each ends handled, in the failure queue with a bounded reason, or — the date of
 * year 9999 — waits as a delayed message; its valid neighbours are handled.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { beforeAll } from "vitest"
import * as MessageId from "../src/domain/MessageId.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"
import { createTestMysqlDatabase, mysqlLayer, mysqlOutboxStack } from "./support/mysql.js"

let url = ""
beforeAll(async () => {
  url = await createTestMysqlDatabase("hostile_mysql")
})

/** What a stored reason may weigh at most: message and cause are bounded, with room for the JSON around them. */
const maxHeadersLength = 12_000

const paid = (orderId: number) => JSON.stringify({ _tag: "OrderPaid", orderId, amount: 1 })
const typed = (type: string) => JSON.stringify({ type })

describe("hostile rows on MariaDB", () => {
  it.live(
    "end handled, failed with a bounded reason, or waiting; the worker goes on with the valid ones",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("hostile")
        const handled: Array<number> = []
        yield* Effect.gen(function*() {
          yield* (yield* TransportAdmin).setup
          const sql = yield* SqlClient.SqlClient
          const insert = (
            label: string,
            body: string,
            headers: string,
            extra: { deliveries?: number; at?: string } = {}
          ) =>
            sql.unsafe(
              `INSERT INTO \`${table}\` (message_id, body, headers, queue_name, created_at, available_at, delivery_count,
               crash_count)
             VALUES (?, ?, ?, 'outbox', UTC_TIMESTAMP(6), ${extra.at ?? "UTC_TIMESTAMP(6)"}, ?, ?)`,
              [MessageId.make(), body, headers, extra.deliveries ?? 0, extra.deliveries ?? 0]
            ).pipe(Effect.as(label))
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
          yield* insert("not json", "{not json", typed("OrderPaid"))
          yield* insert("headers not json", paid(2), "{{")
          yield* insert("unknown type", paid(3), typed("Nope"))
          yield* insert("deep json", `${"[".repeat(100_000)}${"]".repeat(100_000)}`, typed("OrderPaid"))
          yield* insert(
            "5 MB body",
            JSON.stringify({ _tag: "OrderPaid", orderId: 4, amount: "x".repeat(5_000_000) }),
            typed("OrderPaid")
          )
          // Its counts at the column's limit (its crashes too): still claimed, judged poison by its count.
          yield* insert("delivery count at the limit", paid(5), typed("OrderPaid"), { deliveries: 2_147_483_647 })
          yield* insert("zero date", paid(6), typed("OrderPaid"), { at: "'0000-00-00 00:00:00'" })
          yield* insert("year 9999", paid(7), typed("OrderPaid"), { at: "'9999-12-31 23:59:59.999999'" })
          yield* Outbox.dispatch(new OrderPaid({ orderId: 8, amount: 1 }))

          yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" }).pipe(
            Effect.timeout("40 seconds"),
            Logger.withMinimumLogLevel(LogLevel.None)
          )
          const rows = yield* sql<{ queue_name: string; body_length: number; headers: string }>`
          SELECT queue_name, LENGTH(body) AS body_length, headers FROM ${sql(table)} ORDER BY ${sql(table)}.id`
          const waiting = rows.filter((r) => r.queue_name === "outbox")
          expect(waiting.length).toBe(1) // year 9999: a message parked as delayed
          const failed = rows.filter((r) => r.queue_name === "failed")
          expect(failed.length).toBe(6)
          for (const row of failed) expect(row.headers.length).toBeLessThan(maxHeadersLength)
          const stats = yield* (yield* TransportAdmin).stats("outbox")
          expect(stats).toMatchObject({ ready: 0, delayed: 1, inFlight: 0 })
          const listed = yield* (yield* TransportAdmin).list("failed", { max: 10 })
          expect(listed.length).toBe(6)
        }).pipe(
          Effect.provide(mysqlOutboxStack({
            table,
            handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => handled.push(m.orderId)))]
          })),
          Effect.provide(Layer.orDie(mysqlLayer(url)))
        )
        // The valid ones, and the zero date's (due long ago).
        expect(handled.sort()).toEqual([1, 6, 8])
      }),
    60_000
  )
})
