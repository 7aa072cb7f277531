/**
 * One trace across processes, on a real PostgreSQL and a real RabbitMQ: a producer process dispatches in a
 * request span, a worker process handles, retries, moves to the failure queue and forwards through the broker —
 * each with a real OpenTelemetry SDK tracer and an in-memory exporter. Every span of both processes belongs to
 * the request's trace, and an idle worker makes no span.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as AmqpTransport from "../src/layers/amqp/AmqpTransport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { amqpUrl, cleanup, uniqueName } from "./support/amqp.js"
import { spawnScript } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"

const db = testDatabase("tracing")

interface ExportedSpan {
  readonly name: string
  readonly kind: number
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly status: number
  readonly events: ReadonlyArray<string>
  readonly messageId?: string
  readonly type?: string
}

// SpanKind of @opentelemetry/api
const server = 1
const producer = 3
const consumer = 4
const error = 2

const spansOf = (lines: ReadonlyArray<string>): Array<ExportedSpan> => {
  const line = lines.find((l) => l.startsWith("SPANS "))
  expect(line, lines.join("\n")).toBeDefined()
  return JSON.parse(line!.slice("SPANS ".length))
}

describe("traces across processes", () => {
  it.live(
    "the worker's spans continue the producer's trace: retries, the failure queue and the RabbitMQ hop included",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("traced")
        const exchange = uniqueName("traced")
        const queue = `${exchange}.amqp`
        const env = { DATABASE_URL: db.url, OUTBOX_TABLE: table, AMQP_URL: amqpUrl(), EXCHANGE: exchange, QUEUE: queue }
        yield* db.withPg(
          Effect.flatMap(TransportAdmin, (admin) => admin.setup).pipe(
            Effect.provide(
              TransportRouter.layer(
                PgTransport.make({ table }),
                AmqpTransport.make({ url: amqpUrl(), exchange: { name: exchange }, transports: { amqp: { queue } } })
              )
            )
          )
        )
        yield* Effect.addFinalizer(() => Effect.promise(() => cleanup(amqpUrl(), exchange, [queue])))

        // The worker first, so that it polls an empty queue (those polls must make no span) until the producer ran.
        const worker = spawnScript("test/fixtures/traced-app.ts", [], { ...env, MODE: "consume" })
        yield* Effect.addFinalizer(() => Effect.sync(() => worker.kill("SIGKILL")))
        yield* Effect.promise(() => worker.waitFor(/^READY$/))
        const producerProcess = spawnScript("test/fixtures/traced-app.ts", [], { ...env, MODE: "produce" })
        const produced = yield* Effect.promise(() => producerProcess.exited)
        expect(produced.code, producerProcess.stderr.join("")).toBe(0)
        const handled = yield* Effect.promise(() => worker.exited)
        expect(handled.code, worker.stderr.join("")).toBe(0)

        const producerSpans = spansOf(producerProcess.lines)
        const workerSpans = spansOf(worker.lines)
        // The producer: the request, its transaction, and in it one `send` (three messages).
        const request = producerSpans.find((s) => s.name === "POST /orders")!
        expect(request.kind).toBe(server)
        const sends = producerSpans.filter((s) => s.name === "send outbox")
        expect(sends).toHaveLength(1)
        const send = sends[0]!
        expect(send).toMatchObject({ kind: producer, traceId: request.traceId })
        const ancestors = (span: ExportedSpan): Array<string> => {
          const parent = producerSpans.find((s) => s.spanId === span.parentSpanId)
          return parent === undefined ? [] : [parent.name, ...ancestors(parent)]
        }
        expect(ancestors(send)).toEqual(["sql.transaction", "POST /orders"])

        // The worker: nothing but the messages' spans and the handlers' own (no claim, ack or empty poll span).
        const names = workerSpans.map((s) => s.name).sort()
        expect(names).toEqual([
          "charge",
          "charge",
          "charge",
          "notify customer",
          "process amqp",
          "process outbox",
          "process outbox",
          "process outbox",
          "process outbox",
          "send amqp"
        ])
        for (const span of workerSpans) expect(span.traceId, span.name).toBe(request.traceId)
        const processes = workerSpans.filter((s) => s.name === "process outbox")
        for (const span of processes) expect(span).toMatchObject({ kind: consumer, parentSpanId: send.spanId })
        const outcomes = processes.map((s) => `${s.type} ${s.events[0]} ${s.status}`).sort()
        expect(outcomes).toEqual([
          `OrderPaid ack 1`,
          `OrderPaid fail ${error}`,
          `OrderPaid retry ${error}`,
          `OrderShipped ack 1`
        ])
        for (const charge of workerSpans.filter((s) => s.name === "charge")) {
          expect(processes.map((p) => p.spanId)).toContain(charge.parentSpanId)
        }
        // The RabbitMQ hop: forward (`send amqp`) under the outbox's `process`, the broker's consumer under it.
        const forwarding = processes.find((s) => s.type === "OrderShipped")!
        const forward = workerSpans.find((s) => s.name === "send amqp")!
        const far = workerSpans.find((s) => s.name === "process amqp")!
        expect(forward).toMatchObject({ kind: producer, parentSpanId: forwarding.spanId })
        expect(far).toMatchObject({ kind: consumer, parentSpanId: forward.spanId, events: ["ack"] })
        expect(far.messageId).toBe(forwarding.messageId)
        const notify = workerSpans.find((s) => s.name === "notify customer")!
        expect(notify.parentSpanId).toBe(far.spanId)
      }).pipe(Effect.scoped),
    90_000
  )
})
