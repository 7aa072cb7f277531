/**
 * The OpenTelemetry SDK tracer the benchmarks trace with: `@effect/opentelemetry`'s `NodeSdk`, parent-based
 * sampling (new traces sampled or not, children as their parent), a batch span processor whose exporter drops
 * the spans — the SDK's work is measured, no collector's.
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type SpanExporter
} from "@opentelemetry/sdk-trace-base"

const discard: SpanExporter = { export: (_spans, done) => done({ code: 0 }), shutdown: () => Promise.resolve() }

export const sdkTracer = (serviceName: string, sampled: boolean) =>
  NodeSdk.layer(() => ({
    resource: { serviceName },
    spanProcessor: new BatchSpanProcessor(discard, { maxQueueSize: 65_536, maxExportBatchSize: 4096 }),
    tracerConfig: {
      sampler: new ParentBasedSampler({ root: sampled ? new AlwaysOnSampler() : new AlwaysOffSampler() })
    }
  }))
