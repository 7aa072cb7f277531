/**
 * The worker's metrics, as Effect `Metric`s in the global registry: any Effect metrics exporter (the
 * `MetricsServer`'s Prometheus endpoint, `@effect/opentelemetry`'s OTLP) publishes them. Names follow the
 * Prometheus conventions (base units, `_total` added by the exporter to counters, which are `incremental` so that
 * they export as counters, not gauges); labels are `transport` and, per message, `type`.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import type * as MetricLabel from "effect/MetricLabel"
import * as MetricLabelModule from "effect/MetricLabel"
import type { TransportError, UnknownTransportError } from "../domain/Errors.js"
import { TransportAdmin } from "../services/TransportAdmin.js"

/** Seconds, from 5 ms to 10 s: OpenTelemetry's messaging duration buckets. */
const durationBuckets = MetricBoundaries.fromIterable([
  0.005,
  0.01,
  0.025,
  0.05,
  0.075,
  0.1,
  0.25,
  0.5,
  0.75,
  1,
  2.5,
  5,
  7.5,
  10
])

/**
 * Messages whose handlers all succeeded (acked), by `transport` and `type`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const handled = Metric.counter("outbox_messages_handled", {
  description: "Messages whose handlers all succeeded and that were acked",
  incremental: true
})

/**
 * Messages scheduled for a retry, by `transport` and `type`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const retried = Metric.counter("outbox_messages_retried", {
  description: "Messages scheduled for a retry",
  incremental: true
})

/**
 * Messages moved to the failure queue, by `transport` and `type`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const failed = Metric.counter("outbox_messages_failed", {
  description: "Messages moved to the failure queue",
  incremental: true
})

/**
 * How long a message's handlers ran, in seconds, by `transport` and `type`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const handlerDuration = Metric.histogram(
  "outbox_handler_duration_seconds",
  durationBuckets,
  "How long a message's handlers ran"
)

/**
 * From the message's commit (`created_at`) to its handlers' start, in seconds, by `transport`: includes any
 * delay and the retries before this delivery.
 *
 * @since 0.1.0
 * @category metrics
 */
export const messageAge = Metric.histogram(
  "outbox_message_age_at_start_seconds",
  MetricBoundaries.exponential({ start: 0.001, factor: 4, count: 12 }),
  "From a message's commit to its handlers' start"
)

/**
 * The round trip of a claim that found messages, in seconds, by `transport`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const claimDuration = Metric.histogram(
  "outbox_claim_duration_seconds",
  durationBuckets,
  "The round trip of a claim that found messages"
)

/**
 * The number of messages a claim found, by `transport`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const claimBatchSize = Metric.histogram(
  "outbox_claim_batch_size",
  MetricBoundaries.fromIterable([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]),
  "The number of messages a claim found"
)

/**
 * Lease renewals written (one per transport per heartbeat that held messages), by `transport`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const leaseRenewals = Metric.counter("outbox_lease_renewals", {
  description: "Lease renewals written",
  incremental: true
})

/**
 * Restarts of the worker's loop after a storage failure (the database down, connections killed).
 *
 * @since 0.1.0
 * @category metrics
 */
export const loopRestarts = Metric.counter("outbox_worker_loop_restarts", {
  description: "Restarts of the worker's loop after a storage failure",
  incremental: true
})

/**
 * Messages of a transport by `state`: `ready`, `delayed`, `in_flight`, `failed` — sampled (`sampleQueues`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const queueMessages = Metric.gauge("outbox_queue_messages", {
  description: "Messages of a transport by state, sampled"
})

/**
 * The age of the oldest ready message of a transport, in seconds (0 when none is ready) — sampled. The signal
 * to alert on: it grows when the workers fall behind or stop.
 *
 * @since 0.1.0
 * @category metrics
 */
export const oldestReadyAge = Metric.gauge("outbox_queue_oldest_ready_age_seconds", {
  description: "The age of the oldest ready message of a transport, sampled"
})

/**
 * Ordering keys of a transport held by a message in the failure queue — their later messages wait for an operator
 * (`failed:retry` or `failed:remove`) — sampled.
 *
 * @since 0.1.0
 * @category metrics
 */
export const blockedKeys = Metric.gauge("outbox_queue_blocked_keys", {
  description: "Ordering keys of a transport blocked by a message in the failure queue, sampled"
})

/**
 * A Kafka consumer group's lag on one partition of a transport's topics (labels `transport`, `topic`,
 * `partition`) — sampled.
 *
 * @since 0.1.0
 * @category metrics
 */
export const consumerLag = Metric.gauge("outbox_consumer_lag", {
  description: "Records of a partition its consumer group has not committed yet (Kafka), sampled"
})

/**
 * The WAL a CDC transport's replication slot makes the server keep (label `transport`, `slot`), and whether a
 * connector reads it (`outbox_cdc_slot_active`, 1 or 0) — sampled. A stopped connector makes the first grow until
 * the disk is full, or until `max_slot_wal_keep_size` invalidates the slot.
 *
 * @since 0.1.0
 * @category metrics
 */
export const slotRetainedBytes = Metric.gauge("outbox_cdc_slot_retained_bytes", {
  description: "WAL bytes a CDC transport's replication slot retains (from its restart point), sampled"
})

/**
 * Whether a connector reads a CDC transport's replication slot (1) or not (0) — sampled.
 *
 * @since 0.1.0
 * @category metrics
 */
export const slotActive = Metric.gauge("outbox_cdc_slot_active", {
  description: "1 while a connector reads a CDC transport's replication slot, 0 when none does, sampled"
})

/** The labels arrays handed out: by transport, by the second label's name ("" for none), by its value. */
const labelsCache = new Map<string, Map<string, Map<string, ReadonlyArray<MetricLabel.MetricLabel>>>>()

/**
 * The labels `transport` (and `name=value` when `name` is not ""), the same array every time: Effect's metrics find
 * their hook by the array's identity, so an update with it costs a few map lookups and allocates nothing.
 */
const labelsOf = (transport: string, name = "", value = ""): ReadonlyArray<MetricLabel.MetricLabel> => {
  let byName = labelsCache.get(transport)
  if (byName === undefined) labelsCache.set(transport, byName = new Map())
  let byValue = byName.get(name)
  if (byValue === undefined) byName.set(name, byValue = new Map())
  let labels = byValue.get(value)
  if (labels === undefined) {
    const first = MetricLabelModule.make("transport", transport)
    labels = name === "" ? [first] : [first, MetricLabelModule.make(name, value)]
    byValue.set(value, labels)
  }
  return labels
}

/** The labels of a transport, the same array every time (see `labelsOf`). @internal */
export const transportLabels = (transport: string): ReadonlyArray<MetricLabel.MetricLabel> => labelsOf(transport)

/** The labels of a transport and a message type, the same array every time (see `labelsOf`). @internal */
export const messageLabels = (transport: string, type: string): ReadonlyArray<MetricLabel.MetricLabel> =>
  labelsOf(transport, "type", type)

/**
 * Exports the worker's counters from its start, at 0 — per transport, and per transport and handled type — so that
 * the first retry, failure or restart is an increase (`increase()` and `rate()` cannot see a series' first value).
 *
 * @internal
 */
export const initialize = (transports: ReadonlyArray<string>, types: ReadonlyArray<[string, string]>): void => {
  for (const [transport, type] of types) {
    const labels = messageLabels(transport, type)
    handled.unsafeUpdate(0, labels)
    retried.unsafeUpdate(0, labels)
    failed.unsafeUpdate(0, labels)
  }
  for (const transport of transports) leaseRenewals.unsafeUpdate(0, transportLabels(transport))
  loopRestarts.unsafeUpdate(0, [])
}

/**
 * Samples the queue gauges of these transports once, through `TransportAdmin.stats` (the operator's view: one
 * query per transport).
 *
 * @since 0.1.0
 * @category sampling
 */
export const sampleQueuesOnce = (
  transports: ReadonlyArray<string>
): Effect.Effect<void, TransportError | UnknownTransportError, TransportAdmin> =>
  Effect.flatMap(
    TransportAdmin,
    (admin) =>
      Effect.forEach(transports, (transport) =>
        Effect.map(admin.stats(transport), (stats) => {
          queueMessages.unsafeUpdate(stats.ready, labelsOf(transport, "state", "ready"))
          queueMessages.unsafeUpdate(stats.delayed, labelsOf(transport, "state", "delayed"))
          queueMessages.unsafeUpdate(stats.inFlight, labelsOf(transport, "state", "in_flight"))
          queueMessages.unsafeUpdate(stats.failed, labelsOf(transport, "state", "failed"))
          oldestReadyAge.unsafeUpdate(
            stats.oldestReadyAgeMs === null ? 0 : stats.oldestReadyAgeMs / 1000,
            transportLabels(transport)
          )
          blockedKeys.unsafeUpdate(stats.blockedKeys, transportLabels(transport))
          for (const p of stats.partitions ?? []) {
            consumerLag.unsafeUpdate(p.lag, [
              MetricLabelModule.make("transport", transport),
              MetricLabelModule.make("topic", p.topic),
              MetricLabelModule.make("partition", String(p.partition))
            ])
          }
          if (stats.slot !== undefined && stats.slot !== null) {
            const labels = labelsOf(transport, "slot", stats.slot.name)
            slotRetainedBytes.unsafeUpdate(stats.slot.retainedBytes, labels)
            slotActive.unsafeUpdate(stats.slot.active ? 1 : 0, labels)
          }
        }), { discard: true })
  )

/**
 * Samples the queue gauges now, then every `every` (default 15 seconds) until interrupted; a failed sample is
 * logged and the next one tried. Run it in one process per deployment (one query per transport each time), not
 * per claim. `Worker.run({ sampleQueues })` takes the first sample before it claims, so the gauges exist from the
 * worker's start.
 *
 * @since 0.1.0
 * @category sampling
 */
export const sampleQueues = (
  transports: ReadonlyArray<string>,
  every: Duration.DurationInput = "15 seconds"
): Effect.Effect<never, never, TransportAdmin> =>
  Effect.zipRight(sampleQueuesLogged(transports), sampleQueuesLater(transports, every))

/** One sample; a failure is logged. @internal */
export const sampleQueuesLogged = (transports: ReadonlyArray<string>) =>
  sampleQueuesOnce(transports).pipe(
    Effect.catchAll((error) => Effect.logWarning("outbox metrics: sampling the queues failed", error))
  )

/** A sample every `every`, the first after one interval. @internal */
export const sampleQueuesLater = (
  transports: ReadonlyArray<string>,
  every: Duration.DurationInput
): Effect.Effect<never, never, TransportAdmin> =>
  sampleQueuesLogged(transports).pipe(
    Effect.delay(every),
    Effect.forever
  )
