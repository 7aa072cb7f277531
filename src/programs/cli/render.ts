/**
 * How failed messages are shown: the details of one, as text or JSON.
 *
 * @internal
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { StoredMessage } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"
import { maxCauseLength } from "../../domain/Outcome.js"
import { cut, maxJsonDepth, maxMessageLength, maxNameLength, nestedDeeperThan } from "../../internal/text.js"
import { formatAge, formatTime, headline, oneLine, renderTable, truncate } from "./format.js"

/** What `failed:show` shows of one failed message. @internal */
export interface FailedDetails {
  readonly id: string
  readonly type: string
  readonly messageId: string
  readonly failedAt: string
  readonly error: string
  readonly errorTag: string
  readonly errorMessage: string
  readonly originalTransport: string | null
  /** Its ordering key, if it has one, and whether the key's later messages wait for it. */
  readonly orderingKey: string | null
  readonly blocksKey: boolean
  readonly retries: ReadonlyArray<{
    readonly retry: number
    readonly delayMs: number
    readonly error: string
    readonly errorTag: string
    readonly errorMessage: string
  }>
  readonly cause?: string | null
  readonly body?: unknown
  readonly bodyDecodable?: boolean
}

/** The details of a failed message, its cause and body with `verbose`; every text bounded. @internal */
export const describeFailed = (m: StoredMessage, verbose: boolean): FailedDetails => {
  const decoded = Headers.decode(m.headers)
  const headers = Either.getOrUndefined(decoded)
  const details = headers?.errorDetails
  // Reasons written by older versions (or by hand) may be of any length: what is shown is bounded.
  const errorTag = cut(details?.tag ?? (headers === undefined ? "MessageDecodeError" : "(unknown)"), maxNameLength)
  const recorded = details?.message ??
    (headers === undefined ? "The headers could not be decoded." : "No reason was recorded for this message.")
  // Reasons stored by older versions can be empty: `Tag: ` would say nothing.
  const errorMessage = cut(recorded.length === 0 ? "(no message)" : recorded, maxMessageLength)
  const base: FailedDetails = {
    id: m.id,
    type: headers?.type ?? "(undecodable)",
    messageId: m.messageId,
    failedAt: formatTime(m.availableAt),
    error: `${errorTag}: ${errorMessage}`,
    errorTag,
    errorMessage,
    originalTransport: headers?.originalTransport ?? null,
    orderingKey: m.orderingKey ?? null,
    blocksKey: m.blocksKey === true,
    retries: (headers?.redeliveries ?? []).map((r) => {
      const errorTag = cut(r.errorTag, maxNameLength)
      const errorMessage = cut(r.errorMessage, maxMessageLength)
      return { retry: r.retryCount, delayMs: r.delayMs, error: `${errorTag}: ${errorMessage}`, errorTag, errorMessage }
    })
  }
  if (!verbose) return base
  // A body nested too deep to print as JSON is shown raw.
  let body: unknown = m.body
  let bodyDecodable = !nestedDeeperThan(m.body, maxJsonDepth)
  if (bodyDecodable) {
    try {
      body = JSON.parse(m.body)
    } catch {
      bodyDecodable = false
    }
  }
  return {
    ...base,
    cause: details?.cause === undefined ? null : cut(details.cause, 2 * maxCauseLength),
    body,
    bodyDecodable
  }
}

/**
 * The reason of a failed message as the list shows it: its tag and the most useful line of its message, bounded.
 *
 * @internal
 */
export const reasonCell = (d: FailedDetails): string => `${truncate(d.errorTag, 60)}: ${headline(d.errorMessage, 100)}`

/** Prints the details of one failed message. @internal */
export const printFailed = (d: FailedDetails) =>
  Effect.gen(function*() {
    yield* Console.log("Failed Message Details")
    yield* Console.log(renderTable(["Field", "Value"], [
      ["Id", d.id],
      ["Class", truncate(d.type, 200)],
      ["Message Id", d.messageId],
      ["Failed at", d.failedAt],
      ["Error", headline(d.errorMessage, 200)],
      ["Error Class", truncate(d.errorTag, 200)],
      ["Transport", d.originalTransport ?? "(unknown)"],
      ...(d.orderingKey === null ? [] : [[
        "Ordering key",
        `${truncate(d.orderingKey, 200)} (${
          d.blocksKey ? "blocked: its later messages wait for this one" : "not blocked: its later messages went on"
        })`
      ]])
    ]))
    yield* Console.log("Message history:")
    if (d.retries.length === 0) yield* Console.log("  (no retries)")
    for (const r of d.retries) {
      yield* Console.log(
        `  * retry #${r.retry} after ${formatAge(r.delayMs)}: ${truncate(r.errorTag, 60)}: ${
          headline(r.errorMessage, 200)
        }`
      )
    }
    // The whole reason when its line above says only part of it (a Schema tree, a message of several lines).
    if (headline(d.errorMessage, 200) !== oneLine(d.errorMessage)) {
      yield* Console.log("Error message:")
      yield* Console.log(d.errorMessage)
    }
    if (d.body === undefined) {
      yield* Console.log(`Re-run with -v to see the cause and the message body.`)
    } else {
      yield* Console.log("Cause:")
      yield* Console.log(d.cause ?? "(no data)")
      yield* Console.log(d.bodyDecodable ? "Message:" : "Message (undecodable, raw body):")
      yield* Console.log(d.bodyDecodable ? JSON.stringify(d.body, null, 2) : String(d.body))
    }
    yield* Console.log(`Run "failed:retry ${d.id}" to retry this message, "failed:remove ${d.id}" to delete it.`)
  })
