/**
 * The `process` span of one message, when a tracer is installed: a child of the span that sent the message (its
 * stamp), holding the handlers' own spans, ended with the message's outcome — an `ack`, `retry`, `fail` or
 * `release` event, and an error status when the message is retried or moved to the failure queue.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type * as Tracer from "effect/Tracer"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import type * as Headers from "../../domain/Headers.js"
import type * as Outcome from "../../domain/Outcome.js"
import * as TraceContext from "../../internal/traceContext.js"

/**
 * Runs `handling` in the message's `process {transport}` span. The worker runs with tracing disabled (so its
 * claims, acks and lease renewals, and its empty polls above all, make no spans): it is enabled again here, for
 * the handlers.
 *
 * @internal
 */
export const process = (
  row: ReceivedMessage,
  headers: Headers.Headers,
  clock: Clock.Clock,
  handling: Effect.Effect<Outcome.Outcome>
): Effect.Effect<Outcome.Outcome> => {
  const parent = TraceContext.parentOf(headers.traceparent, headers.tracestate)
  const attributes: Record<string, unknown> = {
    "messaging.system": TraceContext.messagingSystem,
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
    "messaging.destination.name": row.transport,
    "messaging.message.id": row.messageId,
    "effect_outbox.message.type": headers.type,
    "effect_outbox.message.deliveries": row.deliveries
  }
  return Effect.withTracerEnabled(
    Effect.flatMap(
      Effect.makeSpan(`process ${row.transport}`, {
        kind: "consumer",
        captureStackTrace: false,
        attributes,
        // A message without a stamp starts its own trace: never a child of whatever span runs the worker.
        ...(Option.isSome(parent) ? { parent: parent.value } : { root: true })
      }),
      (span) =>
        Effect.onExit(
          Effect.withParentSpan(handling, span),
          (exit) => Effect.sync(() => end(span, exit, clock.unsafeCurrentTimeNanos()))
        )
    ),
    true
  )
}

/** Ends the span with the outcome: its event, and an error status when the message did not succeed. */
const end = (span: Tracer.Span, exit: Exit.Exit<Outcome.Outcome>, now: bigint): void => {
  if (Exit.isFailure(exit)) {
    // Interrupted (a shutdown, or the watchdog at a handler's timeout): the batch records what becomes of it.
    span.end(now, exit)
    return
  }
  const outcome = exit.value
  switch (outcome._tag) {
    case "Ack":
      span.event("ack", now)
      span.end(now, Exit.void)
      return
    case "Release":
      span.event("release", now)
      span.end(now, Exit.void)
      return
    case "Retry":
      span.event("retry", now, {
        "effect_outbox.retry.attempt": outcome.attempt,
        "effect_outbox.retry.delay_ms": Duration.toMillis(outcome.delay),
        "error.type": outcome.error.tag
      })
      span.end(now, Exit.fail(errorOf(outcome.error)))
      return
    case "Fail":
      span.event("fail", now, { "error.type": outcome.error.tag })
      span.end(now, Exit.fail(errorOf(outcome.error)))
  }
}

/** The recorded error as the tracer reports it: named by its tag, with its (bounded) message. */
const errorOf = (details: Headers.ErrorDetails): Error => {
  const error = new Error(details.message)
  error.name = details.tag
  error.stack = details.cause ?? `${details.tag}: ${details.message}`
  return error
}
