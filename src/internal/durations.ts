/**
 * Option values as error messages show them: a bigint or a cyclic value never makes the message throw.
 *
 * @internal
 */
import * as Duration from "effect/Duration"

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
