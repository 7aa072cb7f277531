/**
 * The `process` span of one message, when a tracer is installed: a child of the span that sent the message (its
 * stamp), holding the handlers' own spans, ended with the message's outcome — an `ack`, `retry`, `fail` or
 * `release` event, and an error status when the message is retried or moved to the failure queue.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Context from "effect/Context"
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
 * How a worker traces: the application's tracer and the worker's clock. The worker runs with Effect's native
 * tracer, which exports nothing (its claims, acks, lease renewals and empty polls make no span anyone sees); only
 * its handlers run with the application's tracer, in their message's span.
 *
 * A traced message costs a span and one scope change, an unsampled one nothing: the application's tracer may do
 * work on every step of a fiber (`@effect/opentelemetry`'s bridges each step that has a span to the OpenTelemetry
 * context), so as few steps as possible run with it (see BENCHMARKS.md, tracing).
 *
 * @internal
 */
export interface Tracing {
  readonly tracer: Tracer.Tracer
  readonly clock: Clock.Clock
}

/**
 * One message's started `process` span — none for a message whose sender was not sampled — and `run`, which runs a
 * handler in it. Unsampled, the handler runs with the worker's native tracer: its spans are recorded nowhere, as a
 * parent-based sampler (OpenTelemetry's default) would have decided.
 *
 * @internal
 */
export interface ProcessSpan {
  readonly span: Tracer.Span | undefined
  readonly run: <A, E>(handler: Effect.Effect<A, E>) => Effect.Effect<A, E>
}

/**
 * Starts the `process {transport}` span of a message (synchronously: no step of the worker runs in it).
 *
 * @internal
 */
export const start = (tracing: Tracing, row: ReceivedMessage, headers: Headers.Headers): ProcessSpan => {
  const parent = TraceContext.parentOf(headers.traceparent, headers.tracestate)
  if (Option.isSome(parent) && !parent.value.sampled) return unsampled
  const span = tracing.tracer.span(
    `process ${row.transport}`,
    parent,
    Context.empty(),
    [],
    tracing.clock.unsafeCurrentTimeNanos(),
    "consumer",
    // A message without a stamp starts its own trace: never a child of whatever span runs the worker.
    Option.isNone(parent) ? { root: true } : {}
  )
  span.attribute("messaging.system", TraceContext.messagingSystem)
  span.attribute("messaging.operation.type", "process")
  span.attribute("messaging.operation.name", "process")
  span.attribute("messaging.destination.name", row.transport)
  span.attribute("messaging.message.id", row.messageId)
  span.attribute("effect_outbox.message.type", headers.type)
  span.attribute("effect_outbox.message.deliveries", row.deliveries)
  return {
    span,
    run: (handler) => Effect.withTracer(Effect.withParentSpan(handler, span), tracing.tracer)
  }
}

const unsampled: ProcessSpan = { span: undefined, run: (handler) => handler }

/**
 * Ends the span, if there is one, when the message's handling ends: with its outcome, or interrupted.
 *
 * @internal
 */
export const finish = <E>(
  tracing: Tracing,
  process: ProcessSpan,
  handling: Effect.Effect<Outcome.Outcome, E>
): Effect.Effect<Outcome.Outcome, E> => {
  const span = process.span
  return span === undefined
    ? handling
    : Effect.onExit(handling, (exit) => Effect.sync(() => end(span, exit, tracing.clock.unsafeCurrentTimeNanos())))
}

/** Ends the span with the outcome: its event, and an error status when the message did not succeed. */
const end = <E>(span: Tracer.Span, exit: Exit.Exit<Outcome.Outcome, E>, now: bigint): void => {
  if (Exit.isFailure(exit)) {
    // Interrupted (a shutdown, or the watchdog at a handler's timeout), or storage not ready (the worker stops):
    // the batch records what becomes of it.
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
