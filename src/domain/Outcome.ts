/**
 * The outcome rules: what becomes of a delivered message, given what happened to it, its headers and the
 * retry strategy's answer. Pure — the worker asks the strategy and records the outcome; everything in
 * between is here.
 *
 * | what happened | outcome |
 * |---|---|
 * | every handler succeeded | `Ack` |
 * | interrupted (shutdown) before an outcome | `Release` (given back, not counted as a delivery) |
 * | corrupt headers or body, unknown type, no handler | `Fail` |
 * | deliveries charged as crashes (a worker died while it ran alone, see `workerDied`) and the strategy gives up | `Fail` with `WorkerDiedError` |
 * | a `RecoverableMessageHandlingError` | `Retry` after its `retryDelay` (the shortest), else the strategy's delay, else the last delay |
 * | only `UnrecoverableMessageHandlingError`s | `Fail` |
 * | any other failure or defect | `Retry` after the strategy's delay, or `Fail` once it gives up |
 *
 * A `Retry` appends to the redelivery history; a `Fail` records the error and the original transport; both
 * remember the handlers that already succeeded (`handledBy`), so a retry skips them.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import { tagOf, wordsOf } from "../internal/describeError.js"
import * as Text from "../internal/text.js"
import {
  type MessageDecodeError,
  type NoHandlerForMessageError,
  RecoverableMessageHandlingError,
  UnrecoverableMessageHandlingError,
  WorkerDiedError
} from "./Errors.js"
import * as Headers from "./Headers.js"

/**
 * What became of one delivery.
 *
 * @since 0.1.0
 * @category models
 */
export type Outcome =
  | { readonly _tag: "Ack"; readonly type: string }
  | {
    readonly _tag: "Retry"
    readonly type: string
    readonly attempt: number
    readonly delay: Duration.Duration
    readonly headers: Headers.Headers
    readonly error: Headers.ErrorDetails
  }
  | {
    readonly _tag: "Fail"
    readonly type: string
    readonly headers: Headers.Headers
    readonly error: Headers.ErrorDetails
  }
  | { readonly _tag: "Release" }

/**
 * What happened to a delivery, as far as the rules care.
 *
 * @since 0.1.0
 * @category models
 */
export type Happened =
  /** Every handler succeeded. */
  | { readonly _tag: "Handled" }
  /** Interrupted before an outcome (shutdown). */
  | { readonly _tag: "Interrupted" }
  /** The message cannot be handled: corrupt, of an unknown type, or without a handler. */
  | { readonly _tag: "Rejected"; readonly error: MessageDecodeError | NoHandlerForMessageError }
  /** Earlier deliveries recorded no outcome, and the strategy gave up (see `workerDied`). */
  | { readonly _tag: "Died"; readonly error: WorkerDiedError }
  /** Some handlers failed; `handledBy` are the ones that succeeded, on this delivery or an earlier one. */
  | {
    readonly _tag: "HandlersFailed"
    readonly causes: ReadonlyArray<Cause.Cause<unknown>>
    readonly handledBy: ReadonlyArray<string>
  }

/**
 * The question for the retry strategy, when the outcome depends on its answer.
 *
 * @since 0.1.0
 * @category models
 */
export interface Question {
  readonly transport: string
  /** The number of the retry that would come next (1 for the first). */
  readonly attempt: number
  readonly error: unknown
}

/** @since 0.1.0 @category constructors */
export const handled: Happened = { _tag: "Handled" }

/** @since 0.1.0 @category constructors */
export const interrupted: Happened = { _tag: "Interrupted" }

/**
 * The outcome of giving a message back (`Release`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const release: Outcome = { _tag: "Release" }

/**
 * The longest cause text kept in the headers.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxCauseLength = 4000

/**
 * The longest error message kept in the headers (and in events and logs); a longer one is cut and says so.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxMessageLength: number = Text.maxMessageLength

/**
 * Describes a failure for the headers: tag, message and the cause with its stack, each bounded (`maxNameLength`
 * characters of tag, `maxMessageLength` of message, `maxCauseLength` of cause; a cut says so). The message and
 * the cause carry the error's own `cause` chain — a driver's error under a `SqlError` — so the database's words
 * are kept.
 *
 * @since 0.1.0
 * @category utils
 */
export const errorDetails = (cause: Cause.Cause<unknown>): Headers.ErrorDetails => {
  const failure = Cause.failureOption(cause)
  const value = Option.isSome(failure) ? failure.value : Option.getOrUndefined(Cause.dieOption(cause))
  const tag = typeof value === "object" && value !== null
    ? safely(() => tagOf(value) ?? "Error", "Error")
    : Option.isSome(failure)
    ? "Failure"
    : "Defect"
  const chain = causeChain(value)
  // Each error of the chain adds its words unless they are already said (a wrapper often repeats its cause's).
  const said = chain.map(messageOf).reduce(
    (said, text) => text.length === 0 || said.includes(text) ? said : said.length === 0 ? text : `${said}: ${text}`,
    value === undefined && Cause.isInterruptedOnly(cause) ? "The handler was interrupted" : messageOf(value)
  )
  // A reason is read as `tag: message`: an empty message would say nothing after the colon.
  const message = said.length > 0 ? said : "(the error has no message and no fields)"
  const pretty = [prettyOf(cause), ...chain.map((inner) => `Caused by: ${describe(inner)}`)].join("\n")
  return new Headers.ErrorDetails({
    tag: Text.cut(
      Option.isSome(failure) ? tag : Cause.isInterruptedOnly(cause) ? "Interrupted" : tag,
      Text.maxNameLength
    ),
    message: Text.cut(message, Text.maxMessageLength),
    cause: Text.cut(pretty, maxCauseLength)
  })
}

/** How deep an error's `cause` chain is followed. */
const maxCauseDepth = 5

/** The errors under `value` through their `cause` fields (a driver's error under a `SqlError`), nearest first. */
const causeChain = (value: unknown): Array<unknown> => {
  const chain: Array<unknown> = []
  let current = value
  while (chain.length < maxCauseDepth && typeof current === "object" && current !== null) {
    const holder: object = current
    const next = safely(() => "cause" in holder ? (holder as { cause: unknown }).cause : undefined, undefined)
    if (next === undefined || next === null || next === current || chain.includes(next)) break
    chain.push(next)
    current = next
  }
  return chain
}

/** `Cause.pretty`, unless the failure cannot be rendered (a throwing `toString`, a value nested too deep). */
const prettyOf = (cause: Cause.Cause<unknown>): string => {
  try {
    return Cause.pretty(cause)
  } catch {
    return "(the cause cannot be rendered)"
  }
}

/** What `read` gives, or `fallback` when it throws: a failure's value may be hostile (getters, proxies, no prototype). */
const safely = <A>(read: () => A, fallback: A): A => {
  try {
    return read()
  } catch {
    return fallback
  }
}

/**
 * The words of a failure: its message, else its fields as JSON (a `Data.TaggedError` with fields only, a plain
 * `{ _tag, code }` object, an `Effect.die({ … })`), bounded, never `[object Object]` (see `wordsOf`).
 */
const messageOf = (value: unknown): string => safely(() => wordsOf(value), "(an error that cannot be shown)")

const describe = (value: unknown): string => {
  const stack = safely(() => value instanceof Error ? value.stack : undefined, undefined)
  return typeof stack === "string" && stack.length > 0 ? stack : messageOf(value)
}

/**
 * The deliveries that recorded no outcome and count against the message: its `crashes` where the transport charges
 * them (a delivery whose handler ran alone and whose worker died or lost the lease — never one that only claimed
 * it), else the deliveries beyond `1 + retries`. Returns the error to ask the strategy about, with the attempt it
 * stands for, or `None` when none counts.
 *
 * @since 0.1.0
 * @category rules
 */
export const workerDied = (
  transport: string,
  delivery: { readonly deliveries: number; readonly crashes?: number | undefined },
  headers: Headers.Headers
): Option.Option<Question & { readonly error: WorkerDiedError }> => {
  const retries = Headers.retryCount(headers)
  const { deliveries } = delivery
  const crashes = delivery.crashes ?? deliveries - 1 - retries
  if (!(crashes > 0)) return Option.none()
  return Option.some({
    transport,
    attempt: Math.min(retries + crashes, Number.MAX_SAFE_INTEGER),
    error: new WorkerDiedError({
      message: delivery.crashes === undefined
        ? `A worker died or lost its lease while handling this message (${crashes} of ${deliveries} ` +
          `deliveries recorded no outcome)`
        : `A worker died or lost its lease while handling this message alone (${crashes} of ${deliveries} ` +
          `deliveries recorded no outcome)`,
      deliveries
    })
  })
}

/** The number of the next retry; it stops at the largest safe integer (a count stored by hand can be that). */
const nextAttempt = (headers: Headers.Headers): number =>
  Math.min(Headers.retryCount(headers) + 1, Number.MAX_SAFE_INTEGER)

/** `instanceof` that answers `false` for a value whose prototype cannot be read (a hostile proxy). */
const isA = <A>(value: unknown, cls: abstract new(...args: Array<any>) => A): value is A =>
  safely(() => value instanceof cls, false)

const failures = (causes: ReadonlyArray<Cause.Cause<unknown>>) =>
  causes.map((cause) => Option.getOrUndefined(Cause.failureOption(cause)))

/**
 * The question for the strategy, or `None` when the rules decide alone (success, interruption, rejection, a
 * worker's death already judged, only unrecoverable errors, or a recoverable error with its own delay).
 *
 * @since 0.1.0
 * @category rules
 */
export const question = (happened: Happened, transport: string, headers: Headers.Headers): Option.Option<Question> => {
  if (happened._tag !== "HandlersFailed") return Option.none()
  const errors = failures(happened.causes)
  const attempt = nextAttempt(headers)
  const recoverable = errors.filter((e): e is RecoverableMessageHandlingError =>
    isA(e, RecoverableMessageHandlingError)
  )
  if (recoverable.length > 0) {
    return recoverable.some((e) => e.retryDelay !== undefined)
      ? Option.none()
      : Option.some({ transport, attempt, error: recoverable[0] })
  }
  if (errors.every((e) => isA(e, UnrecoverableMessageHandlingError))) return Option.none()
  return Option.some({ transport, attempt, error: errors[0] })
}

/**
 * The outcome of a delivery: what happened, the transport it came from, its headers as claimed, and the
 * strategy's answer to `question` (`None` — give up — when there was no question).
 *
 * @since 0.1.0
 * @category rules
 */
export const decide = (
  happened: Happened,
  transport: string,
  headers: Headers.Headers,
  answer: Option.Option<Duration.Duration>
): Outcome => {
  switch (happened._tag) {
    case "Handled":
      return { _tag: "Ack", type: typeName(headers) }
    case "Interrupted":
      return release
    case "Rejected":
    case "Died":
      return fail(headers, transport, errorDetails(Cause.fail(happened.error)))
    case "HandlersFailed": {
      const errors = failures(happened.causes)
      const recoverable = errors.filter((e): e is RecoverableMessageHandlingError =>
        isA(e, RecoverableMessageHandlingError)
      )
      const error = errorDetails(recoverable.length > 0 ? Cause.fail(recoverable[0]) : happened.causes[0]!)
      const base = happened.handledBy.length > 0 ? Headers.patch(headers, { handledBy: happened.handledBy }) : headers
      if (recoverable.length > 0) {
        const explicit = recoverable.flatMap((e) => (e.retryDelay === undefined ? [] : [e.retryDelay]))
        const delay = explicit.length > 0
          ? explicit.reduce((a, b) => Duration.min(a, b))
          : Option.getOrElse(answer, () => lastDelay(headers))
        return retry(base, error, delay)
      }
      if (errors.every((e) => isA(e, UnrecoverableMessageHandlingError))) return fail(base, transport, error)
      return Option.match(answer, {
        onNone: () => fail(base, transport, error),
        onSome: (delay) => retry(base, error, delay)
      })
    }
  }
}

/** The type as events and logs name it: bounded (the headers keep the row's own). */
const typeName = (headers: Headers.Headers): string => Text.cut(headers.type, Text.maxNameLength)

const fail = (headers: Headers.Headers, transport: string, error: Headers.ErrorDetails): Outcome => ({
  _tag: "Fail",
  type: typeName(headers),
  error,
  headers: Headers.patch(headers, { errorDetails: error, originalTransport: headers.originalTransport ?? transport })
})

/**
 * The longest retry delay written: the row's `available_at` must stay a time PostgreSQL and JavaScript can hold,
 * whatever a hostile history (`lastDelay`) or an infinite `retryDelay` asks for.
 */
const maxRetryDelayMs = Duration.toMillis(Duration.days(3650))

const storable = (delay: Duration.Duration): Duration.Duration => {
  const ms = Duration.toMillis(delay)
  return ms >= 0 && ms <= maxRetryDelayMs ? delay : Duration.millis(ms > 0 ? maxRetryDelayMs : 0)
}

const retry = (headers: Headers.Headers, error: Headers.ErrorDetails, wanted: Duration.Duration): Outcome => {
  const delay = storable(wanted)
  const attempt = nextAttempt(headers)
  return {
    _tag: "Retry",
    type: typeName(headers),
    attempt,
    delay,
    error,
    headers: Headers.withRedelivery(
      headers,
      new Headers.Redelivery({
        retryCount: attempt,
        delayMs: Duration.toMillis(delay),
        errorTag: error.tag,
        errorMessage: error.message
      })
    )
  }
}

/** A recoverable error the strategy would not retry: the last delay again (1 second when there was none). */
const lastDelay = (headers: Headers.Headers): Duration.Duration => {
  const history = headers.redeliveries ?? []
  return history.length === 0 ? Duration.seconds(1) : Duration.millis(history[history.length - 1]!.delayMs)
}
