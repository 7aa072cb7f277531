/**
 * W3C trace context for messages: the `traceparent`/`tracestate` stamp written at dispatch and read by the worker,
 * and whether a real tracer is installed at all (with Effect's own tracer, which exports nothing, the library
 * creates no span and writes no stamp).
 *
 * @internal
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"

/** The attribute values of the messaging conventions that name this library (`messaging.system`). */
export const messagingSystem = "effect_outbox"

/** Effect's default tracer: spans kept in memory, exported nowhere. */
export const nativeTracer: Tracer.Tracer = Effect.runSync(Effect.tracer)

/**
 * The current fiber's tracer when it is one that exports spans (installed by a layer such as
 * `@effect/opentelemetry`'s) and tracing is not disabled; `undefined` otherwise.
 */
export const installed: Effect.Effect<Tracer.Tracer | undefined> = Effect.zipWith(
  Effect.tracer,
  FiberRef.get(FiberRef.currentTracerEnabled),
  (tracer, on) => on && tracer !== nativeTracer ? tracer : undefined
)

/** Whether the current fiber has a tracer that exports spans (see `installed`). */
export const enabled: Effect.Effect<boolean> = Effect.map(installed, (tracer) => tracer !== undefined)

/**
 * The attributes of a `send` span (OpenTelemetry messaging conventions): the destination when there is one, the
 * message count of a batch.
 */
export const sendAttributes = (destination: string | undefined, count: number): Record<string, unknown> => ({
  "messaging.system": messagingSystem,
  "messaging.operation.type": "send",
  "messaging.operation.name": "send",
  ...(destination !== undefined ? { "messaging.destination.name": destination } : {}),
  ...(count !== 1 ? { "messaging.batch.message_count": count } : {})
})

/** A message's stamp: the context of the span that sent it. */
export interface Stamp {
  readonly traceparent: string
  readonly tracestate?: string
}

/** The longest `tracestate` carried (W3C: vendors must propagate at least 512 characters); longer ones are dropped. */
const maxTraceStateLength = 512

// `@effect/opentelemetry` keeps an OpenTelemetry span context's flags and state in these context entries of an
// external span: without the flags it takes every remote parent as sampled and an unsampled trace would be
// recorded from the worker on.
const otelTraceFlags = Context.GenericTag<unknown, number>("@effect/opentelemetry/Tracer/OtelTraceFlags")
const otelTraceState = Context.GenericTag<unknown, unknown>("@effect/opentelemetry/Tracer/OtelTraceState")
const otelSpan = Symbol.for("@effect/opentelemetry/Tracer/OtelSpan")

interface OtelSpanLike {
  readonly span: { spanContext(): { readonly traceState?: { serialize(): string } | undefined } }
}

/** The stamp of a span: its `traceparent`, and its `tracestate` when it is an OpenTelemetry span that has one. */
export const stampOf = (span: Tracer.Span): Stamp => {
  const traceparent = `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`
  const state = otelSpan in span ? (span as unknown as OtelSpanLike).span.spanContext().traceState?.serialize() : ""
  return state !== undefined && state.length > 0 && state.length <= maxTraceStateLength
    ? { traceparent, tracestate: state }
    : { traceparent }
}

const traceparentPattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^]*)?$/
const zeros = /^0+$/

/**
 * Makes an OpenTelemetry trace state from its text; set once a worker found the OpenTelemetry API (see
 * `loadTraceState`). Until then the stamp's `tracestate` is not handed on.
 */
let makeTraceState: ((text: string) => unknown) | undefined

/**
 * Loads the OpenTelemetry API's `createTraceState`, when it can be imported, so a stamp's `tracestate` reaches the
 * OpenTelemetry tracer. Never fails: without it the parent has no state.
 */
export const loadTraceState: Effect.Effect<void> = Effect.suspend(() =>
  makeTraceState !== undefined ? Effect.void : Effect.promise(() =>
    import("@opentelemetry/api").then(
      (api) => {
        makeTraceState = api.createTraceState
      },
      () => undefined
    )
  )
)

/**
 * The sending span named by a stored stamp, as the parent of the span that handles it; `None` when the stamp is
 * missing or not a valid W3C `traceparent` (a hostile or corrupt header is ignored, never an error).
 */
export const parentOf = (
  traceparent: string | undefined,
  tracestate: string | undefined
): Option.Option<Tracer.ExternalSpan> => {
  if (traceparent === undefined || traceparent.length > 256) return Option.none()
  const match = traceparentPattern.exec(traceparent)
  if (match === null) return Option.none()
  const [, version, traceId, spanId, flags, rest] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
    string?
  ]
  if (version === "ff" || (version === "00" && rest !== undefined) || zeros.test(traceId) || zeros.test(spanId)) {
    return Option.none()
  }
  const traceFlags = parseInt(flags, 16)
  let context = Context.make(otelTraceFlags, traceFlags)
  if (tracestate !== undefined && tracestate.length <= maxTraceStateLength && makeTraceState !== undefined) {
    try {
      context = Context.add(context, otelTraceState, makeTraceState(tracestate))
    } catch {
      // an invalid tracestate is dropped, as W3C asks
    }
  }
  return Option.some(Tracer.externalSpan({ traceId, spanId, sampled: (traceFlags & 1) === 1, context }))
}
