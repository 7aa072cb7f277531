/**
 * Validation of SQL identifiers and queue names taken from configuration.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import { OutboxConfigError } from "./Errors.js"

const identifierPattern = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * Validates a (possibly schema-qualified) table name such as `messenger_messages` or
 * `app.outbox`: letters, digits and underscores, not starting with a digit, each part at most
 * `maxLength` bytes (PostgreSQL truncates identifiers at 63).
 *
 * @since 0.1.0
 * @category validation
 */
export const validateTableName = (name: string, maxLength = 63): Effect.Effect<string, OutboxConfigError> => {
  const parts = name.split(".")
  const ok = parts.length >= 1 && parts.length <= 2 &&
    parts.every((part) => identifierPattern.test(part) && part.length <= maxLength)
  return ok
    ? Effect.succeed(name)
    : Effect.fail(
      new OutboxConfigError({
        message: `Invalid table name ${JSON.stringify(name)}: expected [schema.]identifier of letters, digits and ` +
          `underscores, not starting with a digit, each part at most ${maxLength} characters`
      })
    )
}

/**
 * Validates a queue or transport name: 1–190 printable characters from `[A-Za-z0-9_.:-]`.
 * Queue names are always bound as parameters; the check keeps operators' names readable and safe
 * in logs, shells and notification channels.
 *
 * @since 0.1.0
 * @category validation
 */
export const validateQueueName = (name: string): Effect.Effect<string, OutboxConfigError> =>
  /^[A-Za-z0-9_.:-]{1,190}$/.test(name)
    ? Effect.succeed(name)
    : Effect.fail(
      new OutboxConfigError({
        message: `Invalid queue or transport name ${JSON.stringify(name)}: expected 1-190 characters of ` +
          `letters, digits, '_', '.', ':' and '-'`
      })
    )
