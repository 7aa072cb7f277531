/**
 * The error of a message handled at dispatch by a sync transport (`SyncTransport`), and how to take it out of
 * the dispatch error that carries it.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { TransportError } from "./Errors.js"
import { ErrorDetails } from "./Headers.js"

/**
 * A message sent to a sync transport could not be handled: a handler failed or died (with any error,
 * `UnrecoverableMessageHandlingError` and `RecoverableMessageHandlingError` alike — nothing is retried), the
 * message could not be decoded as a stored one would be (`MessageDecodeError`), or no handler takes it from
 * that transport (`NoHandlerForMessageError`).
 *
 * `reason` is what the worker would record in the failure queue (tag, message and cause, each bounded), `cause`
 * the original error: the first failing handler's error or defect, or the decoding error. `handledBy` names the
 * handlers of the message that succeeded before or beside the failure (their SQL rolled back with the dispatch
 * when it ran inside a transaction).
 *
 * `Outbox.dispatch` fails with it inside a `TransportError` (operation `handle`, `cause` this error), the
 * dispatch error the transport contract allows; `SyncHandlingError.surface` fails with it directly.
 *
 * @since 0.1.0
 * @category errors
 */
export class SyncHandlingError extends Schema.TaggedError<SyncHandlingError>()("SyncHandlingError", {
  /** The sync transport the message was sent to. */
  transport: Schema.String,
  /** The message type (bounded). */
  type: Schema.String,
  messageId: Schema.String,
  reason: ErrorDetails,
  handledBy: Schema.Array(Schema.String),
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  /**
   * The `SyncHandlingError` a dispatch failed with: the error itself, or the `TransportError` carrying it.
   *
   * @since 0.1.0
   */
  static fromDispatchError(error: unknown): Option.Option<SyncHandlingError> {
    if (error instanceof SyncHandlingError) return Option.some(error)
    return error instanceof TransportError && error.cause instanceof SyncHandlingError
      ? Option.some(error.cause)
      : Option.none()
  }

  /**
   * Fails with the `SyncHandlingError` itself where `self` fails with the `TransportError` carrying it; other
   * errors are left as they are.
   *
   * @example
   * ```ts
   * const receipt = SyncHandlingError.surface(Outbox.dispatch(new SendReceipt({ orderId })))
   * // Effect<MessageId, DispatchError | SyncHandlingError, Outbox>
   * ```
   *
   * @since 0.1.0
   */
  static surface<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E | SyncHandlingError, R> {
    return Effect.mapError(
      self,
      (error): E | SyncHandlingError => Option.getOrElse(SyncHandlingError.fromDispatchError(error), () => error)
    )
  }

  /**
   * The dispatch error that carries this error through `Transport.send`.
   *
   * @since 0.1.0
   */
  toTransportError(): TransportError {
    return new TransportError({ transport: this.transport, operation: "handle", message: this.message, cause: this })
  }
}
