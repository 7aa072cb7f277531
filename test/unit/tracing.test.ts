/**
 * Traces on the in-memory layers with a real OpenTelemetry SDK tracer (`@effect/opentelemetry`, in-memory span
 * exporter): dispatch's `send` span and its stamp, the worker's `process` span as its child with the handlers'
 * spans inside, outcomes as events, unsampled traces kept unsampled, hostile stamps ignored, and nothing at all
 * without a tracer.
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import * as OtelTracer from "@effect/opentelemetry/Tracer"
import { describe, expect, it } from "@effect/vitest"
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  InMemorySpanExporter,
  ParentBasedSampler,
  type ReadableSpan,
  SimpleSpanProcessor
} from "@opentelemetry/sdk-trace-base"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { UnrecoverableMessageHandlingError } from "../../src/domain/Errors.js"
import * as Headers from "../../src/domain/Headers.js"
import * as MessageId from "../../src/domain/MessageId.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as Forwarder from "../../src/programs/Forwarder.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { memoryStack } from "../support/memory.js"
import { OrderPaid } from "../support/messages.js"

/** A tracer that records every span it ends; `sampled: false` makes new traces unsampled (children follow). */
const tracer = (options: { readonly sampled?: boolean } = {}) => {
  const exporter = new InMemorySpanExporter()
  const layer = NodeSdk.layer(() => ({
    resource: { serviceName: "tracing-test" },
    spanProcessor: new SimpleSpanProcessor(exporter),
    tracerConfig: {
      sampler: new ParentBasedSampler({
        root: options.sampled === false ? new AlwaysOffSampler() : new AlwaysOnSampler()
      })
    }
  }))
  return { exporter, layer }
}

const byName = (spans: ReadonlyArray<ReadableSpan>, name: string) => spans.filter((s) => s.name === name)
const only = (spans: ReadonlyArray<ReadableSpan>, name: string) => {
  const found = byName(spans, name)
  expect(found.map((s) => s.name), `spans: ${spans.map((s) => s.name).join(", ")}`).toEqual([name])
  return found[0]!
}
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId
// SpanKind of @opentelemetry/api: PRODUCER 3, CONSUMER 4; SpanStatusCode ERROR 2.
const producer = 3
const consumer = 4

const storedHeaders = Effect.flatMap(
  MemoryTransport.MemoryTransport,
  (memory) => Effect.map(memory.messagesOf("outbox"), (rows) => rows.map((r) => r.headers))
)

describe("tracing", () => {
  it.effect("the handler runs in a `process` span, a child of the `send` span that dispatched its message", () => {
    const { exporter, layer } = tracer()
    return Effect.gen(function*() {
      yield* Effect.withSpan(Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 })), "POST /orders")
      const [stamped] = yield* storedHeaders
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], limit: 1 }))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(worker)

      const spans = exporter.getFinishedSpans()
      const request = only(spans, "POST /orders")
      const send = only(spans, "send outbox")
      const process = only(spans, "process outbox")
      const charge = only(spans, "charge")
      expect(spans).toHaveLength(4) // the worker's own claims and acks make none
      expect(new Set(spans.map((s) => s.spanContext().traceId)).size).toBe(1)
      expect(parentOf(send)).toBe(request.spanContext().spanId)
      expect(parentOf(process)).toBe(send.spanContext().spanId)
      expect(parentOf(charge)).toBe(process.spanContext().spanId)
      expect(send.kind).toBe(producer)
      expect(process.kind).toBe(consumer)
      expect(Headers.decode(stamped!)).toMatchObject({
        right: { traceparent: `00-${send.spanContext().traceId}-${send.spanContext().spanId}-01` }
      })
      expect(send.attributes).toMatchObject({
        "messaging.system": "effect_outbox",
        "messaging.operation.type": "send",
        "messaging.destination.name": "outbox"
      })
      expect(process.attributes).toMatchObject({
        "messaging.system": "effect_outbox",
        "messaging.operation.type": "process",
        "messaging.destination.name": "outbox",
        "messaging.message.id": send.attributes["messaging.message.id"],
        "effect_outbox.message.type": "OrderPaid",
        "effect_outbox.message.deliveries": 1
      })
      expect(process.events.map((e) => e.name)).toEqual(["ack"])
    }).pipe(
      Effect.provide(memoryStack([Handlers.handler(OrderPaid, () => Effect.withSpan(Effect.void, "charge"))])),
      Effect.provide(layer)
    )
  })

  it.effect("each delivery is a `process` span under the same `send`: a retry and a move to the failure queue", () => {
    const { exporter, layer } = tracer()
    let runs = 0
    return Effect.gen(function*() {
      yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 5 }))
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], limit: 2 }))
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(worker)).toMatchObject({ retried: 1, failed: 1 })

      const spans = exporter.getFinishedSpans()
      const send = only(spans, "send outbox")
      const [first, second] = byName(spans, "process outbox")
      for (const span of [first!, second!]) {
        expect(parentOf(span)).toBe(send.spanContext().spanId)
        expect(span.status.code).toBe(2)
      }
      // the outcome's event, then the error recorded as the span's exception
      expect(first!.events.map((e) => e.name)).toEqual(["retry", "exception"])
      expect(first!.events[0]!.attributes).toEqual({
        "effect_outbox.retry.attempt": 1,
        "effect_outbox.retry.delay_ms": 1000,
        "error.type": "Error"
      })
      expect(first!.status.message).toBe("card declined")
      expect(first!.events[1]!.attributes).toMatchObject({ "exception.type": "Error" })
      expect(second!.events.map((e) => e.name)).toEqual(["fail", "exception"])
      expect(second!.events[0]!.attributes).toEqual({ "error.type": "UnrecoverableMessageHandlingError" })
      expect(second!.attributes["effect_outbox.message.deliveries"]).toBe(2)
    }).pipe(
      Effect.provide(memoryStack([
        Handlers.handler(
          OrderPaid,
          () =>
            Effect.suspend((): Effect.Effect<void, Error | UnrecoverableMessageHandlingError> =>
              ++runs === 1
                ? Effect.fail(new Error("card declined"))
                : Effect.fail(new UnrecoverableMessageHandlingError({ message: "card stolen" }))
            )
        )
      ], { default: { maxRetries: 3, delay: "1 second" } })),
      Effect.provide(layer)
    )
  })

  it.effect("an unsampled trace stays unsampled in the worker: neither `process` nor the handler's spans are recorded", () => {
    const { exporter, layer } = tracer({ sampled: false })
    return Effect.gen(function*() {
      yield* Outbox.dispatch(new OrderPaid({ orderId: 3, amount: 5 }))
      const [stamped] = yield* storedHeaders
      expect(Headers.decode(stamped!)).toMatchObject({ right: { traceparent: expect.stringMatching(/-00$/) } })
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], limit: 1 }))
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(worker)).toMatchObject({ handled: 1 })
      expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual([])
    }).pipe(
      Effect.provide(memoryStack([Handlers.handler(OrderPaid, () => Effect.withSpan(Effect.void, "charge"))])),
      Effect.provide(layer)
    )
  })

  it.effect("the trace state travels with the message: the `process` span continues the producer's `tracestate`", () => {
    const { exporter, layer } = tracer()
    const upstream = OtelTracer.makeExternalSpan({
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "00f067aa0ba902b7",
      traceFlags: 1,
      traceState: "vendor=opaque-value"
    })
    return Effect.gen(function*() {
      yield* Outbox.dispatch(new OrderPaid({ orderId: 6, amount: 5 })).pipe(Effect.withParentSpan(upstream))
      const [stamped] = yield* storedHeaders
      expect(Headers.decode(stamped!)).toMatchObject({ right: { tracestate: "vendor=opaque-value" } })
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], limit: 1 }))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(worker)
      const process = only(exporter.getFinishedSpans(), "process outbox")
      expect(process.spanContext().traceId).toBe(upstream.traceId)
      expect(process.spanContext().traceState?.serialize()).toBe("vendor=opaque-value")
    }).pipe(
      Effect.provide(memoryStack([Handlers.handler(OrderPaid, () => Effect.void)])),
      Effect.provide(layer)
    )
  })

  it.effect("a hostile or corrupt stamp is ignored: the message is handled in a `process` span of its own trace", () => {
    const { exporter, layer } = tracer()
    const hostile = [
      "zz",
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // an all-zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // an all-zero span id
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // the forbidden version
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // version 00 has no more fields
      `00-${"a".repeat(100_000)}`
    ]
    return Effect.gen(function*() {
      const transport = yield* Transport
      yield* transport.send(
        "outbox",
        hostile.map((traceparent, n) => ({
          messageId: MessageId.make(),
          type: "OrderPaid",
          body: JSON.stringify({ _tag: "OrderPaid", orderId: n, amount: 1 }),
          headers: Headers.encode(new Headers.Headers({ type: "OrderPaid", traceparent, tracestate: "x=\u0000" })),
          delayMs: 0
        }))
      )
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], limit: hostile.length }))
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(worker)).toMatchObject({ handled: hostile.length })
      const processes = byName(exporter.getFinishedSpans(), "process outbox")
      expect(processes).toHaveLength(hostile.length)
      for (const span of processes) expect(parentOf(span)).toBeUndefined()
    }).pipe(
      Effect.provide(memoryStack([Handlers.handler(OrderPaid, () => Effect.void)])),
      Effect.provide(layer)
    )
  })

  it.effect("a forward is the second hop's `send`: the far side's `process` span is its child, in the same trace", () => {
    const { exporter, layer } = tracer()
    return Effect.gen(function*() {
      yield* Outbox.dispatch(new OrderPaid({ orderId: 4, amount: 5 }))
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox", "far"], limit: 2 }))
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(worker)).toMatchObject({ handled: 2 })
      const spans = exporter.getFinishedSpans()
      const send = only(spans, "send outbox")
      const forwarding = only(spans, "process outbox")
      const forward = only(spans, "send far")
      const far = only(spans, "process far")
      expect(new Set(spans.map((s) => s.spanContext().traceId)).size).toBe(1)
      expect(parentOf(forwarding)).toBe(send.spanContext().spanId)
      expect(parentOf(forward)).toBe(forwarding.spanContext().spanId)
      expect(parentOf(far)).toBe(forward.spanContext().spanId)
      expect(forward.kind).toBe(producer)
    }).pipe(
      Effect.provide(memoryStack(
        [
          ...Forwarder.handlers([OrderPaid], { to: "far" }),
          Handlers.handler(OrderPaid, () => Effect.void, { fromTransport: "far" })
        ],
        {},
        { transports: { outbox: {}, far: {} } }
      )),
      Effect.provide(layer)
    )
  })

  it.effect("without a tracer nothing is stamped and no span is made", () =>
    Effect.gen(function*() {
      yield* Effect.withSpan(Outbox.dispatch(new OrderPaid({ orderId: 5, amount: 5 })), "POST /orders")
      expect(yield* storedHeaders).toEqual([`{"type":"OrderPaid"}`])
    }).pipe(Effect.provide(memoryStack([]))))
})
