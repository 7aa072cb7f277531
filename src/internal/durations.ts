/**
 * Option values that are durations: checked where a bound is meant (`Duration.decode` reads `NaN` and negative
 * numbers as zero and accepts `Infinity`, which would hide the mistake), and shown in error messages (a bigint or
 * a cyclic value never makes the message throw).
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"

/** The duration, when `value` is one that is finite and greater than zero. @internal */
export const positiveFinite = (value: unknown): Option.Option<Duration.Duration> => {
  if (typeof value === "number" && !(value > 0 && Number.isFinite(value))) return Option.none()
  const decoded = Duration.decodeUnknown(value)
  if (Option.isNone(decoded)) return Option.none()
  const millis = Duration.toMillis(decoded.value)
  return Duration.isFinite(decoded.value) && millis > 0 ? decoded : Option.none()
}

/** An option's value as an error message shows it. @internal */
export const show = (value: unknown): string => {
  if (typeof value === "number" || typeof value === "bigint") return String(value)
  if (Duration.isDuration(value)) return Duration.format(value)
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}
