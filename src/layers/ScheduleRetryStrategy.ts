/**
 * The retry strategy built from an Effect `Schedule` (exponential backoff by default), per transport.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import { OutboxConfigError } from "../domain/Errors.js"
import * as RetryDelay from "../domain/RetryDelay.js"
import { optionalFields } from "../internal/config.js"
import { mapConfigError } from "../internal/configError.js"
import { RetryStrategy, type RetryStrategyShape } from "../services/RetryStrategy.js"

/**
 * A policy: exponential options, or any `Schedule` whose recurrences are the retries and whose
 * delays are the waits (its input is the handler's error).
 *
 * @since 0.1.0
 * @category models
 */
export type Policy = RetryDelay.ExponentialOptions | Schedule.Schedule<unknown, unknown>

/**
 * Options: the default policy and per-transport overrides.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly default?: Policy
  readonly transports?: Readonly<Record<string, Policy>>
}

/** A policy's answer for an attempt: the delay before it, or `None` to give up. */
type DelayOf = (attempt: number, error: unknown) => Effect.Effect<Option.Option<Duration.Duration>>

/**
 * Exponential options are answered in closed form — exact for any budget, at any attempt — and a `Schedule` by
 * stepping it (`RetryDelay.delayForAttempt`, at most `RetryDelay.maxSteps` steps).
 */
const toDelayOf = (policy: Policy): Effect.Effect<DelayOf, OutboxConfigError> => {
  if (Schedule.isSchedule(policy)) {
    const schedule = policy as Schedule.Schedule<unknown, unknown>
    return Effect.succeed((attempt, error) => RetryDelay.delayForAttempt(schedule, attempt, error))
  }
  const options = policy as RetryDelay.ExponentialOptions
  return Option.match(RetryDelay.validateExponential(options), {
    onNone: () => Effect.succeed((attempt: number) => RetryDelay.exponentialDelay(options, attempt)),
    onSome: (message) => Effect.fail(new OutboxConfigError({ message: `Invalid retry options: ${message}` }))
  })
}

/**
 * Builds the strategy. Defaults: 5 retries after 1 s, 3 s, 9 s, 27 s and 81 s.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<RetryStrategyShape, OutboxConfigError> =>
  Effect.gen(function*() {
    const fallback = yield* toDelayOf(options.default ?? {})
    const perTransport = new Map<string, DelayOf>()
    for (const [name, policy] of Object.entries(options.transports ?? {})) {
      perTransport.set(name, yield* toDelayOf(policy))
    }
    return {
      delayFor: ({ attempt, error, transport }) => (perTransport.get(transport) ?? fallback)(attempt, error)
    }
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<RetryStrategy, OutboxConfigError> =>
  Layer.effect(RetryStrategy, make(options))

/**
 * The default strategy as a layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerDefault: Layer.Layer<RetryStrategy> = Layer.effect(RetryStrategy, Effect.orDie(make()))

/**
 * Reads the default policy from configuration: `OUTBOX_RETRY_MAX_RETRIES`, `OUTBOX_RETRY_DELAY`
 * (a duration such as `1 second`), `OUTBOX_RETRY_MULTIPLIER`, `OUTBOX_RETRY_MAX_DELAY`, `OUTBOX_RETRY_JITTER`
 * (under a prefix you can change with `Config.nested`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Config<RetryDelay.ExponentialOptions> = exponentialConfig
): Layer.Layer<RetryStrategy, OutboxConfigError> =>
  Layer.effect(RetryStrategy, Effect.flatMap(mapConfigError(config), (options) => make({ default: options })))

/**
 * The configuration of exponential options, each field optional.
 *
 * @since 0.1.0
 * @category config
 */
export const exponentialConfig: Config.Config<RetryDelay.ExponentialOptions> = optionalFields({
  maxRetries: Config.integer("MAX_RETRIES"),
  delay: Config.duration("DELAY"),
  multiplier: Config.number("MULTIPLIER"),
  maxDelay: Config.duration("MAX_DELAY"),
  jitter: Config.number("JITTER")
}).pipe(
  Config.nested("RETRY"),
  Config.nested("OUTBOX")
)
