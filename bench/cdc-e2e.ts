/**
 * CDC end to end (`npm run bench:cdc-e2e`): the same business transactions carried to a Kafka consumer two ways, on
 * one machine, in one run:
 *
 * - **CDC**: `Outbox.dispatch` routed to `PgCdcTransport` (its default, logical decoding messages) → Debezium 3.6.1
 *   on Kafka Connect 4.3.2 (the tests' harness, support/connect.ts) → `outbox.event.<type>` → a worker on the Kafka
 *   transport;
 * - **polled**: `Outbox.dispatch` into `PgTransport` → a worker with `Forwarder.handlers` (batch 500) → a topic →
 *   the same consumer.
 *
 * Throughput: `messages` transactions (a business row and one message, over 200 ordering keys) committed by 8
 * producers as fast as they go while the readers run; the producers' rate, and messages/s from the first commit to
 * the last handled. Latency: messages committed one at a time at 200/s; commit returning → the consumer's handler
 * start. Also the WAL written per message and the outbox table's size after the run (what vacuum has to clean).
 * PostgreSQL 15 embedded with `wal_level=logical` and durable defaults, a private Kafka 4.4 broker.
 *
 *   npx tsx bench/cdc-e2e.ts [messages = 20000] [latency seconds = 10]
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Redacted from "effect/Redacted"
import * as KafkaTransport from "../src/layers/kafka/KafkaTransport.js"
import * as PgCdcTransport from "../src/layers/PgCdcTransport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Forwarder from "../src/programs/Forwarder.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { awaitConnectorRunning, createConnector, deleteConnector, startConnect } from "../test/support/connect.js"
import { startKafka } from "../test/support/kafka.js"
import { sleep } from "../test/support/leftovers.js"
import { freshDatabase, startLogicalCluster, withClient } from "./cluster.js"
import { BenchNoop, keyOf } from "./common.js"

const args = process.argv.slice(2)
const messages = Number(args[0] ?? 20_000)
const latencySeconds = Number(args[1] ?? 10)
const producers = 8
const keys = 200
const latencyRate = 200
const log = (line: string) => process.stderr.write(`${line}\n`)
const quiet = Logger.withMinimumLogLevel(LogLevel.None)

type Path = "cdc" | "polled"

interface Result {
  readonly path: Path
  readonly producerRate: number
  readonly endToEndRate: number
  readonly walBytesPerMessage: number
  readonly tableBytes: number
  readonly latency: ReadonlyArray<number>
}

/** The stack of one path on a fresh database: the consumer counts and times what it handles. */
const stackOf = (path: Path, url: string, bootstrap: string, name: string, onHandled: (n: number) => void) => {
  const topic = path === "cdc" ? `outbox.event.${name}` : name
  const consumer = Handlers.handler(BenchNoop, (m) => Effect.sync(() => onHandled(m.n)), { fromTransport: "kafka" })
  const handlers = path === "cdc" ? [consumer] : [...Forwarder.handlers([BenchNoop], { to: "kafka" }), consumer]
  const cdc: PgCdcTransport.Options = { transports: { cdc: { aggregateType: name } }, slot: `${name}_slot` }
  return {
    cdc,
    layer: Layer.mergeAll(
      Outbox.layer(path === "cdc" ? { routes: { BenchNoop: ["cdc"] } } : {}),
      Handlers.layer(handlers),
      ScheduleRetryStrategy.layerDefault
    ).pipe(
      Layer.provideMerge(
        TransportRouter.layer(
          PgTransport.make({ autoSetup: true }),
          PgCdcTransport.make(cdc),
          KafkaTransport.make({
            brokers: bootstrap,
            groupId: name,
            transports: { kafka: { topic, failureTransport: "failed" } }
          })
        )
      ),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: producers + 8 }))
    )
  }
}

const percentile = (values: ReadonlyArray<number>, p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))] ?? NaN

/** One path: throughput, then latency, on a database of its own. */
const run = async (path: Path, adminUrl: string, bootstrap: string, connect: string): Promise<Result> => {
  const name = `bench_${path}_${process.pid}`
  const db = await freshDatabase(adminUrl, `cdc_e2e_${path}`)
  const handledAt = new Map<number, number>()
  let waiting: { readonly count: number; readonly resolve: () => void } | undefined
  const { cdc, layer } = stackOf(path, db.url, bootstrap, name, (n) => {
    handledAt.set(n, performance.now())
    if (waiting !== undefined && handledAt.size >= waiting.count) waiting.resolve()
  })
  const handledAll = (count: number) =>
    new Promise<void>((resolve) => {
      waiting = { count, resolve }
      if (handledAt.size >= count) resolve()
    })
  const runtime = ManagedRuntime.make(layer)
  const connector = `${name}-connector`
  try {
    await runtime.runPromise(quiet(Effect.flatMap(TransportAdmin, (t) => t.setup)))
    await withClient(db.url, (c) => c.query("CREATE TABLE business (id int PRIMARY KEY)"))
    if (path === "cdc") {
      const u = new URL(db.url)
      const config = await runtime.runPromise(PgCdcTransport.connectorConfig(cdc, {
        name: connector,
        topicPrefix: name,
        database: {
          host: u.hostname,
          port: Number(u.port),
          user: decodeURIComponent(u.username),
          password: decodeURIComponent(u.password),
          dbname: u.pathname.slice(1)
        }
      }))
      await createConnector(connect, connector, config.config)
      await awaitConnectorRunning(connect, connector)
    }
    const workers = runtime.runFork(quiet(Effect.all([
      Worker.run({ transports: ["kafka"], batchSize: 500, concurrency: 50, sleep: "50 millis" }),
      ...(path === "polled" ? [Worker.run({ transports: ["outbox"], batchSize: 500, sleep: "50 millis" })] : [])
    ], { concurrency: "unbounded" })))
    const commit = (n: number) =>
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql.withTransaction(Effect.zipRight(
          sql`INSERT INTO business (id) VALUES (${n})`,
          Outbox.dispatch(new BenchNoop({ n }), { orderingKey: keyOf(n, keys) })
        )))
    // A first message through, so that the readers (and the connector's topic) are up before the clock starts.
    await runtime.runPromise(commit(0))
    await handledAll(1)
    const lsn = async () =>
      (await withClient(db.url, (c) => c.query<{ l: string }>("SELECT pg_current_wal_lsn()::text AS l"))).rows[0]!.l
    const walBefore = await lsn()
    let next = 1
    const t0 = performance.now()
    await runtime.runPromise(Effect.all(
      Array.from(
        { length: producers },
        () =>
          Effect.suspend(function loop(): Effect.Effect<void, unknown, SqlClient.SqlClient | Outbox.Outbox> {
            const n = next++
            return n > messages ? Effect.void : Effect.flatMap(commit(n), loop)
          })
      ),
      { concurrency: "unbounded", discard: true }
    ))
    const committed = performance.now()
    const walAfter = await lsn()
    await handledAll(messages + 1)
    const done = performance.now()
    const walBytes = await withClient(
      db.url,
      (c) => c.query<{ b: string }>("SELECT pg_wal_lsn_diff($1, $2)::text AS b", [walAfter, walBefore])
    )
    const tableBytes = await withClient(
      db.url,
      (c) => c.query<{ b: string }>("SELECT pg_total_relation_size('messenger_messages')::text AS b")
    )

    // Latency: one message at a time, at `latencyRate` a second.
    const committedAt = new Map<number, number>()
    const first = messages + 1
    const count = latencyRate * latencySeconds
    const tl = performance.now()
    for (let i = 0; i < count; i++) {
      const wait = tl + i * (1000 / latencyRate) - performance.now()
      if (wait > 0) await sleep(wait)
      await runtime.runPromise(commit(first + i))
      committedAt.set(first + i, performance.now())
    }
    await handledAll(messages + 1 + count)
    await runtime.runPromise(Fiber.interrupt(workers))
    const latency = [...committedAt].map(([n, at]) => handledAt.get(n)! - at)
    return {
      path,
      producerRate: messages / ((committed - t0) / 1000),
      endToEndRate: messages / ((done - t0) / 1000),
      walBytesPerMessage: Number(walBytes.rows[0]!.b) / messages,
      tableBytes: Number(tableBytes.rows[0]!.b),
      latency
    }
  } finally {
    if (path === "cdc") await deleteConnector(connect, connector).catch(() => undefined)
    await runtime.dispose()
    if (path === "cdc") {
      // The connector's walsender ends with it; a slot nobody reads holds WAL.
      for (let i = 0; i < 100; i++) {
        const active = await withClient(
          db.url,
          (c) => c.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active", [`${name}_slot`])
        )
        if (active.rowCount === 0) break
        await sleep(100)
      }
      await withClient(
        db.url,
        (c) =>
          c.query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", [
            `${name}_slot`
          ])
      ).catch(() => undefined)
    }
    await db.drop()
  }
}

const server = await startLogicalCluster({ noFsync: false, log })
const kafka = await startKafka()
const connect = await startConnect({ bootstrap: kafka.bootstrap })
try {
  log(
    `cdc-e2e: ${messages} messages, ${producers} producers, ${keys} keys; latency ${latencySeconds} s at ${latencyRate}/s`
  )
  const results: Array<Result> = []
  for (const path of ["polled", "cdc"] as const) {
    log(`cdc-e2e: ${path}`)
    results.push(await run(path, server.url, kafka.bootstrap, connect.url))
  }
  const fmt = (n: number) => Math.round(n).toLocaleString("en-US")
  const ms = (n: number) => n.toFixed(1)
  console.log("| path | producer tx/s | end to end msg/s | WAL B/msg | outbox table after | latency p50 ms | p99 ms |")
  console.log("|---|---:|---:|---:|---:|---:|---:|")
  for (const r of results) {
    console.log(
      `| ${r.path === "cdc" ? "CDC: Debezium (logical messages)" : "polled: forwarder (batch 500)"} | ${
        fmt(r.producerRate)
      } | ${fmt(r.endToEndRate)} | ${fmt(r.walBytesPerMessage)} | ${fmt(r.tableBytes / 1024)} kB | ${
        ms(percentile(r.latency, 0.5))
      } | ${ms(percentile(r.latency, 0.99))} |`
    )
  }
} finally {
  await connect.destroy()
  await kafka.destroy()
  await server.stop()
}
