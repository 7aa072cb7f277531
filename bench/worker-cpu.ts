/**
 * Profiling aid (not part of `npm run bench`): the worker's own CPU per message, without a database.
 * `Worker.run` consumes 50 000 messages from a stub transport whose session's claim returns ready rows at once
 * and whose ack does nothing, so what is measured is decoding, handler dispatch and bookkeeping alone.
 *
 *   npx tsx bench/worker-cpu.ts [batch sizes, default 500,500,50,1]     (METRICS=off: with `metrics: false`)
 *
 * TRACING=unsampled|sampled: with the OpenTelemetry SDK tracer (`@effect/opentelemetry` NodeSdk, a batch span
 * processor whose exporter drops the spans) and every message stamped by an unsampled or a sampled producer;
 * with NO_TRACER=1 the messages are stamped but no tracer is installed, with WORKER_TRACING=off the tracer is
 * installed but the worker does not trace (`tracing: false`).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import type { ReceivedMessage } from "../src/domain/Envelope.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import { type Capabilities, type Session, Transport, type TransportShape } from "../src/services/Transport.js"
import { BenchNoop } from "./common.js"
import { sdkTracer } from "./tracer.js"

const messages = 50_000
const tracing = process.env.TRACING === "sampled" || process.env.TRACING === "unsampled"
  ? process.env.TRACING
  : undefined

/** Only what `Worker.run` calls on the happy path (a cast keeps this aid compiling as the interface grows). */
const stub = (rows: ReadonlyArray<ReceivedMessage>): TransportShape => {
  let next = 0
  const capabilities: Capabilities = {
    leases: true,
    browsing: false,
    countsDeliveries: true,
    stableIds: true,
    ackWithClaim: true,
    orderingKeys: false
  }
  const session: Session = {
    transports: ["outbox"],
    claim: (_name, n) =>
      Effect.sync(() => {
        const batch = rows.slice(next, next + n)
        next += batch.length
        return { messages: batch, nextDue: Option.none() }
      }),
    wait: () => Effect.never
  }
  return {
    names: ["outbox", "failed"],
    capabilities: () => Option.some(capabilities),
    lease: () => Option.some(Duration.seconds(30)),
    failureTransport: () => Option.some("failed"),
    open: () => Effect.succeed(session),
    ack: () => Effect.void,
    keepalive: () => Effect.void,
    start: () => Effect.succeed(true),
    release: () => Effect.void
  } as unknown as TransportShape
}

for (const batchSize of (process.argv[2] ?? "500,500,50,1").split(",").map(Number)) {
  const now = new Date()
  const rows = Array.from({ length: messages }, (_, i): ReceivedMessage => ({
    id: String(i + 1),
    transport: "outbox",
    messageId: crypto.randomUUID(),
    body: `{"n":${i},"_tag":"BenchNoop"}`,
    headers: tracing === undefined
      ? `{"type":"BenchNoop"}`
      : `{"type":"BenchNoop","traceparent":"00-${crypto.randomUUID().replace(/-/g, "")}-${
        crypto.randomUUID().replace(/-/g, "").slice(0, 16)
      }-${tracing === "sampled" ? "01" : "00"}"}`,
    createdAt: now,
    availableAt: now,
    deliveries: 1
  }))
  const layer = Layer.mergeAll(
    Handlers.layer([Handlers.handler(BenchNoop, () => Effect.void)]),
    ScheduleRetryStrategy.layerDefault,
    Layer.succeed(Transport, stub(rows))
  )
  const t0 = performance.now()
  const cpu0 = process.cpuUsage()
  const summary = await Effect.runPromise(
    Worker.run({
      transports: ["outbox"],
      batchSize,
      stopWhenEmpty: true,
      ...(process.env.METRICS === "off" ? { metrics: false } : {}),
      ...(process.env.WORKER_TRACING === "off" ? { tracing: false } : {})
    }).pipe(
      Effect.provide(layer),
      tracing === undefined || process.env.NO_TRACER === "1"
        ? (self) => self
        : Effect.provide(sdkTracer("worker-cpu", tracing === "sampled")),
      Logger.withMinimumLogLevel(LogLevel.Error)
    )
  )
  const cpu = process.cpuUsage(cpu0)
  const ms = performance.now() - t0
  console.log(
    `batch ${String(batchSize).padStart(3)}: ${summary.handled} handled in ${ms.toFixed(0)} ms = ` +
      `${((ms * 1000) / messages).toFixed(1)} µs/message wall, ${
        ((cpu.user + cpu.system) / messages).toFixed(1)
      } µs CPU`
  )
}
