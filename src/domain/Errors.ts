/**
 * Typed errors of effect-outbox.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/**
 * Fail a handler with this error to send the message straight to the failure queue,
 * skipping every retry.
 *
 * @since 0.1.0
 * @category errors
 */
export class UnrecoverableMessageHandlingError extends Schema.TaggedError<UnrecoverableMessageHandlingError>()(
  "UnrecoverableMessageHandlingError",
  {
    message: Schema.String,
    cause: Schema.optional(Schema.Defect)
  }
) {}

/**
 * Fail a handler with this error to have the message retried even when the retry strategy
 * would give up — after `retryDelay` when given, otherwise after the strategy's delay.
 *
 * @since 0.1.0
 * @category errors
 */
export class RecoverableMessageHandlingError extends Schema.TaggedError<RecoverableMessageHandlingError>()(
  "RecoverableMessageHandlingError",
  {
    message: Schema.String,
    retryDelay: Schema.optional(Schema.DurationFromSelf),
    cause: Schema.optional(Schema.Defect)
  }
) {}

/**
 * Why a stored row could not be turned back into a message.
 *
 * @since 0.1.0
 * @category models
 */
export const DecodeFailureReason = Schema.Literal("CorruptHeaders", "CorruptBody", "UnknownType", "InvalidBody")

/**
 * @since 0.1.0
 * @category models
 */
export type DecodeFailureReason = typeof DecodeFailureReason.Type

/**
 * A stored row that cannot be decoded: corrupt JSON, an unknown type, or a body that fails
 * the message's schema. Such a row goes to the failure queue with this error; it is never dropped.
 *
 * @since 0.1.0
 * @category errors
 */
export class MessageDecodeError extends Schema.TaggedError<MessageDecodeError>()("MessageDecodeError", {
  reason: DecodeFailureReason,
  type: Schema.optional(Schema.String),
  message: Schema.String
}) {}

/**
 * A message could not be encoded with its schema at dispatch.
 *
 * @since 0.1.0
 * @category errors
 */
export class MessageEncodeError extends Schema.TaggedError<MessageEncodeError>()("MessageEncodeError", {
  type: Schema.String,
  message: Schema.String
}) {}

/**
 * A message was received that no registered handler accepts (for its type and transport).
 *
 * @since 0.1.0
 * @category errors
 */
export class NoHandlerForMessageError extends Schema.TaggedError<NoHandlerForMessageError>()(
  "NoHandlerForMessageError",
  {
    type: Schema.String,
    transport: Schema.String,
    message: Schema.String
  }
) {}

/**
 * The storage behind a transport failed (database down, connection killed, …).
 *
 * @since 0.1.0
 * @category errors
 */
export class TransportError extends Schema.TaggedError<TransportError>()("TransportError", {
  transport: Schema.String,
  operation: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * A transport name that no transport layer knows.
 *
 * @since 0.1.0
 * @category errors
 */
export class UnknownTransportError extends Schema.TaggedError<UnknownTransportError>()("UnknownTransportError", {
  transport: Schema.String,
  message: Schema.String
}) {}

/**
 * Invalid configuration: a hostile or malformed identifier, a negative delay, a missing route, …
 *
 * @since 0.1.0
 * @category errors
 */
export class OutboxConfigError extends Schema.TaggedError<OutboxConfigError>()("OutboxConfigError", {
  message: Schema.String
}) {}

/**
 * A message was claimed again without its previous delivery recording an outcome: the worker handling it
 * died (crash, OOM, SIGKILL) or lost its lease. Past the retry budget the message goes to the failure
 * queue with this error instead of killing workers forever.
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkerDiedError extends Schema.TaggedError<WorkerDiedError>()("WorkerDiedError", {
  message: Schema.String,
  deliveries: Schema.Int
}) {}

/**
 * The storage of a transport or of the idempotency store does not exist yet (or is older than this
 * version): run `outbox setup-transports` (or `TransportAdmin.setup`); or the role lacks a privilege on it (the
 * message says which). Not retried: a worker stops on it.
 *
 * @since 0.1.0
 * @category errors
 */
export class StorageNotReadyError extends Schema.TaggedError<StorageNotReadyError>()("StorageNotReadyError", {
  /** The table (or other storage) that is missing. */
  storage: Schema.String,
  message: Schema.String
}) {}

/**
 * A handler did not finish within its timeout (its `timeout` option, else the worker's `handlerTimeout`): it
 * was interrupted, and the message is retried by the retry strategy like any other failure.
 *
 * @since 0.1.0
 * @category errors
 */
export class HandlerTimeoutError extends Schema.TaggedError<HandlerTimeoutError>()("HandlerTimeoutError", {
  /** The handler's name. */
  handler: Schema.String,
  /** The timeout that was exceeded, in milliseconds. */
  timeoutMs: Schema.Number,
  message: Schema.String
}) {}
