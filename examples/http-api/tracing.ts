/**
 * Traces over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (e.g. `http://localhost:4318`, an OpenTelemetry
 * Collector, Jaeger or Tempo): each request's span, dispatch's `send` span inside it, the worker's `process` span
 * as its child, and the handler's SQL inside that — one trace from the request to the invoice. Effect's own OTLP
 * exporter (`@effect/opentelemetry/OtlpTracer`) sends them: no OpenTelemetry SDK needed.
 */
import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import { FetchHttpClient } from "@effect/platform"
import { Config, Effect, Layer, Option } from "effect"

export const TracingLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const endpoint = yield* Config.option(Config.string("OTEL_EXPORTER_OTLP_ENDPOINT"))
    if (Option.isNone(endpoint)) return Layer.empty
    return OtlpTracer.layer({
      url: `${endpoint.value.replace(/\/$/, "")}/v1/traces`,
      resource: { serviceName: "orders-api" },
      exportInterval: "1 second"
    }).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(FetchHttpClient.layer))
  })
)
