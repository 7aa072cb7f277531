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

/** PostgreSQL keeps identifiers, channel names among them, to 63 bytes. */
const maxIdentifierLength = 63

/**
 * Validates a notification channel name: letters, digits, underscores and dots, not starting with a digit or a
 * dot, at most 63 characters (`pg_notify` rejects longer names).
 *
 * @since 0.1.0
 * @category validation
 */
export const validateChannel = (name: string): Effect.Effect<string, OutboxConfigError> =>
  /^[A-Za-z_][A-Za-z0-9_.]*$/.test(name) && name.length <= maxIdentifierLength
    ? Effect.succeed(name)
    : Effect.fail(
      new OutboxConfigError({
        message: `Invalid notification channel ${JSON.stringify(name)}: expected letters, digits, '_' and '.', ` +
          `not starting with a digit or '.', at most ${maxIdentifierLength} characters`
      })
    )

/**
 * The notification channel of a (validated) table: its name with `.` as `_`; a name longer than 63 characters
 * keeps its first 54 and a hash of the whole, so that every valid table has a valid channel and two tables never
 * share one by accident.
 *
 * @since 0.1.0
 * @category constructors
 */
export const defaultChannel = (table: string): string => {
  const name = table.replace(/\./g, "_")
  if (name.length <= maxIdentifierLength) return name
  return `${name.slice(0, maxIdentifierLength - 9)}_${fnv1a(table).toString(16).padStart(8, "0")}`
}

/** FNV-1a, 32 bits: a stable short hash (the channel must be the same in every process). */
const fnv1a = (text: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193) >>> 0
  }
  return hash
}
