/**
 * Effect's `ConfigError` as the library's `OutboxConfigError`: what every `layerConfig` and `makeConfig` fails with
 * when its configuration is missing or malformed, so callers handle one error for every bad setting.
 *
 * @internal
 */
import * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import { OutboxConfigError } from "../domain/Errors.js"

/** The leaves of a `ConfigError` (an `And` or `Or` holds several), each as `PATH: what is wrong`. */
const problems = (error: ConfigError.ConfigError): ReadonlyArray<string> => {
  switch (error._op) {
    case "And":
    case "Or":
      return [...problems(error.left), ...problems(error.right)]
    default: {
      const path = error.path.join("_")
      return [path.length === 0 ? error.message : `${path}: ${error.message}`]
    }
  }
}

/**
 * One `OutboxConfigError` naming each setting that is missing or invalid:
 * `Invalid configuration: OUTBOX_RETRY_DELAY: Expected a duration but received soon`.
 *
 * @internal
 */
export const fromConfigError = (error: ConfigError.ConfigError): OutboxConfigError =>
  new OutboxConfigError({ message: `Invalid configuration: ${Array.from(new Set(problems(error))).join("; ")}` })

/**
 * `self` with its `ConfigError`s turned into `OutboxConfigError`s (its other errors unchanged).
 *
 * @internal
 */
export const mapConfigError = <A, E, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, ConfigError.ConfigError> | OutboxConfigError, R> =>
  Effect.mapError(self, (error) =>
    ConfigError.isConfigError(error)
      ? fromConfigError(error)
      : error as Exclude<E, ConfigError.ConfigError>)
