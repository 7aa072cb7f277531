/**
 * The headers stored beside each body: the message type and its stamps.
 *
 * @since 0.1.0
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { cut, guardStack, maxJsonDepth, maxMessageLength, maxNameLength, nestedDeeperThan } from "../internal/text.js"
import { MessageDecodeError } from "./Errors.js"

/**
 * One entry of the redelivery history: the retry number, the delay chosen, and the error
 * that caused it.
 *
 * @since 0.1.0
 * @category models
 */
export class Redelivery extends Schema.Class<Redelivery>("effect-outbox/Redelivery")({
  retryCount: Schema.Int,
  delayMs: Schema.Finite,
  errorTag: Schema.String,
  errorMessage: Schema.String
}) {}

/**
 * What went wrong the last time, recorded when a message moves to the failure queue.
 *
 * @since 0.1.0
 * @category models
 */
export class ErrorDetails extends Schema.Class<ErrorDetails>("effect-outbox/ErrorDetails")({
  tag: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.String)
}) {}

/**
 * Stored headers. `type` is the message tag; the rest are stamps:
 *
 * - `transportNames` — explicit transports chosen at dispatch (overrides routing);
 * - `delayMs` — the delay asked for at dispatch;
 * - `redeliveries` — retry history (first entry and the last nine kept);
 * - `handledBy` — handlers that already succeeded, skipped on retry;
 * - `errorDetails`, `originalTransport` — set on the move to the failure queue;
 * - `rawHeaders` — the original text when stored headers were corrupt;
 * - `custom` — application headers;
 * - `traceparent`, `tracestate` — the W3C trace context of the span that sent it (written only when a tracer is
 *   installed; see the README's "Observability").
 *
 * @since 0.1.0
 * @category models
 */
export class Headers extends Schema.Class<Headers>("effect-outbox/Headers")({
  type: Schema.String,
  traceparent: Schema.optional(Schema.String),
  tracestate: Schema.optional(Schema.String),
  transportNames: Schema.optional(Schema.Array(Schema.String)),
  delayMs: Schema.optional(Schema.Finite),
  redeliveries: Schema.optional(Schema.Array(Redelivery)),
  handledBy: Schema.optional(Schema.Array(Schema.String)),
  errorDetails: Schema.optional(ErrorDetails),
  originalTransport: Schema.optional(Schema.String),
  rawHeaders: Schema.optional(Schema.String),
  custom: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String }))
}) {}

/**
 * How many redelivery entries are kept (the first one and the most recent ones), so the
 * headers cannot grow without bound under endless recoverable retries.
 *
 * @since 0.1.0
 * @category constants
 */
export const redeliveryHistorySize = 10

const HeadersJson = Schema.parseJson(Headers)
const encodeJson = Schema.encodeSync(HeadersJson)
const decodeJson = Schema.decodeUnknownEither(HeadersJson)

/**
 * Serializes headers to the JSON text stored in the `headers` column.
 *
 * @since 0.1.0
 * @category codec
 */
export const encode = (headers: Headers): string => encodeJson(headers)

/**
 * Parses the stored `headers` column.
 *
 * @since 0.1.0
 * @category codec
 */
export const decode = (raw: string): Either.Either<Headers, MessageDecodeError> => {
  const cached = decodedCache.get(raw)
  if (cached !== undefined) return cached
  // A traced first delivery, `{"type":"…","traceparent":"…"}`: unique per message, so never cached.
  const traced = raw.length < 256 ? tracedPattern.exec(raw) : null
  if (traced !== null && !hasControlCharacter(traced[1]!)) {
    return Either.right(new Headers({ type: traced[1]!, traceparent: traced[2]! }, true))
  }
  const decoded = decodeUncached(raw)
  if (raw.length > maxCachedLength) return decoded
  if (decodedCache.size >= 1024) decodedCache.clear()
  decodedCache.set(raw, decoded)
  return decoded
}

/** Headers repeat (most messages carry only their type): decoded ones are kept, by their text, when short. */
const maxCachedLength = 4096

const tracedPattern = /^\{"type":"([^"\\]*)","traceparent":"([0-9a-f-]{55})"\}$/

const decodedCache = new Map<string, Either.Either<Headers, MessageDecodeError>>()

const decodeUncached = (raw: string): Either.Either<Headers, MessageDecodeError> => {
  // Fast path for the common first delivery, `{"type":"…"}`: nothing else to validate.
  if (raw.length < 256 && raw.startsWith(`{"type":"`) && raw.endsWith(`"}`) && raw.indexOf(`"`, 9) === raw.length - 2) {
    const type = raw.slice(9, raw.length - 2)
    if (!type.includes("\\") && !hasControlCharacter(type)) return Either.right(new Headers({ type }, true))
  }
  const corrupt = (message: string, type: string | undefined) =>
    Either.left(
      new MessageDecodeError({
        reason: "CorruptHeaders",
        ...(type === undefined ? {} : { type: cut(type, maxNameLength) }),
        message: cut(`Headers cannot be decoded: ${message}`, maxMessageLength)
      })
    )
  if (nestedDeeperThan(raw, maxJsonDepth)) {
    return corrupt(`they nest arrays or objects deeper than ${maxJsonDepth} levels`, guessType(raw))
  }
  return guardStack(
    () =>
      decodeJson(raw).pipe(
        Either.orElse((error) => corrupt(ParseResult.TreeFormatter.formatErrorSync(error), guessType(raw))),
        Either.flatMap((headers) =>
          // A record's `__proto__` key would be lost in the decoded object (and on the next write): say so instead.
          raw.includes(`"__proto__"`) && hasProtoKey(raw)
            ? corrupt(`a custom header is named "__proto__", which cannot be kept`, headers.type)
            : Either.right(headers)
        )
      ),
    () => corrupt("they are too large or too deeply nested to be checked", guessType(raw))
  )
}

/** Whether the `custom` record of the headers has an own `__proto__` key (JSON.parse keeps it as one). */
const hasProtoKey = (raw: string): boolean => {
  const custom = (JSON.parse(raw) as { custom?: unknown }).custom
  return typeof custom === "object" && custom !== null && Object.prototype.hasOwnProperty.call(custom, "__proto__")
}

/** A raw control character is not allowed in a JSON string: such text takes the full decode (and fails it). */
const hasControlCharacter = (text: string): boolean => {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) < 0x20) return true
  return false
}

/** The `type` field of headers that fail their schema, when the text is still a JSON object with one. */
const guessType = (raw: string): string | undefined => {
  try {
    const parsed: unknown = JSON.parse(raw)
    return typeof parsed === "object" && parsed !== null && typeof (parsed as { type?: unknown }).type === "string"
      ? (parsed as { type: string }).type
      : undefined
  } catch {
    return undefined
  }
}

/**
 * The message type named by stored headers, or `undefined` when they cannot be decoded.
 *
 * @since 0.1.0
 * @category getters
 */
export const typeOf = (raw: string): string | undefined => {
  const decoded = decode(raw)
  return Either.isRight(decoded) ? decoded.right.type : undefined
}

/**
 * The number of retries already made (the last redelivery's count, 0 when none).
 *
 * @since 0.1.0
 * @category getters
 */
export const retryCount = (headers: Headers): number => {
  const history = headers.redeliveries ?? []
  return history.length === 0 ? 0 : history[history.length - 1]!.retryCount
}

/**
 * Appends a redelivery to the history, keeping its size bounded.
 *
 * @since 0.1.0
 * @category combinators
 */
export const withRedelivery = (headers: Headers, redelivery: Redelivery): Headers => {
  const history = [...(headers.redeliveries ?? []), redelivery]
  const bounded = history.length <= redeliveryHistorySize
    ? history
    : [history[0]!, ...history.slice(history.length - (redeliveryHistorySize - 1))]
  return new Headers({ ...headers, redeliveries: bounded })
}

/**
 * Returns a copy of the headers with some fields replaced.
 *
 * @since 0.1.0
 * @category combinators
 */
export const patch = (headers: Headers, patch: Partial<Headers>): Headers => new Headers({ ...headers, ...patch })
