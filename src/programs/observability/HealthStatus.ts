/**
 * What a health probe answers: healthy, or unhealthy with the reason. A module of its own, free of any HTTP or
 * OpenTelemetry import, so the code that knows whether the process is alive or ready (the worker, an application)
 * can produce it without loading the metrics endpoint.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"

/**
 * A probe's answer: `Healthy`, or `Unhealthy` with a short reason for the operator.
 *
 * @since 0.1.0
 * @category models
 */
export type HealthStatus = Data.TaggedEnum<{
  Healthy: {}
  Unhealthy: { readonly reason: string }
}>

const { Healthy, Unhealthy } = Data.taggedEnum<HealthStatus>()

/**
 * A healthy answer (a `Data` value: two of them are `Equal`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const healthy: HealthStatus = Healthy()

/**
 * An unhealthy answer with its reason.
 *
 * @since 0.1.0
 * @category constructors
 */
export const unhealthy = (reason: string): HealthStatus => Unhealthy({ reason })

/**
 * `healthy` when `ok`, else `unhealthy(reason)`: for a probe that computes a condition.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromBoolean = (ok: boolean, reason: string): HealthStatus => ok ? healthy : unhealthy(reason)

/**
 * Whether a status is healthy.
 *
 * @since 0.1.0
 * @category guards
 */
export const isHealthy = (status: HealthStatus): status is Extract<HealthStatus, { readonly _tag: "Healthy" }> =>
  status._tag === "Healthy"

/**
 * Folds a status.
 *
 * @since 0.1.0
 * @category pattern matching
 */
export const match = <A, B>(
  status: HealthStatus,
  cases: { readonly Healthy: () => A; readonly Unhealthy: (reason: string) => B }
): A | B => status._tag === "Healthy" ? cases.Healthy() : cases.Unhealthy(status.reason)

/**
 * A probe: an effect run on every request to the endpoint that asks it. A failure, a defect or an answer slower
 * than the endpoint's timeout reads as unhealthy; the probe never has to catch anything itself.
 *
 * @since 0.1.0
 * @category models
 */
export type Probe<R = never> = Effect.Effect<HealthStatus, unknown, R>
