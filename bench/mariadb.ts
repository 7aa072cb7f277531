/**
 * The MariaDB scenario: the MySQL transport on a private MariaDB server (Debian's `mariadbd`, started here).
 *
 * - Burn-down: pre-inserted messages, no-op handler, one process — ours (`Worker.run` on `MysqlTransport`) against
 *   the raw-SQL limit: the transport's own claim texts (`claimTexts` of src/layers/mysql/sql/transport.ts, imported)
 *   driven through one `mysql2` connection with no library around them, acks riding on the next claim as the
 *   worker's do.
 * - Latency: an idle worker (`sleep` 1 s, the default) and a producer committing one message at a time with
 *   `sql.withTransaction` + `Outbox.dispatch`; from COMMIT returning to the handler start. The producer runs in the
 *   worker's process (its sends wake the worker: `localWakeups`), or elsewhere — a client of its own, which no wake-up
 *   reaches, as a producer in another process — where the poll bounds it. PostgreSQL's figure (same method, the
 *   producer in the worker's process, LISTEN/NOTIFY) is measured beside it on the run's cluster.
 */
import * as MysqlClient from "@effect/sql-mysql2/MysqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import { createConnection } from "mysql2/promise"
import { claimTexts } from "../src/layers/mysql/sql/transport.js"
import * as MysqlTransport from "../src/layers/MysqlTransport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import type { Transport } from "../src/services/Transport.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { startPrivateMariadb } from "../test/support/mariadb.js"
import { freshDatabase } from "./cluster.js"
import { BenchNoop, clock, queue, sleep, table, withDeadline } from "./common.js"
import { type Percentiles, percentiles } from "./latency.js"
import { rate, ratio, summarize, type Summary, table as markdownTable } from "./stats.js"

export interface MariadbOptions {
  readonly messages: number
  readonly rounds: number
  readonly batchSize: number
  readonly capSeconds: number
  /** Latency: messages measured with a wake-up (same process), and with polling only. */
  readonly latencyMessages: number
  readonly pollMessages: number
  readonly latencyWarmup: number
  readonly gapMs: number
}

export interface LatencyRow {
  readonly label: string
  readonly how: string
  readonly ms: Percentiles
}

export interface MariadbResult {
  readonly version: string
  readonly messages: number
  readonly rounds: number
  readonly batchSize: number
  readonly ours: Summary
  readonly raw: Summary
  readonly latency: ReadonlyArray<LatencyRow>
}

const quiet = <A, E, R>(self: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(self, LogLevel.Error)

const mysqlLayer = (url: string) => MysqlClient.layer({ url: Redacted.make(url), maxConnections: 10 })

/** A fresh database on the server; its URL. */
const freshMysqlDatabase = async (serverUrl: string, name: string): Promise<string> => {
  const connection = await createConnection({ uri: serverUrl })
  try {
    await connection.query(`CREATE DATABASE \`${name}\``)
  } finally {
    await connection.end()
  }
  return `${serverUrl}/${name}`
}

/** The transport set up and `messages` BenchNoops dispatched through the library, in transactions of 1 000. */
const seed = (url: string, messages: number) =>
  Effect.runPromise(quiet(
    Effect.gen(function*() {
      yield* (yield* TransportAdmin).setup
      const sql = yield* SqlClient.SqlClient
      const outbox = yield* Outbox.Outbox
      for (let lo = 1; lo <= messages; lo += 1_000) {
        const batch = Array.from({ length: Math.min(1_000, messages - lo + 1) }, (_, i) => new BenchNoop({ n: lo + i }))
        yield* sql.withTransaction(outbox.dispatchAll(batch))
      }
    }).pipe(
      Effect.provide(
        Outbox.layer().pipe(
          Layer.provideMerge(MysqlTransport.layer({ table })),
          Layer.provideMerge(mysqlLayer(url))
        )
      )
    )
  ))

const burnOurs = (url: string, batchSize: number, capMs: number) => {
  const time = clock()
  let handled = 0
  const program = Worker.run({ transports: [queue], batchSize, stopWhenEmpty: true }).pipe(
    Effect.provide(
      Layer.mergeAll(
        Handlers.layer([Handlers.handler(BenchNoop, () =>
          Effect.sync(() => {
            time.start()
            handled++
          }))]),
        ScheduleRetryStrategy.layerDefault
      ).pipe(Layer.provideMerge(MysqlTransport.layer({ table })), Layer.provideMerge(mysqlLayer(url)))
    ),
    Effect.timeout(capMs),
    Effect.option,
    quiet
  )
  return Effect.runPromise(program).then(() => ({ handled, seconds: time.seconds() }))
}

/** The raw-SQL limit: the claim's texts on one connection, acks riding on the next claim. */
const burnRaw = async (url: string, batchSize: number, capMs: number) => {
  const texts = claimTexts(table)
  const leaseUs = 30_000_000
  const connection = await createConnection({ uri: url, multipleStatements: true, supportBigNumbers: true })
  try {
    const time = clock()
    const deadline = performance.now() + capMs
    let handled = 0
    let acks: Array<number> = []
    while (performance.now() < deadline) {
      const withAcks = acks.length > 0
      const [results] = await connection.query(
        texts.lock(batchSize, withAcks, true).text,
        withAcks ? [queue, acks, queue, leaseUs] : [queue, leaseUs]
      )
      const rows = (results as Array<unknown>).at(-1) as Array<{ id: string }>
      if (rows.length === 0) {
        await connection.query(texts.nextDue(true), [queue, queue, leaseUs])
        acks = []
        break
      }
      await connection.query(texts.lease(true), [rows.map((r) => Number(r.id))])
      acks = new Array<number>(rows.length)
      for (let i = 0; i < rows.length; i++) {
        time.start() // the no-op handler
        acks[i] = Number(rows[i]!.id)
        handled++
      }
    }
    return { handled, seconds: time.seconds() }
  } finally {
    await connection.end()
  }
}

/** What a latency run needs, on a database URL. */
type Stack = (
  url: string
) => Layer.Layer<Outbox.Outbox | Transport | TransportAdmin | SqlClient.SqlClient, unknown>

/**
 * Commit → handler start, one message at a time, an idle worker between them (ms). With `separateProducer`, the
 * producer runs on a stack (a client) of its own, which the worker's wake-ups never hear from.
 */
const measureLatency = async (
  stack: Stack,
  workerUrl: string,
  separateProducer: boolean,
  options: {
    readonly messages: number
    readonly warmup: number
    readonly gapMs: number
    /** A random pause up to this long is added to the gap: sends land anywhere in the worker's poll interval. */
    readonly jitterMs?: number
  }
): Promise<ReadonlyArray<number>> => {
  const waiting = new Map<number, (t: number) => void>()
  const handlers = Handlers.layer([Handlers.handler(BenchNoop, (m) =>
    Effect.sync(() => {
      const t = performance.now()
      waiting.get(m.n)?.(t)
      waiting.delete(m.n)
    }))])
  const samples: Array<number> = []
  const program = Effect.gen(function*() {
    yield* (yield* TransportAdmin).setup
    const worker = yield* Effect.fork(
      Worker.run({ transports: [queue] }).pipe(
        Effect.provide(Layer.merge(handlers, ScheduleRetryStrategy.layerDefault))
      )
    )
    const produce = (n: number) =>
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(Outbox.dispatch(new BenchNoop({ n }))))
    const producer = separateProducer ? yield* Layer.build(stack(workerUrl)) : undefined
    yield* Effect.sleep("200 millis")
    for (let n = 1; n <= options.warmup + options.messages; n++) {
      const started = new Promise<number>((resolve) => waiting.set(n, resolve))
      const send = producer === undefined ? produce(n) : Effect.provide(produce(n), producer)
      yield* send
      const committed = performance.now()
      const t = yield* Effect.promise(() => withDeadline(started, 15_000, `handling of message ${n}`))
      if (n > options.warmup) samples.push(t - committed)
      yield* Effect.sleep(options.gapMs + Math.random() * (options.jitterMs ?? 0))
    }
    yield* Fiber.interrupt(worker)
  })
  await Effect.runPromise(quiet(Effect.scoped(Effect.provide(program, stack(workerUrl)))))
  return samples
}

const mysqlStack = (url: string) =>
  Outbox.layer().pipe(Layer.provideMerge(MysqlTransport.layer({ table })), Layer.provideMerge(mysqlLayer(url)))

const pgStack = (url: string) =>
  Outbox.layer().pipe(
    Layer.provideMerge(PgTransport.layer({ table })),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 10 }))
  )

/** Runs the scenario: its own MariaDB server, and PostgreSQL's latency on the run's cluster (`pgAdminUrl`). */
export const run = async (
  pgAdminUrl: string,
  options: MariadbOptions,
  log: (line: string) => void
): Promise<MariadbResult> => {
  log("mariadb: starting a private MariaDB server")
  const server = await startPrivateMariadb()
  let databases = 0
  const fresh = (prefix: string) => freshMysqlDatabase(server.url, `bench_${prefix}_${++databases}`)
  try {
    const versionConnection = await createConnection({ uri: server.url })
    const [versionRows] = await versionConnection.query("SELECT VERSION() AS v")
    await versionConnection.end()
    const version = String((versionRows as Array<{ v: string }>)[0]!.v)
    const ours: Array<number> = []
    const raw: Array<number> = []
    for (let round = 0; round < options.rounds; round++) {
      // Alternate which goes first, so that drift of the machine does not always hit the same one.
      const order = round % 2 === 0 ? (["ours", "raw"] as const) : (["raw", "ours"] as const)
      for (const who of order) {
        const url = await fresh(who)
        await seed(url, options.messages)
        await sleep(500)
        const m = who === "ours"
          ? await burnOurs(url, options.batchSize, options.capSeconds * 1000)
          : await burnRaw(url, options.batchSize, options.capSeconds * 1000)
        const perSecond = m.seconds > 0 ? m.handled / m.seconds : Number.NaN
        ;(who === "ours" ? ours : raw).push(perSecond)
        log(`mariadb burn-down round ${round + 1}/${options.rounds}  ${who.padEnd(5)} ${rate(perSecond)} msg/s`)
      }
    }
    const base = { messages: options.latencyMessages, warmup: options.latencyWarmup, gapMs: options.gapMs }
    log("mariadb: latency, the producer in the worker's process")
    const woken = await measureLatency(mysqlStack, await fresh("latency"), false, base)
    log("mariadb: latency, the producer elsewhere (polling)")
    const polled = await measureLatency(mysqlStack, await fresh("poll"), true, {
      ...base,
      messages: options.pollMessages,
      warmup: Math.min(2, options.latencyWarmup),
      jitterMs: 1_000
    })
    log("mariadb: latency on PostgreSQL, the producer in the worker's process")
    const pgDb = await freshDatabase(pgAdminUrl, "mariadb_pg_latency")
    let pg: ReadonlyArray<number>
    try {
      pg = await measureLatency(pgStack, pgDb.url, false, base)
    } finally {
      await pgDb.drop()
    }
    return {
      version,
      messages: options.messages,
      rounds: options.rounds,
      batchSize: options.batchSize,
      ours: summarize(ours),
      raw: summarize(raw),
      latency: [
        { label: "MariaDB, producer in the worker's process", how: "woken by the send", ms: percentiles(woken) },
        {
          label: "MariaDB, producer elsewhere",
          how: "poll every 1 s (`sleep`); sends at random times",
          ms: percentiles(polled)
        },
        { label: "PostgreSQL, producer in the worker's process", how: "LISTEN/NOTIFY", ms: percentiles(pg) }
      ]
    }
  } finally {
    await server.stop()
  }
}

const ms = (value: number) => (Number.isFinite(value) ? value.toFixed(1) : "–")

/** The Markdown section of BENCHMARKS.md. */
export const section = (r: MariadbResult): string =>
  `### MariaDB\n\nThe MySQL transport on MariaDB ${r.version} (Debian's server, started by the benchmark, default ` +
  `settings: InnoDB, \`innodb_flush_log_at_trx_commit=1\`, no binary log). Burn-down: ${
    r.messages.toLocaleString("en-US")
  } pre-inserted messages, no-op handler, one process, batch ${r.batchSize}, ${r.rounds} round${
    r.rounds > 1 ? "s" : ""
  } each on a fresh database; the raw-SQL limit runs the transport's own claim texts on one \`mysql2\` connection.\n\n` +
  markdownTable(
    ["contender", "msg/s (median)", "min", "max", "÷ raw"],
    [
      [
        "effect-outbox (MysqlTransport)",
        rate(r.ours.median),
        rate(r.ours.min),
        rate(r.ours.max),
        ratio(r.ours.median / r.raw.median)
      ],
      ["raw-SQL limit", rate(r.raw.median), rate(r.raw.min), rate(r.raw.max), "1.00×"]
    ],
    ["l", "r", "r", "r", "r"]
  ) +
  `\n\nLatency: an idle worker (\`sleep\` 1 s), one message committed at a time (\`sql.withTransaction\` + ` +
  `\`Outbox.dispatch\`); from COMMIT returning to the handler start, ms.\n\n` +
  markdownTable(
    ["where", "wake-up", "n", "p50", "p95", "p99", "max"],
    r.latency.map((l) => [l.label, l.how, String(l.ms.count), ms(l.ms.p50), ms(l.ms.p95), ms(l.ms.p99), ms(l.ms.max)]),
    ["l", "l", "r", "r", "r", "r", "r"]
  )
