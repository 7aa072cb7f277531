/**
 * Operating real worker processes: SIGTERM mid-handler, a PostgreSQL restart mid-run, poison messages
 * that kill their worker.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { spawnScript } from "./support/cli.js"
import { ownServer, testDatabase } from "./support/database.js"
import { claimNow, outboxStack, pgLayer, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const db = testDatabase("ops")
const { withPg } = db

const dispatchOrders = (table: string, ids: ReadonlyArray<number>) =>
  withPg(
    Effect.flatMap(Outbox.Outbox, (outbox) =>
      outbox.dispatchAll(ids.map((orderId) => new OrderPaid({ orderId, amount: 1 })))).pipe(
        Effect.provide(outboxStack({ table, handlers: [] }))
      )
  )

describe("operating workers", () => {
  it.live(
    "SIGTERM mid-handler: the handler completes and is acked, unstarted claims are released at once, exit 0",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("sigterm")
        yield* dispatchOrders(table, [1, 2, 3, 4])
        const worker = spawnScript("test/fixtures/cli-app.ts", ["consume", "outbox", "--batch-size", "10"], {
          DATABASE_URL: db.url,
          OUTBOX_TABLE: table,
          FIXTURE_HANDLER: "slow",
          FIXTURE_SLOW_MS: "1500"
        })
        yield* Effect.promise(() => worker.waitFor(/^STARTED 1$/))
        worker.kill("SIGTERM")
        const { code } = yield* Effect.promise(() => worker.exited)
        expect(code).toBe(0)
        expect(worker.lines, worker.lines.join("\n") + worker.stderr.join("")).toContain("DONE 1")
        expect(worker.lines.some((l) => /^STARTED [234]$/.test(l))).toBe(false)
        // Another worker takes the other three at once, not after the 30 s lease.
        yield* withPg(
          Effect.gen(function*() {
            const claimed = yield* claimNow("outbox", 10)
            expect(claimed.map((m) => JSON.parse(m.body).orderId)).toEqual([2, 3, 4])
            expect(claimed.every((m) => m.deliveries === 1)).toBe(true)
          }).pipe(Effect.provide(outboxStack({ table, handlers: [] })))
        )
      }),
    60_000
  )

  it.live(
    "a handler still running at --shutdown-timeout is interrupted and its message released",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("shutdown_timeout")
        yield* dispatchOrders(table, [1, 2])
        const worker = spawnScript(
          "test/fixtures/cli-app.ts",
          ["consume", "outbox", "--shutdown-timeout", "0.2"],
          { DATABASE_URL: db.url, OUTBOX_TABLE: table, FIXTURE_HANDLER: "slow", FIXTURE_SLOW_MS: "60000" }
        )
        yield* Effect.promise(() => worker.waitFor(/^STARTED 1$/))
        worker.kill("SIGTERM")
        expect((yield* Effect.promise(() => worker.exited)).code).toBe(0)
        expect(worker.lines).not.toContain("DONE 1")
        yield* withPg(
          Effect.gen(function*() {
            const claimed = yield* claimNow("outbox", 10)
            expect(claimed.map((m) => JSON.parse(m.body).orderId)).toEqual([1, 2])
          }).pipe(Effect.provide(outboxStack({ table, handlers: [] })))
        )
      }),
    60_000
  )

  it.live(
    "a handler running past --handler-timeout is interrupted and its message retried with HandlerTimeoutError",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("handler_timeout")
        yield* dispatchOrders(table, [1])
        const worker = spawnScript(
          "test/fixtures/cli-app.ts",
          ["consume", "outbox", "--handler-timeout", "0.3", "--limit", "1"],
          { DATABASE_URL: db.url, OUTBOX_TABLE: table, FIXTURE_HANDLER: "slow", FIXTURE_SLOW_MS: "600000" }
        )
        const { code } = yield* Effect.promise(() => worker.exited)
        const output = worker.lines.join("\n") + worker.stderr.join("")
        expect(code, output).toBe(0)
        expect(worker.lines, output).not.toContain("DONE 1")
        expect(output).toContain("did not finish within 300ms")
        expect(output).toContain("0 handled, 1 retried")
        const rows = yield* withPg(
          Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ headers: string }>`SELECT headers FROM ${sql(table)}`)
        )
        expect(rows).toHaveLength(1)
        expect(JSON.parse(rows[0]!.headers).redeliveries).toMatchObject([{
          errorTag: "HandlerTimeoutError",
          errorMessage: "Handler OrderPaid did not finish within 300ms"
        }])
      }),
    60_000
  )

  it.live(
    "a poison message that kills its worker goes to the failure queue once the retry budget is spent",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("poison")
        const lease = 1000
        yield* dispatchOrders(table, [7])
        const env = {
          DATABASE_URL: db.url,
          OUTBOX_TABLE: table,
          FIXTURE_HANDLER: "die",
          FIXTURE_MAX_RETRIES: "2",
          FIXTURE_LEASE_MS: String(lease)
        }
        const expire = withPg(
          Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql`UPDATE ${
              sql(table)
            } SET delivered_at = delivered_at - interval '1 hour' WHERE delivered_at IS NOT NULL`)
        )
        // Deliveries 1 to 4 kill the worker: the first is charged to nobody (the message's handler had not been
        // marked as running alone), each later one is (budget: 2 retries); the fifth claim moves it to the failure queue.
        for (let death = 1; death <= 4; death++) {
          const worker = spawnScript("test/fixtures/cli-app.ts", ["consume", "outbox", "--sleep", "0.05"], env)
          yield* Effect.promise(() => worker.waitFor(/^STARTED 7$/))
          const { signal } = yield* Effect.promise(() => worker.exited)
          expect(signal).toBe("SIGKILL")
          yield* expire
        }
        const last = spawnScript(
          "test/fixtures/cli-app.ts",
          ["consume", "outbox", "--limit", "1", "--sleep", "0.05"],
          env
        )
        const { code } = yield* Effect.promise(() => last.exited)
        expect(code).toBe(0)
        expect(last.lines.some((l) => l.startsWith("STARTED"))).toBe(false)
        const [row] = yield* withPg(
          Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql<{ queue_name: string; headers: string; delivery_count: number }>`
          SELECT queue_name, headers, delivery_count FROM ${sql(table)}`)
        )
        expect(row!.queue_name).toBe("failed")
        expect(row!.delivery_count).toBe(5)
        const headers = JSON.parse(row!.headers)
        expect(headers.errorDetails.tag).toBe("WorkerDiedError")
        expect(headers.errorDetails.message).toContain("died")
        expect(headers.originalTransport).toBe("outbox")
      }),
    120_000
  )
})

describe("surviving a PostgreSQL restart", () => {
  const server = ownServer()

  it.live(
    "a restart in the middle of a consume run: every committed message handled, no duplicate, no exit",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("restart")
        const total = 400
        const seen = new Map<number, number>()
        const stack = outboxStack({
          table,
          transports: { outbox: { redeliverTimeout: Duration.seconds(5) } },
          handlers: [Handlers.handler(OrderPaid, (m) =>
            Effect.sync(() => seen.set(m.orderId, (seen.get(m.orderId) ?? 0) + 1)).pipe(
              Effect.zipRight(Effect.sleep("5 millis"))
            ))]
        })
        const restartable = Layer.orDie(pgLayer(server().url))
        yield* Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          yield* outbox.dispatchAll(Array.from({ length: total }, (_, i) =>
            new OrderPaid({ orderId: i, amount: 1 })))
          const worker = yield* Effect.fork(
            Worker.run({ transports: ["outbox"], batchSize: 10, sleep: "50 millis", limit: total })
          )
          // Restart once the worker is well into the run.
          yield* Effect.sleep("20 millis").pipe(Effect.repeat({ until: () => seen.size >= 50 }))
          const before = seen.size
          yield* Effect.promise(() => server().restart())
          expect(before).toBeLessThan(total) // the restart really happened mid-run
          const summary = yield* Fiber.join(worker).pipe(Effect.timeout("60 seconds"))
          expect(summary.handled).toBe(total)
          expect(seen.size).toBe(total)
          expect([...seen.values()].filter((n) => n > 1)).toEqual([])
        }).pipe(Effect.provide(stack), Effect.provide(restartable), Logger.withMinimumLogLevel(LogLevel.None))
      }),
    120_000
  )
})
