/**
 * `consume --metrics-port` on a real worker process and a real PostgreSQL: the endpoint serves the worker's metrics
 * with the counts of the run, and its probes answer for the worker.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Outbox from "../src/services/Outbox.js"
import { spawnScript } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const db = testDatabase("observability")

describe("consume --metrics-port", () => {
  it.live(
    "serves the run's metrics on /metrics and the worker's probes on /healthz and /readyz",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("metrics_port")
        yield* db.withPg(
          Effect.flatMap(
            Outbox.Outbox,
            (outbox) => outbox.dispatchAll([1, 2, 3].map((orderId) => new OrderPaid({ orderId, amount: 1 })))
          ).pipe(
            Effect.provide(outboxStack({ table, handlers: [] }))
          )
        )
        const worker = spawnScript("test/fixtures/cli-app.ts", ["consume", "outbox", "--metrics-port", "0", "-v"], {
          DATABASE_URL: db.url,
          OUTBOX_TABLE: table,
          FIXTURE_HANDLER: "log"
        })
        try {
          const serving = yield* Effect.promise(() => worker.waitFor(/^\[OK\] Serving \/metrics/))
          const port = Number(/:(\d+)\.$/.exec(serving)![1])
          for (let n = 1; n <= 3; n++) yield* Effect.promise(() => worker.waitFor(/ OrderPaid handled \d+ms$/))
          const get = (path: string) =>
            Effect.promise(async () => {
              const response = await fetch(`http://127.0.0.1:${port}${path}`)
              return { status: response.status, body: await response.text() }
            })
          const metrics = yield* get("/metrics")
          expect(metrics.status).toBe(200)
          expect(metrics.body).toContain(`outbox_messages_handled_total{transport="outbox",type="OrderPaid"} 3`)
          expect(metrics.body).toMatch(/outbox_handler_duration_seconds_count\{transport="outbox",type="OrderPaid"\} 3/)
          expect(metrics.body).toMatch(/outbox_claim_batch_size_count\{transport="outbox"\} \d+/)
          expect(metrics.body).toMatch(/outbox_queue_oldest_ready_age_seconds\{transport="outbox"\} /)
          expect(yield* get("/healthz")).toEqual({ status: 200, body: "ok\n" })
          expect(yield* get("/readyz")).toEqual({ status: 200, body: "ok\n" })
        } finally {
          worker.kill("SIGTERM")
        }
        const { code } = yield* Effect.promise(() => worker.exited)
        expect(code, worker.lines.join("\n") + worker.stderr.join("")).toBe(0)
      }),
    60_000
  )
})
