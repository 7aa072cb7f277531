/**
 * The key of an idempotent consumer: which message, handled by which consumer.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { OutboxConfigError } from "./Errors.js"

/**
 * Identifies one handling of one message: the message's stable `messageId` (the UUIDv7 assigned at
 * dispatch — never the transport's row id, which a copy or a replay does not keep) and the name of
 * the consumer that handles it. Two consumers of one message have two keys, so each runs once.
 *
 * @since 0.1.0
 * @category models
 */
export interface IdempotencyKey {
  readonly messageId: string
  readonly consumer: string
}

/**
 * Anything that names a message: its id, or an object carrying it (an `Envelope`).
 *
 * @since 0.1.0
 * @category models
 */
export type MessageRef = string | { readonly messageId: string }

/**
 * The longest consumer name, in characters (the `varchar(190)` of the PostgreSQL column, as
 * `queue_name`).
 *
 * @since 0.1.0
 * @category constants
 */
export const maxConsumerLength = 190

/**
 * An idempotency key that cannot be stored: a message id that is not a UUID, or a consumer name
 * that is empty, longer than 190 characters or contains a NUL character. It is raised before any
 * statement is sent, so it never aborts the caller's transaction.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidIdempotencyKeyError extends Schema.TaggedError<InvalidIdempotencyKeyError>()(
  "InvalidIdempotencyKeyError",
  {
    messageId: Schema.String,
    consumer: Schema.String,
    message: Schema.String
  }
) {}

const isUuid = Schema.is(Schema.UUID)

/**
 * Why a consumer name is invalid, or `undefined` when it is valid.
 *
 * @since 0.1.0
 * @category validation
 */
export const consumerProblem = (consumer: string): string | undefined => {
  if (consumer.length === 0) return "the consumer name is empty"
  if (consumer.includes("\u0000")) return "the consumer name contains a NUL character"
  const length = Array.from(consumer).length
  if (length > maxConsumerLength) {
    return `the consumer name has ${length} characters, more than ${maxConsumerLength}`
  }
  return undefined
}

/**
 * Validates a key and normalizes its message id to lower case (as PostgreSQL's `uuid` type does), so
 * that every store compares keys alike.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (key: IdempotencyKey): Effect.Effect<IdempotencyKey, InvalidIdempotencyKeyError> => {
  const consumer = consumerProblem(key.consumer)
  const problem = !isUuid(key.messageId)
    ? `the message id ${JSON.stringify(key.messageId)} is not a UUID`
    : consumer
  return problem === undefined
    ? Effect.succeed({ messageId: key.messageId.toLowerCase(), consumer: key.consumer })
    : Effect.fail(
      new InvalidIdempotencyKeyError({
        messageId: key.messageId,
        consumer: key.consumer,
        message: `Invalid idempotency key: ${problem}`
      })
    )
}

/**
 * Validates a consumer name taken from configuration (a handler name, a CLI option), failing with
 * `OutboxConfigError` — for registries that check names when they are built rather than per message.
 *
 * @since 0.1.0
 * @category validation
 */
export const validateConsumer = (consumer: string): Effect.Effect<string, OutboxConfigError> => {
  const problem = consumerProblem(consumer)
  return problem === undefined
    ? Effect.succeed(consumer)
    : Effect.fail(
      new OutboxConfigError({
        message: `Invalid idempotent consumer name ${JSON.stringify(consumer)}: ${problem} ` +
          `(expected 1-${maxConsumerLength} characters)`
      })
    )
}

/**
 * The key of a message (an id or an envelope) for a consumer.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (message: MessageRef, consumer: string): IdempotencyKey => ({
  messageId: typeof message === "string" ? message : message.messageId,
  consumer
})
