/**
 * The metrics and health endpoint: one HTTP server for the life of its scope, answering
 *
 * - `GET /metrics`: every metric of Effect's registry (`Metric.counter`, `gauge`, `histogram`, `summary`,
 *   `frequency`) in the Prometheus text format, read through `@effect/opentelemetry`'s metric producer by the
 *   OpenTelemetry Prometheus exporter;
 * - `GET /healthz` and `GET /readyz`: 200 when the liveness or readiness probe answers healthy, 503 with the reason
 *   otherwise;
 * - anything else: 404.
 *
 * A subpath of its own (`effect-outbox/MetricsServer`): importing the package's root loads no OpenTelemetry.
 *
 * @since 0.1.0
 */
import * as Metrics from "@effect/opentelemetry/Metrics"
import * as Resource from "@effect/opentelemetry/Resource"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { PrometheusExporter, PrometheusSerializer } from "@opentelemetry/exporter-prometheus"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import { describeError } from "../../internal/describeError.js"
import { cut } from "../../internal/text.js"
import * as HealthStatus from "./HealthStatus.js"

/**
 * The endpoint could not start: the port is in use, the host is not an address of this machine, the process may
 * not bind the port.
 *
 * @since 0.1.0
 * @category errors
 */
export class MetricsServerError extends Schema.TaggedError<MetricsServerError>()("MetricsServerError", {
  host: Schema.String,
  port: Schema.Number,
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  /** @since 0.1.0 */
  override get message(): string {
    return `Cannot serve metrics on ${this.host}:${this.port}: ${this.reason}`
  }
}

/**
 * Where the endpoint listens: the port it bound (the one the system picked when asked for port 0).
 *
 * @since 0.1.0
 * @category models
 */
export interface Address {
  readonly host: string
  readonly port: number
}

/**
 * The running endpoint.
 *
 * @since 0.1.0
 * @category models
 */
export interface MetricsServerShape {
  readonly address: Address
}

/**
 * The running endpoint, provided by `layer`.
 *
 * @since 0.1.0
 * @category tags
 */
export class MetricsServer extends Context.Tag("effect-outbox/MetricsServer")<MetricsServer, MetricsServerShape>() {}

/**
 * The OpenTelemetry resource the endpoint describes, shown as the `target_info` series.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResourceOptions {
  readonly serviceName: string
  readonly serviceVersion?: string
  readonly attributes?: Readonly<Record<string, string>>
}

/**
 * Options of the endpoint. The probes may need services (`R`): the layer then requires them.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<R = never> {
  /** The port (default 9464, Prometheus' registered port for OpenTelemetry); 0 lets the system pick one. */
  readonly port?: number
  /** The interface to listen on (default `0.0.0.0`, every IPv4 interface). */
  readonly host?: string
  /** What `GET /healthz` asks: is the process alive (default: always healthy). */
  readonly live?: HealthStatus.Probe<R>
  /** What `GET /readyz` asks: should the process get work (default: always healthy). */
  readonly ready?: HealthStatus.Probe<R>
  /** How long a probe may take before it answers unhealthy (default 2 seconds). */
  readonly probeTimeout?: Duration.DurationInput
  /** A prefix for every metric name (`myapp` makes `myapp_outbox_messages_handled_total`); default none. */
  readonly prefix?: string
  /** The resource (default: read from `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`). */
  readonly resource?: ResourceOptions
}

/**
 * The port the endpoint listens on by default.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultPort = 9464

/**
 * How long a probe may take by default.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultProbeTimeout: Duration.Duration = Duration.seconds(2)

/** The longest reason a 503 answers (a probe's reason or the description of its failure). */
const maxReasonLength = 500

/** The media type of Prometheus' text exposition format. */
const prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

/**
 * Starts the endpoint; it stops when the scope closes (the port is released before the scope's close completes).
 * A port in use fails with `MetricsServerError`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <R = never>(
  options: Options<R> = {}
): Effect.Effect<MetricsServerShape, MetricsServerError, Scope.Scope | R> =>
  Effect.gen(function*() {
    const host = options.host ?? "0.0.0.0"
    const port = options.port ?? defaultPort
    const probeTimeout = Duration.decode(options.probeTimeout ?? defaultProbeTimeout)

    // The exporter is only the reader here: the endpoint is served by the Effect HTTP server, so its own server
    // never starts. Every series would carry the same `otel_scope_name="@effect/opentelemetry/Metrics"` label (one
    // producer): it is left out.
    const exporter = new PrometheusExporter({
      preventServerStart: true,
      withoutScopeInfo: true,
      ...(options.prefix === undefined ? {} : { prefix: options.prefix })
    })
    // The exporter's own request handler writes to the Node response and answers 200 even when collecting fails;
    // its serializer, built with the same options, lets the route answer like any other one (500 on a failure).
    const serializer = new PrometheusSerializer(options.prefix, false, undefined, false, true)
    const resource = options.resource === undefined
      ? Resource.layerFromEnv()
      : Resource.layer({
        serviceName: options.resource.serviceName,
        ...(options.resource.serviceVersion === undefined ? {} : { serviceVersion: options.resource.serviceVersion }),
        ...(options.resource.attributes === undefined ? {} : { attributes: { ...options.resource.attributes } })
      })
    const producer = yield* Effect.provide(Metrics.makeProducer, resource)
    yield* Metrics.registerProducer(producer, () => exporter)

    const scrape = Effect.tryPromise(() => exporter.collect()).pipe(
      Effect.map(({ resourceMetrics }) =>
        HttpServerResponse.text(serializer.serialize(resourceMetrics), { contentType: prometheusContentType })
      ),
      Effect.catchAll((error) =>
        Effect.succeed(
          HttpServerResponse.text(`# failed to export metrics: ${cut(describeError(error.error), maxReasonLength)}\n`, {
            status: 500
          })
        )
      )
    )

    const app = HttpRouter.empty.pipe(
      HttpRouter.get("/metrics", scrape),
      HttpRouter.get("/healthz", answer(options.live ?? alwaysHealthy, probeTimeout)),
      HttpRouter.get("/readyz", answer(options.ready ?? alwaysHealthy, probeTimeout)),
      HttpRouter.all("*", Effect.succeed(HttpServerResponse.text("not found\n", { status: 404 })))
    )

    const server = yield* NodeHttpServer.make(() => Http.createServer(), { port, host }).pipe(
      Effect.mapError((error) =>
        new MetricsServerError({ host, port, reason: describeError(error.cause), cause: error.cause })
      )
    )
    yield* server.serve(app)
    const bound = server.address._tag === "TcpAddress" ? server.address : { hostname: host, port }
    return { address: { host: bound.hostname, port: bound.port } }
  })

/**
 * The endpoint as a layer: serves for the layer's life.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <R = never>(options: Options<R> = {}): Layer.Layer<MetricsServer, MetricsServerError, R> =>
  Layer.scoped(MetricsServer, make(options))

const alwaysHealthy: HealthStatus.Probe = Effect.succeed(HealthStatus.healthy)

/**
 * A probe's answer as a response. The probe runs disconnected: past the timeout the request is answered at once,
 * even when the probe ignores its interruption.
 */
const answer = <R>(probe: HealthStatus.Probe<R>, timeout: Duration.Duration) =>
  probe.pipe(
    Effect.exit,
    Effect.disconnect,
    Effect.timeoutOption(timeout),
    Effect.map((result) => {
      const status = Option.match(result, {
        onNone: () => HealthStatus.unhealthy(`probe timed out after ${Duration.format(timeout)}`),
        onSome: statusOf
      })
      return HealthStatus.match(status, {
        Healthy: () => HttpServerResponse.text("ok\n"),
        Unhealthy: (reason) => HttpServerResponse.text(`${cut(reason, maxReasonLength)}\n`, { status: 503 })
      })
    })
  )

const statusOf = (exit: Exit.Exit<HealthStatus.HealthStatus, unknown>): HealthStatus.HealthStatus => {
  if (Exit.isSuccess(exit)) {
    const status: unknown = exit.value
    return isStatus(status) ? status : HealthStatus.unhealthy("probe answered neither healthy nor unhealthy")
  }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return HealthStatus.unhealthy(`probe failed: ${describeError(failure.value)}`)
  const defect = Cause.dieOption(exit.cause)
  if (Option.isSome(defect)) return HealthStatus.unhealthy(`probe died: ${describeError(defect.value)}`)
  return HealthStatus.unhealthy("probe was interrupted")
}

/** A status from a caller without types (JavaScript) may be anything. */
const isStatus = (value: unknown): value is HealthStatus.HealthStatus =>
  typeof value === "object" && value !== null &&
  ((value as { readonly _tag?: unknown })._tag === "Healthy" ||
    ((value as { readonly _tag?: unknown })._tag === "Unhealthy" &&
      typeof (value as { readonly reason?: unknown }).reason === "string"))
