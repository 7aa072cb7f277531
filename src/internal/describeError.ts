/**
 * The words of an error, for one readable line: its message, or — when it has none (a `Data.TaggedError` with
 * fields only, a plain `{ _tag, code }` object) — its fields as JSON, never `[object Object]` or an empty text.
 *
 * @internal
 */
import { fieldsJson, maxMessageLength, valueJson } from "./text.js"

/**
 * What an error says about itself: its `message` when it has one, else its fields as JSON (bounded), else its own
 * `toString` when it overrides the default one; `""` when it says nothing (`new Error()`). Primitives are their
 * `String`. Reads that throw are not caught here: callers facing hostile values guard the call.
 *
 * @internal
 */
export const wordsOf = (value: unknown): string => {
  if (typeof value !== "object" || value === null) return String(value)
  const message = "message" in value ? (value as { readonly message: unknown }).message : undefined
  if (typeof message === "string" && message.length > 0 && !emptyFields.test(message)) return message
  if (typeof message === "object" && message !== null) {
    const json = valueJson(message, maxMessageLength)
    if (json !== undefined) return json
  } else if (message !== undefined && typeof message !== "string") {
    return String(message)
  }
  const fields = fieldsJson(value, maxMessageLength)
  if (fields !== undefined) return fields
  if (value instanceof Error) return ""
  const text = String(value)
  return /^\[object [^\]]*\]$/.test(text) ? "" : text
}

/** The message `Schema.TaggedError` builds for an error without fields: `{  }`, which says nothing. */
const emptyFields = /^\{\s*\}$/

/**
 * The tag of an error: its `_tag`, else its `name` (`TypeError`), else `undefined`.
 *
 * @internal
 */
export const tagOf = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null) return undefined
  const tag = (value as { readonly _tag?: unknown })._tag ?? (value as { readonly name?: unknown }).name
  return typeof tag === "string" && tag.length > 0 ? tag : undefined
}

/**
 * One readable line for an error and its driver cause: `"Failed to execute statement: relation … does not exist"`.
 * An error that says nothing but its fields reads as its tag and the fields: `PaymentDeclined: {"code":"card_expired"}`;
 * one that says nothing at all, as its tag. Never throws.
 *
 * @internal
 */
export const describeError = (error: unknown): string => {
  try {
    const cause = typeof error === "object" && error !== null
      ? (error as { readonly cause?: unknown }).cause
      : undefined
    const own = wordsOf(error)
    const inner = typeof cause === "object" && cause !== null ? wordsOf(cause) : ""
    // A wrapper whose message already holds its cause's words (`TransportError` of a `SqlError`) says them once.
    const parts = [own, own.includes(inner) ? "" : inner].filter((s) => s.length > 0)
    const tag = tagOf(error)
    const hasMessage = typeof error === "object" && error !== null &&
      typeof (error as { readonly message?: unknown }).message === "string" &&
      (error as { readonly message: string }).message.length > 0 &&
      !emptyFields.test((error as { readonly message: string }).message)
    if (parts.length === 0) return tag ?? "(an error without a message)"
    const line = parts.join(": ")
    return tag !== undefined && !hasMessage && typeof error === "object" ? `${tag}: ${line}` : line
  } catch {
    return "(an error that cannot be shown)"
  }
}
