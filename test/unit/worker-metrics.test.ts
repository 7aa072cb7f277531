/**
 * The worker's metrics on the in-memory layers: counts by transport and type, handler durations on the TestClock,
 * claims, and the sampled queue gauges. Effect's metric registry is global, so each test reads differences.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricLabel from "effect/MetricLabel"
import type * as MetricState from "effect/MetricState"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import { UnrecoverableMessageHandlingError } from "../../src/domain/Errors.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as OutboxMetrics from "../../src/programs/OutboxMetrics.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { memoryStack } from "../support/memory.js"
import { OrderPaid, OrderShipped } from "../support/messages.js"

/** A type no other test sends: its series exist only if the worker exported them at start. */
class NeverSent extends Schema.TaggedClass<NeverSent>()("NeverSent", {}) {}

const stack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(handlers: Hs) =>
  memoryStack(handlers, { default: { maxRetries: 1, delay: "1 second" } })

const count = (metric: Metric.Metric.Counter<number>, labels: ReadonlyArray<MetricLabel.MetricLabel>) =>
  Effect.map(Metric.value(Metric.taggedWithLabels(metric, labels)), (state) => state.count)

const histogram = (
  metric: Metric.Metric.Histogram<number>,
  labels: ReadonlyArray<MetricLabel.MetricLabel>
): Effect.Effect<MetricState.MetricState.Histogram> => Metric.value(Metric.taggedWithLabels(metric, labels))

const gauge = (metric: Metric.Metric.Gauge<number>, labels: ReadonlyArray<MetricLabel.MetricLabel>) =>
  Effect.map(Metric.value(Metric.taggedWithLabels(metric, labels)), (state) => state.value)

describe("worker metrics", () => {
  it.effect("count handled, retried and failed messages by transport and type, and time their handlers", () =>
    Effect.gen(function*() {
      const paid = OutboxMetrics.messageLabels("outbox", "OrderPaid")
      const shipped = OutboxMetrics.messageLabels("outbox", "OrderShipped")
      const before = {
        handled: yield* count(OutboxMetrics.handled, paid),
        retried: yield* count(OutboxMetrics.retried, shipped),
        failed: yield* count(OutboxMetrics.failed, shipped),
        durations: (yield* histogram(OutboxMetrics.handlerDuration, paid)).count,
        claims: (yield* histogram(OutboxMetrics.claimBatchSize, OutboxMetrics.transportLabels("outbox"))).count
      }
      let shippedRuns = 0
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
        yield* Outbox.dispatch(new OrderShipped({ orderId: 3, carrier: "post" }))
        const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], limit: 4, batchSize: 10 }))
        yield* TestClock.adjust("1 second")
        yield* TestClock.adjust("1 second")
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 2, retried: 1, failed: 1 })
      }).pipe(Effect.provide(stack([
        Handlers.handler(OrderPaid, () => Effect.sleep("250 millis")),
        Handlers.handler(
          OrderShipped,
          () =>
            Effect.suspend((): Effect.Effect<void, string | UnrecoverableMessageHandlingError> =>
              ++shippedRuns === 1
                ? Effect.fail("carrier down")
                : Effect.fail(new UnrecoverableMessageHandlingError({ message: "no such carrier" }))
            )
        )
      ])))
      expect((yield* count(OutboxMetrics.handled, paid)) - before.handled).toBe(2)
      expect((yield* count(OutboxMetrics.retried, shipped)) - before.retried).toBe(1)
      expect((yield* count(OutboxMetrics.failed, shipped)) - before.failed).toBe(1)
      const durations = yield* histogram(OutboxMetrics.handlerDuration, paid)
      expect(durations.count - before.durations).toBe(2)
      // 250 ms each on the TestClock: both in the bucket up to 0.25 s, none below 0.1 s.
      const at = (bound: number) => durations.buckets.find(([b]) => b === bound)![1]
      expect(at(0.25) - at(0.1)).toBeGreaterThanOrEqual(2)
      const claims = yield* histogram(OutboxMetrics.claimBatchSize, OutboxMetrics.transportLabels("outbox"))
      expect(claims.count - before.claims).toBe(2)
    }))

  it.effect("export the counters at 0 from the worker's start: the first failure is an increase", () =>
    Effect.gen(function*() {
      yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true }).pipe(
        Effect.provide(stack([Handlers.handler(NeverSent, () => Effect.void)]))
      )
      const exported = (yield* Metric.snapshot).map((pair) =>
        `${pair.metricKey.name}{${pair.metricKey.tags.map((t) => `${t.key}=${t.value}`).join(",")}}`
      )
      for (const name of ["outbox_messages_handled", "outbox_messages_retried", "outbox_messages_failed"]) {
        expect(exported).toContain(`${name}{transport=outbox,type=NeverSent}`)
      }
      expect(exported).toContain("outbox_lease_renewals{transport=outbox}")
      expect(exported).toContain("outbox_worker_loop_restarts{}")
    }))

  it.effect("record nothing with metrics: false", () =>
    Effect.gen(function*() {
      const labels = OutboxMetrics.messageLabels("outbox", "OrderPaid")
      const before = yield* count(OutboxMetrics.handled, labels)
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, metrics: false })
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, () => Effect.void)])))
      expect(yield* count(OutboxMetrics.handled, labels)).toBe(before)
    }))

  it.effect("sample the queue gauges through the TransportAdmin: counts by state and the oldest ready age", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }), { delay: "1 hour" })
        yield* TestClock.adjust("30 seconds")
        yield* OutboxMetrics.sampleQueuesOnce(["outbox"])
      }).pipe(Effect.provide(stack([Handlers.handler(OrderPaid, () => Effect.void)])))
      const of = (state: string) => [MetricLabel.make("transport", "outbox"), MetricLabel.make("state", state)]
      expect(yield* gauge(OutboxMetrics.queueMessages, of("ready"))).toBe(1)
      expect(yield* gauge(OutboxMetrics.queueMessages, of("delayed"))).toBe(1)
      expect(yield* gauge(OutboxMetrics.queueMessages, of("in_flight"))).toBe(0)
      expect(yield* gauge(OutboxMetrics.oldestReadyAge, OutboxMetrics.transportLabels("outbox"))).toBe(30)
    }))

  it.effect("refuse sampleQueues without a TransportAdmin", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Worker.run({ transports: ["outbox"], sampleQueues: "15 seconds" }))
      expect(error.message).toContain("sampleQueues needs a TransportAdmin")
    }).pipe(
      Effect.provide(Layer.mergeAll(
        Handlers.layer([Handlers.handler(OrderPaid, () => Effect.void)]),
        ScheduleRetryStrategy.layerDefault,
        // The transport alone: no TransportAdmin.
        Layer.project(MemoryTransport.layer(), Transport, Transport, (t) => t)
      ))
    ))
})
