/**
 * The points of the dashboard's chart: the counts of every transport sampled while the dashboard lives, the last
 * hour kept, with the messages the workers of this process handled between two samples.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as MetricState from "effect/MetricState"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import type { TransportAdminShape } from "../../services/TransportAdmin.js"
import type { Sample } from "./views.js"

/** The messages the workers of this process handled so far (`null`: none ran here), from the global metrics. */
const handledHere = (): number | null => {
  let total: number | null = null
  for (const pair of Metric.unsafeSnapshot()) {
    if (pair.metricKey.name !== "outbox_messages_handled" || !MetricState.isCounterState(pair.metricState)) continue
    total = (total ?? 0) + Number(pair.metricState.count)
  }
  return total
}

/**
 * Samples the counts of `queues` (waiting) and `failures` every `every`, in a fiber of the scope; the points of the
 * last hour are read from the answer. A failed sample is skipped (logged at debug).
 *
 * @internal
 */
export const start = (options: {
  readonly admin: TransportAdminShape
  readonly queues: ReadonlyArray<string>
  readonly failures: ReadonlyArray<string>
  readonly every: Duration.DurationInput
}) =>
  Effect.gen(function*() {
    const { admin } = options
    const samples = yield* Ref.make<ReadonlyArray<Sample>>([])
    let handledBefore: number | null = null
    const sample = Effect.gen(function*() {
      const queues = yield* Effect.forEach(options.queues, (name) => admin.stats(name))
      const failures = yield* Effect.forEach(options.failures, (name) => admin.stats(name))
      const at = yield* Clock.currentTimeMillis
      const handledNow = handledHere()
      const handled = handledNow === null ? null : handledNow - (handledBefore ?? handledNow)
      handledBefore = handledNow
      const point: Sample = {
        at,
        backlog: queues.reduce((sum, s) => sum + s.ready + s.delayed + s.inFlight, 0),
        failed: failures.reduce((sum, s) => sum + s.ready + s.delayed + s.inFlight, 0),
        handled
      }
      yield* Ref.update(samples, (all) => [...all.filter((s) => s.at >= at - 3_600_000), point])
    })
    yield* sample.pipe(
      Effect.catchAllCause((cause) => Effect.logDebug("dashboard: a sample of the counts failed", cause)),
      Effect.repeat(Schedule.spaced(Duration.decode(options.every))),
      Effect.forkScoped
    )
    return Ref.get(samples)
  })
