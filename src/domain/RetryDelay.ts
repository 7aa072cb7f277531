/**
 * Retry delays computed from a `Schedule` without sleeping, so they can be persisted as a future
 * `available_at`.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"
import * as ScheduleIntervals from "effect/ScheduleIntervals"

/**
 * The most recurrences of a schedule that are stepped to answer one question. Past it, the schedule's answer at
 * this recurrence stands for every later attempt: a retry decision costs at most this many steps whatever the
 * attempt number (a message retried for months, a delivery count set by hand to 2³¹ − 1).
 *
 * @since 0.1.0
 * @category constants
 */
export const maxSteps = 1000

/**
 * The delay before retry number `attempt` (1-based) according to `schedule`, or `None` when the schedule is done
 * by then (give up). The schedule is stepped purely: nothing sleeps, no clock is read. Attempts past `maxSteps`
 * get the answer of attempt `maxSteps` — a backoff has reached its cap long before, a `Schedule.spaced` is
 * constant, a `Schedule.recurs(n)` with `n < maxSteps` is done — so `Schedule.recurs(n)` with `n ≥ maxSteps`
 * retries without end.
 *
 * @since 0.1.0
 * @category constructors
 */
export const delayForAttempt = <Out, In, R>(
  schedule: Schedule.Schedule<Out, In, R>,
  attempt: number,
  input: In
): Effect.Effect<Option.Option<Duration.Duration>, never, R> =>
  Effect.gen(function*() {
    if (!Number.isInteger(attempt) || attempt < 1) return Option.none()
    const last = Math.min(attempt, maxSteps)
    let state = schedule.initial
    let now = 0
    for (let i = 1; i <= last; i++) {
      const [next, , decision] = yield* schedule.step(now, input, state)
      if (decision._tag === "Done") return Option.none()
      const start = Math.max(now, ScheduleIntervals.start(decision.intervals))
      if (i === last) return Option.some(Duration.millis(start - now))
      state = next
      now = start
    }
    return Option.none()
  })

/**
 * Options of the exponential backoff (Symfony's multiplier strategy, as a `Schedule`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ExponentialOptions {
  /** Retries before giving up (default 5). */
  readonly maxRetries?: number
  /** First delay (default 1 second). */
  readonly delay?: Duration.DurationInput
  /** Growth factor (default 3). */
  readonly multiplier?: number
  /** Cap on each delay (default 1 hour). */
  readonly maxDelay?: Duration.DurationInput
  /** Random spread in [0, 1]: each delay is multiplied by U[1 - jitter, 1 + jitter], then capped (default 0). */
  readonly jitter?: number
}

/**
 * The defaults: 5 retries after 1 s, 3 s, 9 s, 27 s, 81 s.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultExponential = {
  maxRetries: 5,
  delay: Duration.seconds(1),
  multiplier: 3,
  maxDelay: Duration.hours(1),
  jitter: 0
} as const

/** The options with every default filled in, durations decoded: what `exponential` and `exponentialDelay` read. */
const withDefaults = (options: ExponentialOptions) => ({
  maxRetries: options.maxRetries ?? defaultExponential.maxRetries,
  delay: Duration.decode(options.delay ?? defaultExponential.delay),
  multiplier: options.multiplier ?? defaultExponential.multiplier,
  maxDelay: Duration.decode(options.maxDelay ?? defaultExponential.maxDelay),
  jitter: options.jitter ?? defaultExponential.jitter
})

/**
 * Builds the backoff schedule `delay × multiplier^(n-1)`, jittered, capped at `maxDelay`, at most
 * `maxRetries` recurrences. Invalid options are a defect of configuration and are reported by
 * `validateExponential`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const exponential = (options: ExponentialOptions = {}): Schedule.Schedule<Duration.Duration> => {
  const { delay, jitter, maxDelay, maxRetries, multiplier } = withDefaults(options)
  let schedule: Schedule.Schedule<Duration.Duration> = Schedule.exponential(delay, multiplier)
  if (jitter > 0) schedule = Schedule.jitteredWith(schedule, { min: 1 - jitter, max: 1 + jitter })
  return schedule.pipe(
    Schedule.modifyDelay((_out, delay) => Duration.min(delay, maxDelay)),
    Schedule.intersect(Schedule.recurs(maxRetries)),
    Schedule.map(([d]) => d)
  )
}

/**
 * The delay before retry number `attempt` (1-based) of the exponential backoff `options` describe, or `None` past
 * `maxRetries` — the answer `delayForAttempt(exponential(options), attempt)` gives, computed at once (no stepping),
 * so it is exact for any budget and any attempt. Jitter draws from the `Random` service.
 *
 * @since 0.1.0
 * @category constructors
 */
export const exponentialDelay = (
  options: ExponentialOptions,
  attempt: number
): Effect.Effect<Option.Option<Duration.Duration>> => {
  const resolved = withDefaults(options)
  if (!Number.isInteger(attempt) || attempt < 1 || attempt > resolved.maxRetries) return Effect.succeedNone
  const { jitter, multiplier } = resolved
  const delay = Duration.toMillis(resolved.delay)
  const maxDelay = Duration.toMillis(resolved.maxDelay)
  // 0 × ∞ (no first delay, a huge attempt) is no delay, not NaN.
  const base = delay === 0 ? 0 : delay * Math.pow(multiplier, attempt - 1)
  const capped = (ms: number) => Option.some(Duration.millis(Math.min(ms, maxDelay)))
  return jitter > 0
    ? Effect.map(Random.nextRange(1 - jitter, 1 + jitter), (factor) => capped(base * factor))
    : Effect.succeed(capped(base))
}

/**
 * Checks exponential options: `maxRetries` a non-negative integer, `multiplier ≥ 1`,
 * `0 ≤ jitter ≤ 1`, delays non-negative. Returns the first problem found.
 *
 * @since 0.1.0
 * @category validation
 */
export const validateExponential = (options: ExponentialOptions): Option.Option<string> => {
  const { jitter, maxRetries, multiplier } = options
  if (maxRetries !== undefined && (!Number.isInteger(maxRetries) || maxRetries < 0)) {
    return Option.some(`maxRetries must be a non-negative integer, got ${maxRetries}`)
  }
  if (multiplier !== undefined && !(multiplier >= 1)) {
    return Option.some(`multiplier must be >= 1, got ${multiplier}`)
  }
  if (jitter !== undefined && !(jitter >= 0 && jitter <= 1)) {
    return Option.some(`jitter must be within [0, 1], got ${jitter}`)
  }
  for (const [name, value] of [["delay", options.delay], ["maxDelay", options.maxDelay]] as const) {
    if (value === undefined) continue
    const decoded = Duration.decodeUnknown(value)
    if (Option.isNone(decoded) || Duration.toMillis(decoded.value) < 0) {
      return Option.some(`${name} must be a non-negative duration, got ${String(value)}`)
    }
  }
  return Option.none()
}
