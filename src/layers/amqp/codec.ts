/**
 * Message mapping of the RabbitMQ transport: AMQP deliveries to `ReceivedMessage`s, copies for a republish,
 * and the text of broker errors and URLs.
 *
 * @internal
 */
import type * as Amqp from "amqplib"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import type { OutgoingMessage, ReceivedMessage } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"
import * as MessageId from "../../domain/MessageId.js"
import { describeError } from "../../internal/describeError.js"
import { transportError } from "../../internal/transports.js"

/** The AMQP header carrying the stored headers JSON (type and stamps). @internal */
export const headersHeader = "x-outbox-headers"

/** What the browsing operations (`list`, `find`, `remove`, `move`) fail with, after their name. @internal */
export const unsupportedMessage = "not supported by the AMQP transport: a broker cannot browse a queue or take a " +
  "message out by id; keep failures in a PostgreSQL failure transport (TransportRouter)"

/** AMQP headers the broker sets on dead-lettering; a republished copy starts without them. */
const isBrokerHeader = (key: string): boolean =>
  key === "x-death" || key.startsWith("x-first-death-") || key.startsWith("x-last-death-")

const isMessageId = Schema.is(MessageId.MessageId)

/**
 * A delivery as the worker sees it. The transport id is `<consumer serial>.<delivery tag>`; deliveries are
 * counted from the headers' retry history (1 + retries), since AMQP 0-9-1 cannot tell a crashed consumer's
 * redelivery from a requeue.
 *
 * @internal
 */
export const toReceived = (transport: string, id: string, message: Amqp.ConsumeMessage): ReceivedMessage => {
  const p = message.properties
  const raw = p.headers?.[headersHeader]
  const headers = typeof raw === "string"
    ? raw
    : Buffer.isBuffer(raw)
    ? raw.toString("utf8")
    : Headers.encode(
      new Headers.Headers({ type: typeof p.type === "string" && p.type.length > 0 ? p.type : "<unknown>" })
    )
  const decoded = Headers.decode(headers)
  const retries = Either.isRight(decoded) ? Headers.retryCount(decoded.right) : 0
  const now = new Date()
  return {
    id,
    transport,
    // A message from another producer without a UUID gets a fresh one (it cannot be deduplicated).
    messageId: isMessageId(p.messageId) ? p.messageId : MessageId.make(),
    body: message.content.toString("utf8"),
    headers,
    createdAt: typeof p.timestamp === "number" ? new Date(p.timestamp * 1000) : now,
    availableAt: now,
    deliveries: 1 + retries
  }
}

/**
 * The body and properties a sent message is published with.
 *
 * @internal
 */
export const toPublication = (
  message: OutgoingMessage
): { readonly content: Buffer; readonly properties: Amqp.Options.Publish } => ({
  content: Buffer.from(message.body, "utf8"),
  properties: {
    messageId: message.messageId,
    type: message.type,
    contentType: "application/json",
    timestamp: Math.floor(Date.now() / 1000),
    appId: "effect-outbox",
    headers: {
      [headersHeader]: message.headers,
      ...(message.traceparent !== undefined ? { traceparent: message.traceparent } : {}),
      ...(message.tracestate !== undefined ? { tracestate: message.tracestate } : {})
    }
  }
})

/**
 * A copy of a received message with new outbox headers, for a retry or a move to the failure queue: the same
 * body and properties, the broker's dead-letter headers dropped.
 *
 * @internal
 */
export const copyOf = (
  message: Amqp.ConsumeMessage,
  headers: Headers.Headers
): { readonly content: Buffer; readonly properties: Amqp.Options.Publish } => {
  const p = message.properties
  const amqpHeaders: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(p.headers ?? {})) {
    if (!isBrokerHeader(key)) amqpHeaders[key] = value
  }
  amqpHeaders[headersHeader] = Headers.encode(headers)
  const properties: Amqp.Options.Publish = { headers: amqpHeaders }
  if (p.messageId !== undefined) properties.messageId = String(p.messageId)
  if (p.type !== undefined) properties.type = String(p.type)
  if (p.contentType !== undefined) properties.contentType = String(p.contentType)
  if (p.contentEncoding !== undefined) properties.contentEncoding = String(p.contentEncoding)
  if (p.correlationId !== undefined) properties.correlationId = String(p.correlationId)
  if (p.replyTo !== undefined) properties.replyTo = String(p.replyTo)
  if (typeof p.timestamp === "number") properties.timestamp = p.timestamp
  if (p.appId !== undefined) properties.appId = String(p.appId)
  if (typeof p.priority === "number") properties.priority = p.priority
  return { content: message.content, properties }
}

/** The broker URL with its password masked, for messages. @internal */
export const redactUrl = (url: string): string => {
  try {
    const parsed = new URL(url)
    if (parsed.password !== "") parsed.password = "***"
    return parsed.toString()
  } catch {
    return "<invalid url>"
  }
}

/**
 * One line for a broker or socket error, with its code when the text lacks it (a refused connection to a
 * name with two addresses is an `AggregateError` without a message, but with `code: "ECONNREFUSED"`).
 *
 * @internal
 */
export const errorText = (e: unknown): string => {
  const text = describeError(e)
  const code = typeof e === "object" && e !== null ? (e as { code?: unknown }).code : undefined
  return code !== undefined && !text.includes(String(code)) ? `${text} (${String(code)})` : text
}

/** `errorText`, with the hint an undeclared exchange or queue calls for. @internal */
export const brokerErrorText = (e: unknown): string => {
  const text = errorText(e)
  return /NOT_FOUND|404/.test(text) ? `${text} — run setup-transports` : text
}

/** A `TransportError` of this backend. @internal */
export { transportError }
