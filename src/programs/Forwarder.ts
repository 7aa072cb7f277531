/**
 * Forwarding to a broker: the outbox is the first hop, the broker the second. A forwarder is a handler bound
 * to the outbox transport that re-sends the message, unchanged, to a broker transport; the worker deletes the
 * outbox row only after the handler succeeded — that is, after the broker confirmed the publish. Between the
 * database and the broker there is no loss, only possible duplicates (a worker killed between the confirm and
 * the delete forwards the message again): consumers on the far side dedupe by the message id
 * (`Handlers.handler(…, { idempotent: true })`).
 *
 * ```ts
 * const handlers = Handlers.layer([
 *   ...Forwarder.handlers([OrderPaid, OrderShipped], { to: "amqp" }),          // outbox → RabbitMQ
 *   Handlers.handler(OrderPaid, issueInvoice, { fromTransport: "amqp", idempotent: true }) // the far side
 * ])
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { type Envelope, resend } from "../domain/Envelope.js"
import {
  type StorageNotReadyError,
  type TransportError,
  type UnknownTransportError,
  UnrecoverableMessageHandlingError
} from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import * as Message from "../domain/Message.js"
import * as Routing from "../domain/Routing.js"
import * as TraceContext from "../internal/traceContext.js"
import type * as Handlers from "../services/Handlers.js"
import { Transport } from "../services/Transport.js"

/**
 * Options of a forwarder.
 *
 * @since 0.1.0
 * @category models
 */
export interface ForwardOptions {
  /** The transport to forward to (a broker transport, e.g. `amqp`). */
  readonly to: string
  /** The transport the forwarder handles messages from (default `outbox`); it never runs for any other. */
  readonly fromTransport?: string
  /** The handler name (default `forward:<type>-><to>`). */
  readonly name?: string
}

/**
 * Errors of a forward: the target transport failed (the broker is down, nacked or returned the message) — the
 * message is retried by the strategy of the transport it came from —, the target is not set up
 * (`StorageNotReadyError`: the worker stops and gives the message back untouched, as storage that is not ready is
 * not the message's fault), or a forward into the transport the message came from was refused.
 *
 * @since 0.1.0
 * @category models
 */
export type ForwardError =
  | TransportError
  | UnknownTransportError
  | StorageNotReadyError
  | UnrecoverableMessageHandlingError

/**
 * The headers a forwarded message carries: its type, application headers and trace context — the given `trace`
 * (the forward's own `send` span, when a tracer is installed), else the one it arrived with. The stamps of the
 * first hop (its retries, the handlers that ran on it, its routing override, its dispatch delay, failure details)
 * stay behind, so the far side starts fresh — its handlers are not skipped because a namesake ran here.
 *
 * @since 0.1.0
 * @category utils
 */
export const forwardedHeaders = (
  headers: Headers.Headers,
  trace?: { readonly traceparent: string; readonly tracestate?: string }
): Headers.Headers => {
  const context = trace ?? headers
  // Every field is taken from valid headers (or a trace stamp's strings): validating them again costs a forward
  // more than its broker round trip's share.
  return new Headers.Headers({
    type: headers.type,
    ...(context.traceparent !== undefined ? { traceparent: context.traceparent } : {}),
    ...(context.tracestate !== undefined ? { tracestate: context.tracestate } : {}),
    ...(headers.custom !== undefined ? { custom: headers.custom } : {})
  }, true)
}

/**
 * Sends a received message on to a transport — same message id, same body (the stored text when the envelope
 * carries it), same type and application headers, and its ordering key where the target has ordering keys (Kafka's
 * record key) — explicitly through `Transport.send`, never through routing,
 * and succeeds when the target has stored it (for a broker: confirmed it). Refuses to send a message into the
 * transport it came from.
 *
 * @since 0.1.0
 * @category forwarding
 */
export const forward = (
  envelope: Envelope,
  options: { readonly to: string }
): Effect.Effect<void, ForwardError, Transport> =>
  Effect.gen(function*() {
    if (options.to === envelope.transport) {
      return yield* new UnrecoverableMessageHandlingError({
        message: `Refusing to forward ${envelope.headers.type} ${envelope.messageId} into ${options.to}, the ` +
          `transport it came from`
      })
    }
    const transport = yield* Transport
    // A target without ordering keys (RabbitMQ, MySQL) takes the message without its key.
    const keyed = Option.exists(transport.capabilities(options.to), (c) => c.orderingKeys)
    const body = envelope.body ?? (yield* Message.encodeBody(envelope.message).pipe(
      Effect.mapError((e) => new UnrecoverableMessageHandlingError({ message: e.message, cause: e }))
    ))
    const send = (trace: TraceContext.Stamp | undefined) =>
      transport.send(options.to, [
        resend(
          {
            messageId: envelope.messageId,
            body,
            ...(envelope.orderingKey !== undefined && keyed ? { orderingKey: envelope.orderingKey } : {})
          },
          forwardedHeaders(envelope.headers, trace)
        )
      ])
    if (!(yield* TraceContext.enabled)) return yield* send(undefined)
    // The forward is the second hop's `send`: the far side's `process` span is its child, in the same trace.
    yield* Effect.useSpan(`send ${options.to}`, {
      kind: "producer",
      captureStackTrace: false,
      attributes: { ...TraceContext.sendAttributes(options.to, 1), "messaging.message.id": envelope.messageId }
    }, (span) => Effect.withParentSpan(send(TraceContext.stampOf(span)), span))
  })

/**
 * A handler that forwards one message class from `fromTransport` (default `outbox`) to `to`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const handler = <A extends Message.Tagged, I>(
  message: Message.MessageClass<A, I>,
  options: ForwardOptions
): Handlers.Handler<A, ForwardError, Transport> => ({
  message,
  name: options.name ?? `forward:${message._tag}->${options.to}`,
  fromTransport: options.fromTransport ?? Routing.defaultTransport,
  handle: (_message, envelope) => forward(envelope, options)
})

/**
 * Forwarders for several message classes in one line: `...Forwarder.handlers([OrderPaid], { to: "amqp" })`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const handlers = (
  messages: ReadonlyArray<Message.MessageClass>,
  options: Omit<ForwardOptions, "name">
): ReadonlyArray<Handlers.Handler<any, ForwardError, Transport>> => messages.map((m) => handler(m, options))
