/**
 * The worker's options checked before it starts: a number that is not one (`NaN`, `Infinity` where a count is
 * meant) or a duration that cannot be one is an `OutboxConfigError` naming the option, never a loop that spins.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { OutboxConfigError } from "../../domain/Errors.js"
import * as Durations from "../../internal/durations.js"
import type { WorkerOptions } from "./model.js"

const problem = (name: string, expected: string, value: unknown) =>
  `Worker option ${name} must be ${expected}, got ${Durations.show(value)}`

const integer = (name: string, value: number | undefined, min: number): Option.Option<string> =>
  value === undefined || (Number.isSafeInteger(value) && value >= min)
    ? Option.none()
    : Option.some(problem(name, `an integer >= ${min}`, value))

const duration = (name: string, value: Duration.DurationInput | undefined, finite: boolean): Option.Option<string> => {
  if (value === undefined) return Option.none()
  // A number is milliseconds; `Duration` would read NaN and negatives as zero, hiding the mistake.
  if (typeof value === "number" && !(value >= 0 && (!finite || Number.isFinite(value)))) {
    return Option.some(problem(name, `a non-negative${finite ? ", finite" : ""} duration`, value))
  }
  const decoded = Duration.decodeUnknown(value)
  const ok = Option.isSome(decoded) && !Number.isNaN(Duration.toMillis(decoded.value)) &&
    Duration.toMillis(decoded.value) >= 0 && (!finite || Duration.isFinite(decoded.value))
  return ok ? Option.none() : Option.some(problem(name, `a non-negative${finite ? ", finite" : ""} duration`, value))
}

/** A bound that must hold: a finite duration greater than zero. */
const bound = (name: string, value: Duration.DurationInput | undefined): Option.Option<string> =>
  value === undefined || Option.isSome(Durations.positiveFinite(value))
    ? Option.none()
    : Option.some(problem(name, "a finite duration greater than zero", value))

/** The first problem of the options, as an `OutboxConfigError`. @internal */
export const validate = (options: WorkerOptions): Effect.Effect<void, OutboxConfigError> => {
  const purge = options.idempotencyPurge === false ? undefined : options.idempotencyPurge
  const checks = [
    options.transports.length > 0 ? Option.none() : Option.some("Worker option transports must name a transport"),
    integer("batchSize", options.batchSize, 1),
    integer("concurrency", options.concurrency, 1),
    duration("sleep", options.sleep, true),
    integer("limit", options.limit, 0),
    integer("failureLimit", options.failureLimit, 0),
    duration("timeLimit", options.timeLimit, false),
    options.memoryLimit === undefined || options.memoryLimit > 0 && Number.isFinite(options.memoryLimit)
      ? Option.none()
      : Option.some(problem("memoryLimit", "a positive number of bytes", options.memoryLimit)),
    duration("shutdownTimeout", options.shutdownTimeout, false),
    duration("settleTimeout", options.settleTimeout, false),
    bound("sampleQueues", options.sampleQueues),
    bound("handlerTimeout", options.handlerTimeout),
    duration("idempotencyPurge.every", purge?.every, true),
    duration("idempotencyPurge.olderThan", purge?.olderThan, true),
    integer("idempotencyPurge.batchSize", purge?.batchSize, 1),
    integer("idempotencyPurge.maxBatches", purge?.maxBatches, 1)
  ]
  const first = checks.find(Option.isSome)
  return first === undefined ? Effect.void : Effect.fail(new OutboxConfigError({ message: first.value }))
}
