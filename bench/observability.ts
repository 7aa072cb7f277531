/**
 * `npm run bench:observability`: what the worker's metrics and traces cost, in one run. Burn-downs of ours
 * (batch 500) on fresh databases, alternating between four configurations, each round in the same order:
 *
 * - `bare` — no metrics (`metrics: false`), no tracer;
 * - `metrics` — the default: metrics on, no tracer (Effect's default tracer: the worker makes no span);
 * - `stamped` — metrics on, no tracer, every message stamped (`…-00`): what carrying a stamp costs by itself;
 * - `unsampled` — metrics on, the OpenTelemetry SDK tracer (`@effect/opentelemetry` NodeSdk, parent-based sampling),
 *   every message stamped by an unsampled producer (`traceparent …-00`): spans made, none recorded;
 * - `sampled` — the same with sampled stamps (`…-01`): every `process` span recorded and handed to a batch span
 *   processor whose exporter drops them (the cost of tracing in the worker, without a collector's network);
 * - `otlp` — sampled stamps, Effect's own OTLP tracer (`@effect/opentelemetry/OtlpTracer`, no OpenTelemetry SDK)
 *   exporting every span as JSON to a local HTTP sink.
 *
 * Prints a table of the median rate of each and its ratio to `metrics` and to `bare`.
 *
 *   npx tsx bench/observability.ts [messages per run, default 50000] [rounds, default 3]
 *
 * Starts its own embedded PostgreSQL unless DATABASE_URL names a server (a role that may create databases).
 */
import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import { FetchHttpClient } from "@effect/platform"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as http from "node:http"
import * as Worker from "../src/programs/worker/Worker.js"
import { freshDatabase, settle, startCluster, withClient } from "./cluster.js"
import { clock, queue, table } from "./common.js"
import * as Ours from "./ours.js"
import { sdkTracer } from "./tracer.js"

const [messagesText = "50000", roundsText = "3"] = process.argv.slice(2)
const messages = Number(messagesText)
const rounds = Number(roundsText)
const batchSize = 500

type Configuration = "bare" | "metrics" | "stamped" | "unsampled" | "sampled" | "otlp"
const configurations: ReadonlyArray<Configuration> =
  (process.env.ONLY?.split(",") as Array<Configuration> | undefined) ??
    ["bare", "metrics", "stamped", "unsampled", "sampled", "otlp"]

/** A local OTLP/HTTP endpoint that accepts every export and keeps nothing. */
const startSink = async () => {
  const server = http.createServer((request, response) => {
    request.resume()
    request.on("end", () => response.writeHead(200, { "content-type": "application/json" }).end("{}"))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/v1/traces`,
    close: () => server.close()
  }
}

const otlpLayer = (url: string) =>
  OtlpTracer.layer({ url, resource: { serviceName: "bench-observability" } }).pipe(
    Layer.provide(OtlpSerialization.layerJson),
    Layer.provide(FetchHttpClient.layer)
  )

/** Seeds rows as `Outbox.dispatch` writes them; traced ones carry a stamp of their own per message. */
const seed = (url: string, stamp: "none" | "00" | "01") =>
  stamp === "none" ? Ours.seed(url, 1, messages) : withClient(url, async (client) => {
    await client.query(
      `INSERT INTO "${table}" (message_id, body, headers, queue_name, created_at, available_at)
       SELECT gen_random_uuid(), ${Ours.bodySql("g")},
         '{"type":"BenchNoop","traceparent":"00-' || md5(g::text) || '-' || substr(md5('s' || g), 1, 16) ||
           '-${stamp}"}',
         $2, now(), now()
       FROM generate_series(1, $1::int) AS g`,
      [messages, queue]
    )
  })

const run = async (adminUrl: string, configuration: Configuration, sinkUrl: string): Promise<number> => {
  const db = await freshDatabase(adminUrl, `observability_${configuration}`)
  try {
    await Ours.setup(db.url)
    await seed(
      db.url,
      configuration === "unsampled" || configuration === "stamped"
        ? "00"
        : configuration === "sampled" || configuration === "otlp"
        ? "01"
        : "none"
    )
    await settle(db.url)
    let handled = 0
    const time = clock()
    const worker = Worker.run({
      transports: [queue],
      batchSize,
      stopWhenEmpty: true,
      ...(configuration === "bare" ? { metrics: false } : {})
    }).pipe(
      Effect.provide(Ours.stack(db.url, {
        maxConnections: 4,
        onHandled: () => {
          handled++
          time.start()
        }
      }))
    )
    await Effect.runPromise(
      (configuration === "unsampled" || configuration === "sampled"
        ? Effect.provide(worker, sdkTracer("bench-observability", configuration === "sampled"))
        : configuration === "otlp"
        ? Effect.provide(worker, otlpLayer(sinkUrl))
        : worker).pipe(Effect.scoped, Logger.withMinimumLogLevel(LogLevel.Error))
    )
    const seconds = time.seconds()
    if (handled !== messages) throw new Error(`${configuration}: handled ${handled} of ${messages}`)
    return messages / seconds
  } finally {
    await db.drop()
  }
}

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

const main = async () => {
  const cluster = await startCluster({ noFsync: false, log: (line) => console.error(line) })
  const sink = await startSink()
  try {
    const rates = new Map<Configuration, Array<number>>(configurations.map((c) => [c, []]))
    for (let round = 1; round <= rounds; round++) {
      for (const configuration of configurations) {
        const rate = await run(cluster.adminUrl, configuration, sink.url)
        rates.get(configuration)!.push(rate)
        console.error(`round ${round}: ${configuration} ${Math.round(rate)} msg/s`)
      }
    }
    const bare = median(rates.get("bare") ?? [NaN])
    const metrics = median(rates.get("metrics") ?? [NaN])
    const format = (n: number) => Math.round(n).toLocaleString("en-US").replace(/,/g, " ")
    console.log(
      `Burn-down, batch ${batchSize}, ${
        format(messages)
      } messages per run, ${rounds} rounds (${cluster.origin}), Node ${process.version}`
    )
    console.log("")
    console.log("| configuration | msg/s (median) | rounds | ÷ metrics | ÷ bare |")
    console.log("|---|---:|---|---:|---:|")
    for (const configuration of configurations) {
      const all = rates.get(configuration)!
      const m = median(all)
      console.log(
        `| ${configuration} | ${format(m)} | ${all.map(format).join(", ")} | ${(m / metrics).toFixed(3)} | ${
          (m / bare).toFixed(3)
        } |`
      )
    }
  } finally {
    sink.close()
    await cluster.stop()
  }
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
