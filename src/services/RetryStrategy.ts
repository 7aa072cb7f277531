/**
 * Decides whether a failed message is retried, and after how long.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"

/**
 * What the strategy is asked about: the transport, the number of the retry that would come next
 * (1 for the first retry) and the error.
 *
 * @since 0.1.0
 * @category models
 */
export interface RetryContext {
  readonly transport: string
  readonly attempt: number
  readonly error: unknown
}

/**
 * @since 0.1.0
 * @category models
 */
export interface RetryStrategyShape {
  /** `Some(delay)` to retry after `delay`, `None` to give up (the message goes to the failure queue). */
  readonly delayFor: (context: RetryContext) => Effect.Effect<Option.Option<Duration.Duration>>
}

/**
 * The retry strategy service. Build one with `ScheduleRetryStrategy.layer`.
 *
 * @since 0.1.0
 * @category tags
 */
export class RetryStrategy extends Context.Tag("effect-outbox/RetryStrategy")<RetryStrategy, RetryStrategyShape>() {}
