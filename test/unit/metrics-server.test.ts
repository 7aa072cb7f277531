/**
 * The metrics and health endpoint over real HTTP on 127.0.0.1 (a port the system picks: no database, no broker,
 * hence a unit test): the Prometheus text of Effect metrics the test updates, line for line; the probes' answers,
 * including a probe that fails, dies, hangs or answers a long reason; 404 for anything else; a port in use as the
 * typed error; the port released when the scope closes.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Equal from "effect/Equal"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as Ref from "effect/Ref"
import * as Scope from "effect/Scope"
import * as HealthStatus from "../../src/programs/observability/HealthStatus.js"
import * as MetricsServer from "../../src/programs/observability/MetricsServer.js"

const local = { host: "127.0.0.1", port: 0 } as const

interface Answer {
  readonly status: number
  readonly body: string
  readonly contentType: string | null
}

const request = (server: MetricsServer.MetricsServerShape, path: string, init?: RequestInit) =>
  Effect.promise(async (): Promise<Answer> => {
    const response = await fetch(`http://127.0.0.1:${server.address.port}${path}`, init)
    return { status: response.status, body: await response.text(), contentType: response.headers.get("content-type") }
  })

/** The lines of the metric family `name`: its `# HELP` line to the next family's or to a blank line. */
const family = (body: string, name: string): Array<string> => {
  const lines = body.split("\n")
  const start = lines.indexOf(lines.find((line) => line.startsWith(`# HELP ${name} `)) ?? "\u0000")
  if (start === -1) return []
  const end = lines.findIndex((line, i) => i > start && (line === "" || line.startsWith("# HELP ")))
  return lines.slice(start, end === -1 ? undefined : end)
}

const handled = Metric.counter("outbox_messages_handled_total", {
  description: "Messages handled",
  incremental: true
})
const handleDuration = Metric.histogram(
  "outbox_handle_duration_seconds",
  MetricBoundaries.fromIterable([0.1, 0.5, 1]),
  "Time a handler took"
)
const pending = Metric.gauge("outbox_messages_pending", { description: "Messages waiting" })
const retried = Metric.counter("outbox_messages_retried", { description: "Not incremental" })

describe("MetricsServer", () => {
  it.scopedLive("GET /metrics: Effect's counters, gauges and histograms in Prometheus text", () =>
    Effect.gen(function*() {
      const server = yield* MetricsServer.make({ ...local, resource: { serviceName: "metrics-server-test" } })
      expect(server.address.host).toBe("127.0.0.1")
      expect(server.address.port).toBeGreaterThan(0)

      const orderPaid = handled.pipe(Metric.tagged("transport", "outbox"), Metric.tagged("type", "OrderPaid"))
      const orderShipped = handled.pipe(Metric.tagged("transport", "outbox"), Metric.tagged("type", "OrderShipped"))
      yield* Metric.incrementBy(orderPaid, 2)
      yield* Metric.increment(orderPaid)
      yield* Metric.increment(orderShipped)
      for (const seconds of [0.25, 0.5, 2]) yield* Metric.update(handleDuration, seconds)
      yield* Metric.set(pending, 7)
      yield* Metric.increment(retried)

      const scrape = yield* request(server, "/metrics")
      expect(scrape.status).toBe(200)
      expect(scrape.contentType).toBe("text/plain; version=0.0.4; charset=utf-8")
      expect(family(scrape.body, "target_info")).toEqual([
        "# HELP target_info Target metadata",
        "# TYPE target_info gauge",
        "target_info{service_name=\"metrics-server-test\",telemetry_sdk_name=\"@effect/opentelemetry\",telemetry_sdk_language=\"nodejs\"} 1"
      ])
      expect(family(scrape.body, "outbox_messages_handled_total")).toEqual([
        "# HELP outbox_messages_handled_total Messages handled",
        "# UNIT outbox_messages_handled_total 1",
        "# TYPE outbox_messages_handled_total counter",
        "outbox_messages_handled_total{transport=\"outbox\",type=\"OrderPaid\"} 3",
        "outbox_messages_handled_total{transport=\"outbox\",type=\"OrderShipped\"} 1"
      ])
      expect(family(scrape.body, "outbox_handle_duration_seconds")).toEqual([
        "# HELP outbox_handle_duration_seconds Time a handler took",
        "# UNIT outbox_handle_duration_seconds 1",
        "# TYPE outbox_handle_duration_seconds histogram",
        "outbox_handle_duration_seconds_count 3",
        "outbox_handle_duration_seconds_sum 2.75",
        "outbox_handle_duration_seconds_bucket{le=\"0.1\"} 0",
        "outbox_handle_duration_seconds_bucket{le=\"0.5\"} 2",
        "outbox_handle_duration_seconds_bucket{le=\"1\"} 2",
        "outbox_handle_duration_seconds_bucket{le=\"+Inf\"} 3"
      ])
      expect(family(scrape.body, "outbox_messages_pending")).toEqual([
        "# HELP outbox_messages_pending Messages waiting",
        "# UNIT outbox_messages_pending 1",
        "# TYPE outbox_messages_pending gauge",
        "outbox_messages_pending 7"
      ])
      // A counter that is not `incremental` may go down: Prometheus gets a gauge, without `_total`.
      expect(family(scrape.body, "outbox_messages_retried")).toEqual([
        "# HELP outbox_messages_retried Not incremental",
        "# UNIT outbox_messages_retried 1",
        "# TYPE outbox_messages_retried gauge",
        "outbox_messages_retried 1"
      ])

      // Every scrape reads the registry as it is now.
      yield* Metric.increment(orderPaid)
      const again = yield* request(server, "/metrics")
      expect(family(again.body, "outbox_messages_handled_total")).toContain(
        "outbox_messages_handled_total{transport=\"outbox\",type=\"OrderPaid\"} 4"
      )
    }))

  it.scopedLive("a prefix names every metric", () =>
    Effect.gen(function*() {
      const server = yield* MetricsServer.make({ ...local, prefix: "shop" })
      yield* Metric.set(pending, 3)
      const scrape = yield* request(server, "/metrics")
      expect(family(scrape.body, "shop_outbox_messages_pending")).toContain("shop_outbox_messages_pending 3")
    }))

  it.scopedLive("GET /healthz and /readyz: 200 while their probe answers healthy, 503 with the reason otherwise", () =>
    Effect.gen(function*() {
      const live = yield* Ref.make(HealthStatus.healthy)
      const ready = yield* Ref.make(HealthStatus.unhealthy("starting"))
      const server = yield* MetricsServer.make({ ...local, live: Ref.get(live), ready: Ref.get(ready) })

      expect(yield* request(server, "/healthz")).toEqual({
        status: 200,
        body: "ok\n",
        contentType: "text/plain"
      })
      expect(yield* request(server, "/readyz")).toMatchObject({ status: 503, body: "starting\n" })

      yield* Ref.set(ready, HealthStatus.healthy)
      expect(yield* request(server, "/readyz")).toMatchObject({ status: 200, body: "ok\n" })

      yield* Ref.set(live, HealthStatus.unhealthy("event loop blocked"))
      expect(yield* request(server, "/healthz")).toMatchObject({ status: 503, body: "event loop blocked\n" })
      expect(yield* request(server, "/readyz")).toMatchObject({ status: 200 })

      yield* Ref.set(live, HealthStatus.healthy)
      expect(yield* request(server, "/healthz?verbose=1")).toMatchObject({ status: 200, body: "ok\n" })
    }))

  it.scopedLive("without probes both answer 200", () =>
    Effect.gen(function*() {
      const server = yield* MetricsServer.make(local)
      expect(yield* request(server, "/healthz")).toMatchObject({ status: 200, body: "ok\n" })
      expect(yield* request(server, "/readyz")).toMatchObject({ status: 200, body: "ok\n" })
    }))

  it.scopedLive("a probe that fails or dies answers 503 with what happened; the server carries on", () =>
    Effect.gen(function*() {
      const server = yield* MetricsServer.make({
        ...local,
        live: Effect.fail(new Error("pool exhausted")),
        ready: Effect.die(new Error("boom"))
      })
      expect(yield* request(server, "/healthz")).toMatchObject({ status: 503, body: "probe failed: pool exhausted\n" })
      expect(yield* request(server, "/readyz")).toMatchObject({ status: 503, body: "probe died: boom\n" })
      expect((yield* request(server, "/metrics")).status).toBe(200)
    }))

  it.scopedLive("a probe that hangs, even uninterruptibly, answers 503 once the probe timeout has passed", () =>
    Effect.gen(function*() {
      const server = yield* MetricsServer.make({
        ...local,
        live: Effect.never,
        ready: Effect.uninterruptible(Effect.never),
        probeTimeout: "200 millis"
      })
      for (const path of ["/healthz", "/readyz"]) {
        const started = Date.now()
        expect(yield* request(server, path)).toMatchObject({ status: 503, body: "probe timed out after 200ms\n" })
        expect(Date.now() - started).toBeLessThan(1_500)
      }
    }))

  it.scopedLive("a long reason is cut", () =>
    Effect.gen(function*() {
      const server = yield* MetricsServer.make({
        ...local,
        ready: Effect.succeed(HealthStatus.unhealthy("x".repeat(10_000)))
      })
      const answer = yield* request(server, "/readyz")
      expect(answer.status).toBe(503)
      expect(answer.body.length).toBeLessThan(600)
      expect(answer.body).toMatch(/^x{500}… \[9500 more characters cut\]\n$/)
    }))

  it.scopedLive("anything else answers 404", () =>
    Effect.gen(function*() {
      const server = yield* MetricsServer.make(local)
      for (const path of ["/", "/nope", "/metrics/extra", "/healthzz", "/readyz/now"]) {
        expect((yield* request(server, path)).status, path).toBe(404)
      }
      expect((yield* request(server, "/metrics", { method: "POST" })).status).toBe(404)
      expect((yield* request(server, "/readyz", { method: "DELETE" })).status).toBe(404)
    }))

  it.scopedLive("a port in use is a MetricsServerError with the port and the reason", () =>
    Effect.gen(function*() {
      const first = yield* MetricsServer.make(local)
      const error = yield* MetricsServer.make({ host: "127.0.0.1", port: first.address.port }).pipe(Effect.flip)
      expect(error).toBeInstanceOf(MetricsServer.MetricsServerError)
      expect(error._tag).toBe("MetricsServerError")
      expect(error.host).toBe("127.0.0.1")
      expect(error.port).toBe(first.address.port)
      expect(error.reason).toContain("EADDRINUSE")
      expect(error.message).toBe(`Cannot serve metrics on 127.0.0.1:${first.address.port}: ${error.reason}`)
      // The first one still serves.
      expect((yield* request(first, "/healthz")).status).toBe(200)
    }))

  it.scopedLive("closing the scope closes the port (idle keep-alive connections included): it can be bound again", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const server = yield* MetricsServer.make(local).pipe(Scope.extend(scope))
      const port = server.address.port
      expect((yield* request(server, "/metrics")).status).toBe(200)
      yield* Scope.close(scope, Exit.void).pipe(Effect.timeoutFail({
        duration: "5 seconds",
        onTimeout: () => new Error("the scope did not close")
      }))
      const after = yield* Effect.promise(() =>
        fetch(`http://127.0.0.1:${port}/metrics`).then(() => "answered", () => "refused")
      )
      expect(after).toBe("refused")
      const again = yield* MetricsServer.make({ host: "127.0.0.1", port })
      expect(again.address.port).toBe(port)
      expect((yield* request(again, "/healthz")).status).toBe(200)
    }))

  it.scopedLive("as a layer, with a probe that needs a service", () => {
    class Readiness extends Context.Tag("test/Readiness")<Readiness, Ref.Ref<HealthStatus.HealthStatus>>() {}
    const served: Layer.Layer<MetricsServer.MetricsServer, MetricsServer.MetricsServerError, Readiness> = MetricsServer
      .layer({ ...local, ready: Effect.flatMap(Readiness, Ref.get) })
    const readiness = Layer.effect(Readiness, Ref.make(HealthStatus.unhealthy("warming up")))
    return Effect.gen(function*() {
      const server = yield* MetricsServer.MetricsServer
      expect(yield* request(server, "/readyz")).toMatchObject({ status: 503, body: "warming up\n" })
      yield* Effect.flatMap(Readiness, (ref) => Ref.set(ref, HealthStatus.healthy))
      expect(yield* request(server, "/readyz")).toMatchObject({ status: 200, body: "ok\n" })
    }).pipe(Effect.provide(Layer.provideMerge(served, readiness)))
  })
})

describe("HealthStatus", () => {
  it("is a Data value: healthy, or unhealthy with its reason", () => {
    expect(Equal.equals(HealthStatus.fromBoolean(true, "down"), HealthStatus.healthy)).toBe(true)
    expect(Equal.equals(HealthStatus.fromBoolean(false, "down"), HealthStatus.unhealthy("down"))).toBe(true)
    expect(Equal.equals(HealthStatus.unhealthy("down"), HealthStatus.unhealthy("up"))).toBe(false)
    expect(HealthStatus.isHealthy(HealthStatus.healthy)).toBe(true)
    expect(HealthStatus.isHealthy(HealthStatus.unhealthy("down"))).toBe(false)
    expect(HealthStatus.match(HealthStatus.unhealthy("down"), { Healthy: () => "ok", Unhealthy: (reason) => reason }))
      .toBe("down")
  })
})
