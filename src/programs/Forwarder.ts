/**
 * Forwarding to a broker: the outbox is the first hop, the broker the second. A forwarder is a batch handler
 * bound to the outbox transport that re-sends a claimed batch's messages, unchanged, to a broker transport in one
 * send; the worker deletes an outbox row only after the handler succeeded for it — that is, after the broker
 * confirmed the publish. Between the
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
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { type Envelope, type OutgoingMessage, resend } from "../domain/Envelope.js"
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
import * as Handlers from "../services/Handlers.js"
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

/** The message a forward sends: the envelope's id, body, type, headers (see `forwardedHeaders`) and key. */
const outgoing = (
  envelope: Envelope,
  to: string,
  keyed: boolean,
  trace?: TraceContext.Stamp
): Effect.Effect<OutgoingMessage, UnrecoverableMessageHandlingError> => {
  if (to === envelope.transport) {
    return Effect.fail(
      new UnrecoverableMessageHandlingError({
        message: `Refusing to forward ${envelope.headers.type} ${envelope.messageId} into ${to}, the ` +
          `transport it came from`
      })
    )
  }
  const make = (body: string) =>
    resend(
      {
        messageId: envelope.messageId,
        body,
        // A target without ordering keys (RabbitMQ, MySQL) takes the message without its key.
        ...(envelope.orderingKey !== undefined && keyed ? { orderingKey: envelope.orderingKey } : {})
      },
      forwardedHeaders(envelope.headers, trace)
    )
  return envelope.body !== undefined ? Effect.succeed(make(envelope.body)) : Message.encodeBody(envelope.message).pipe(
    Effect.mapBoth({
      onFailure: (e) => new UnrecoverableMessageHandlingError({ message: e.message, cause: e }),
      onSuccess: make
    })
  )
}

/** Whether `to` takes ordering keys. */
const takesKeys = (transport: Context.Tag.Service<Transport>, to: string) =>
  Option.exists(transport.capabilities(to), (c) => c.orderingKeys)

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
    const transport = yield* Transport
    const keyed = takesKeys(transport, options.to)
    const send = (trace: TraceContext.Stamp | undefined) =>
      Effect.flatMap(outgoing(envelope, options.to, keyed, trace), (message) => transport.send(options.to, [message]))
    if (!(yield* TraceContext.enabled)) return yield* send(undefined)
    // The forward is the second hop's `send`: the far side's `process` span is its child, in the same trace.
    yield* Effect.useSpan(`send ${options.to}`, {
      kind: "producer",
      captureStackTrace: false,
      attributes: { ...TraceContext.sendAttributes(options.to, 1), "messaging.message.id": envelope.messageId }
    }, (span) => Effect.withParentSpan(send(TraceContext.stampOf(span)), span))
  })

/**
 * Sends that may fail, after a shared send failed, before one succeeds: past them the target is taken to be down
 * (a broker outage fails every send, each after its timeout) and the messages not yet forwarded fail with its error.
 */
const failuresBeforeGivingUp = 8

/**
 * Sends several received messages on to a transport in one `Transport.send` (one broker round trip for the lot:
 * one Kafka produce request per partition leader, one AMQP confirm wait, one SQL insert), in their order, and says
 * per message whether it was forwarded. When the shared send fails, its halves are sent, and the halves of a half
 * that fails, down to single messages: a message the target refuses (a record too large, say) fails alone, in about
 * twice log2(n) sends, and the others are forwarded — some twice or more, if the target kept part of a failed send
 * (Kafka keeps the partitions it could write): at-least-once, the far side dedupes by the message id. A target that
 * refuses everything (an outage) is given up after a few sends. With a tracer installed each message is forwarded as
 * `forward` does, in a `send` span of its own.
 *
 * @since 0.1.0
 * @category forwarding
 */
export const forwardAll = (
  envelopes: ReadonlyArray<Envelope>,
  options: { readonly to: string }
): Effect.Effect<Array<Either.Either<void, ForwardError>>, never, Transport> =>
  Effect.gen(function*() {
    if (envelopes.length === 1 || (yield* TraceContext.enabled)) {
      return yield* Effect.forEach(envelopes, (envelope) => Effect.either(forward(envelope, options)))
    }
    const transport = yield* Transport
    const keyed = takesKeys(transport, options.to)
    const results: Array<Either.Either<void, ForwardError>> = new Array(envelopes.length)
    const sending: Array<number> = []
    const messages: Array<OutgoingMessage> = []
    for (let i = 0; i < envelopes.length; i++) {
      const message = yield* Effect.either(outgoing(envelopes[i]!, options.to, keyed))
      if (Either.isLeft(message)) results[i] = message
      else {
        sending.push(i)
        messages.push(message.right)
      }
    }
    // Groups of positions in `sending`, sent in order, level by level: the whole, then the halves of what failed.
    let level: Array<Array<number>> = sending.length === 0 ? [] : [sending.map((_, k) => k)]
    let succeeded = false
    let failures = 0
    let stop: Either.Either<void, ForwardError> | undefined
    while (level.length > 0) {
      const next: Array<Array<number>> = []
      for (const group of level) {
        if (stop !== undefined) {
          for (const k of group) results[sending[k]!] = stop
          continue
        }
        const sent = yield* Effect.either(transport.send(options.to, group.map((k) => messages[k]!)))
        if (Either.isRight(sent)) succeeded = true
        else {
          failures++
          // Not a message's fault: the target is not set up or unknown, or down.
          if (sent.left._tag !== "TransportError" || (!succeeded && failures >= failuresBeforeGivingUp)) {
            stop = sent
          }
        }
        if (Either.isRight(sent) || group.length === 1 || stop !== undefined) {
          for (const k of group) results[sending[k]!] = sent
        } else {
          const half = Math.ceil(group.length / 2)
          next.push(group.slice(0, half), group.slice(half))
        }
      }
      level = next
    }
    return results
  })

/**
 * A handler that forwards one message class from `fromTransport` (default `outbox`) to `to`: a batch handler
 * (`Handlers.batch`), so a worker forwards a claimed batch's messages of the class in one send (see `forwardAll`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const handler = <A extends Message.Tagged, I>(
  message: Message.MessageClass<A, I>,
  options: ForwardOptions
): Handlers.Handler<A, ForwardError, Transport> =>
  Handlers.batch(message, (items) => forwardAll(items.map((item) => item.envelope), options), {
    name: options.name ?? `forward:${message._tag}->${options.to}`,
    fromTransport: options.fromTransport ?? Routing.defaultTransport
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
