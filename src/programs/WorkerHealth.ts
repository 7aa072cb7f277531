/**
 * A worker's health for Kubernetes-style probes: **live** while its loop makes progress — a claim answered, a wait
 * ended, a message finished — within `stallAfter`; **ready** while its storage answers (from its
 * first claim until a storage failure, and again after the next claim that succeeds). Pass it to `Worker.run`
 * (`health`) and its probes to the metrics endpoint (`MetricsServer.layer({ live, ready })`).
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HealthStatus from "./observability/HealthStatus.js"

/**
 * The health of one worker, updated by the worker and read by the probes.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerHealth {
  /** Healthy while the loop made progress within `stallAfter` (and the worker has not stopped). */
  readonly live: Effect.Effect<HealthStatus.HealthStatus>
  /** Healthy while the storage answers the worker's claims. */
  readonly ready: Effect.Effect<HealthStatus.HealthStatus>
  /** @internal */
  readonly track: Tracker
}

/** What the worker writes. @internal */
export interface Tracker {
  /** When the loop last made progress (clock milliseconds), `undefined` before the worker started. */
  progressAt: number | undefined
  /** Why the worker is not ready, `undefined` when it is. */
  notReady: string | undefined
  /** Why the worker is not live any more (it stopped), `undefined` while it runs. */
  stopped: string | undefined
  /** How long the loop may make no progress: `stallAfter`, when given. */
  readonly stallAfterMs: number | undefined
  /** How long otherwise: the running worker's `handlerTimeout` plus a minute (set when it starts). */
  defaultStallAfterMs: number
}

/**
 * A worker's health; `stallAfter` is how long the loop may make no progress before it reads as not live — by
 * default the worker's `handlerTimeout` plus a minute, since one handler may legitimately run that long.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: { readonly stallAfter?: Duration.DurationInput } = {}): WorkerHealth => {
  const track: Tracker = {
    progressAt: undefined,
    notReady: "the worker has not claimed yet",
    stopped: undefined,
    stallAfterMs: options.stallAfter === undefined ? undefined : Duration.toMillis(Duration.decode(options.stallAfter)),
    defaultStallAfterMs: Infinity
  }
  const live = Effect.map(Clock.currentTimeMillis, (now): HealthStatus.HealthStatus => {
    if (track.stopped !== undefined) return HealthStatus.unhealthy(track.stopped)
    if (track.progressAt === undefined) return HealthStatus.unhealthy("the worker has not started")
    const idleMs = now - track.progressAt
    return idleMs <= (track.stallAfterMs ?? track.defaultStallAfterMs)
      ? HealthStatus.healthy
      : HealthStatus.unhealthy(`the worker's loop made no progress for ${Duration.format(Duration.millis(idleMs))}`)
  })
  const ready = Effect.sync((): HealthStatus.HealthStatus =>
    track.stopped !== undefined
      ? HealthStatus.unhealthy(track.stopped)
      : track.notReady === undefined
      ? HealthStatus.healthy
      : HealthStatus.unhealthy(track.notReady)
  )
  return { live, ready, track }
}
