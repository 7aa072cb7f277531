/**
 * Record mapping of the Kafka transport: outgoing messages to records (key, headers, partition), records to
 * `ReceivedMessage`s, and broker errors to typed ones.
 *
 * @internal
 */
import type { Message, MessageToProduce } from "@platformatic/kafka"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { createHash } from "node:crypto"
import type { OutgoingMessage, ReceivedMessage } from "../../domain/Envelope.js"
import { StorageNotReadyError, type TransportError } from "../../domain/Errors.js"
import * as Headers from "../../domain/Headers.js"
import * as MessageId from "../../domain/MessageId.js"
import { describeError } from "../../internal/describeError.js"
import { transportError } from "../../internal/transports.js"

/** The record header carrying the message id: the name Debezium's Outbox Event Router uses. @internal */
export const idHeader = "id"
/** The record header carrying the message type. @internal */
export const typeHeader = "type"
/** The record header carrying the stored headers JSON (type and stamps: retries, handlers that ran…). @internal */
export const headersHeader = "x-outbox-headers"
/** The record header carrying the time (ms since the epoch) before which the message must not be handled. @internal */
export const availableAtHeader = "x-outbox-available-at"

/** What the browsing operations fail with, after their name. @internal */
export const unsupportedMessage = "not supported by the Kafka transport: a topic cannot be browsed or have a record " +
  "taken out by id; keep failures in a PostgreSQL failure transport (TransportRouter)"

/** A produced record: Buffers throughout, headers as a plain record (the client's serializers are the identity). */
export type Record = MessageToProduce<Buffer, Buffer, Buffer, Buffer>

/** A consumed record as the client hands it over. @internal */
export type Consumed = Message<Buffer, Buffer, Buffer, Buffer>

const isMessageId = Schema.is(MessageId.MessageId)

/**
 * The record of a message: key = its ordering key (so its partition is the one Java clients pick for the key),
 * value = its body, headers `id`, `type`, the trace context, its custom headers (each under its own name, for
 * consumers that are not this library) and the stored headers JSON (so a retried or failed copy keeps its history).
 *
 * @internal
 */
export const toRecord = (topic: string, message: OutgoingMessage, now: number): Record => {
  const headers = new Map<Buffer, Buffer>()
  const put = (name: string, value: string) => headers.set(Buffer.from(name), Buffer.from(value, "utf8"))
  const decoded = Headers.decode(message.headers)
  const custom = Either.isRight(decoded) ? decoded.right.custom : undefined
  if (custom !== undefined) {
    for (const [name, value] of Object.entries(custom)) {
      if (!reserved.has(name)) put(name, value)
    }
  }
  put(idHeader, message.messageId)
  put(typeHeader, message.type)
  if (message.traceparent !== undefined) put("traceparent", message.traceparent)
  if (message.tracestate !== undefined) put("tracestate", message.tracestate)
  put(headersHeader, message.headers)
  if (message.delayMs > 0) put(availableAtHeader, String(now + message.delayMs))
  return {
    topic,
    value: Buffer.from(message.body, "utf8"),
    ...(message.orderingKey !== undefined ? { key: Buffer.from(message.orderingKey, "utf8") } : {}),
    headers
  }
}

const reserved = new Set([idHeader, typeHeader, headersHeader, availableAtHeader, "traceparent", "tracestate"])

/** A consumed record's headers by name (the last value of a repeated name wins). */
const headersOf = (record: Consumed): Map<string, string> => {
  const byName = new Map<string, string>()
  for (const [name, value] of record.headers) {
    byName.set(
      Buffer.isBuffer(name) ? name.toString("utf8") : String(name),
      Buffer.isBuffer(value) ? value.toString("utf8") : String(value)
    )
  }
  return byName
}

/**
 * The message id of a record: its `id` header when that is a UUID; else one derived from the record's place
 * (topic, partition, offset), the same at every redelivery, so a consumer still dedupes records of other producers.
 *
 * @internal
 */
export const messageIdOf = (id: string | undefined, topic: string, partition: number, offset: bigint): string => {
  if (id !== undefined && isMessageId(id)) return id
  const hash = createHash("sha1").update(`kafka:${topic}:${partition}:${offset}`).digest()
  hash[6] = (hash[6]! & 0x0f) | 0x50 // version 5: name-based
  hash[8] = (hash[8]! & 0x3f) | 0x80
  const hex = hash.subarray(0, 16).toString("hex")
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

/**
 * A record as the worker sees it. The stored headers come from `x-outbox-headers`; a record of another producer
 * (Debezium's Outbox Event Router, a Java service) gets headers built from its `type` header and its other headers
 * (as custom headers). Deliveries are 1 + the retries in its headers.
 *
 * @internal
 */
export const toReceived = (transport: string, id: string, record: Consumed): ReceivedMessage => {
  const byName = headersOf(record)
  const stored = byName.get(headersHeader)
  let headers: string
  if (stored !== undefined && Either.isRight(Headers.decode(stored))) {
    headers = stored
  } else {
    const custom: { [name: string]: string } = {}
    for (const [name, value] of byName) if (!reserved.has(name)) custom[name] = value
    const type = byName.get(typeHeader)
    const traceparent = byName.get("traceparent")
    const tracestate = byName.get("tracestate")
    headers = Headers.encode(
      new Headers.Headers({
        type: type !== undefined && type.length > 0 ? type : "<unknown>",
        ...(traceparent !== undefined ? { traceparent } : {}),
        ...(tracestate !== undefined ? { tracestate } : {}),
        ...(Object.keys(custom).length > 0 ? { custom } : {})
      })
    )
  }
  const decoded = Headers.decode(headers)
  const retries = Either.isRight(decoded) ? Headers.retryCount(decoded.right) : 0
  const createdAt = new Date(Number(record.timestamp))
  const availableAt = Number(byName.get(availableAtHeader))
  const key = Buffer.isBuffer(record.key) && record.key.length > 0 ? record.key.toString("utf8") : undefined
  return {
    id,
    transport,
    messageId: messageIdOf(byName.get(idHeader), record.topic, record.partition, record.offset),
    body: Buffer.isBuffer(record.value) ? record.value.toString("utf8") : "",
    headers,
    createdAt: Number.isFinite(createdAt.getTime()) ? createdAt : new Date(),
    availableAt: Number.isSafeInteger(availableAt) ? new Date(availableAt) : createdAt,
    deliveries: 1 + retries,
    ...(key !== undefined ? { orderingKey: key } : {})
  }
}

/**
 * A copy of a consumed record with new stored headers, for the failure topic: same key, value and headers (its
 * `id` among them), the stored headers replaced.
 *
 * @internal
 */
export const copyOf = (topic: string, record: Consumed, headers: Headers.Headers): Record => {
  const copied = new Map<Buffer, Buffer>()
  for (const [name, value] of record.headers) {
    const text = Buffer.isBuffer(name) ? name.toString("utf8") : String(name)
    if (text !== headersHeader && text !== availableAtHeader) copied.set(Buffer.from(text), value)
  }
  copied.set(Buffer.from(headersHeader), Buffer.from(Headers.encode(headers), "utf8"))
  return {
    topic,
    value: record.value,
    ...(Buffer.isBuffer(record.key) && record.key.length > 0 ? { key: record.key } : {}),
    headers: copied
  }
}

/** Every message an error and its causes carry (`MultipleErrors` nests the broker's per-request errors). */
const messagesOf = (error: unknown, depth = 0): Array<string> => {
  if (typeof error !== "object" || error === null || depth > 4) return []
  const own = [describeError(error)]
  const nested = (error as { readonly errors?: unknown }).errors
  const cause = (error as { readonly cause?: unknown }).cause
  return [
    ...own,
    ...(Array.isArray(nested) ? nested.flatMap((e) => messagesOf(e, depth + 1)) : []),
    ...messagesOf(cause, depth + 1)
  ]
}

/** The text of a client error, with its nested causes, bounded. @internal */
export const errorText = (error: unknown): string => {
  const texts = Array.from(new Set(messagesOf(error).filter((text) => text.length > 0)))
  const text = texts.length > 0 ? texts.join(": ") : describeError(error)
  return text.length > 500 ? `${text.slice(0, 497)}...` : text
}

/** Whether a client error says a topic does not exist. @internal */
export const isUnknownTopic = (error: unknown): boolean =>
  /UNKNOWN_TOPIC_OR_PARTITION|does not host this topic-partition|unknown topic/i.test(errorText(error))

/**
 * The typed error of a failed operation: a missing topic is storage that is not set up (the worker stops and gives
 * its messages back); anything else is a `TransportError`.
 *
 * @internal
 */
export const failure = (
  transport: string,
  operation: string,
  topics: ReadonlyArray<string>,
  error: unknown
): TransportError | StorageNotReadyError =>
  isUnknownTopic(error)
    ? new StorageNotReadyError({
      storage: topics.join(", "),
      message: `Kafka topic ${topics.join(", ")} of transport ${transport} does not exist: run setup-transports ` +
        `(${errorText(error)})`
    })
    : transportError(transport, operation, errorText(error), error)

/** A `TransportError` of this backend. @internal */
export { transportError }
