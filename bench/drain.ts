/**
 * The drain scenario: storage at scale. A backlog of N messages (default 1 000 000) is inserted into our table in the
 * shape `Outbox.dispatch` writes (`Ours.seed`, checked at run time) — and then nothing: no VACUUM, no ANALYZE, no
 * CHECKPOINT, as in a system whose consumers were down; autovacuum does whatever it does, and its runs are recorded.
 * One worker drains it (`Worker.run` through the public API, batch 500, default concurrency, no-op handler,
 * `stopWhenEmpty`). Measured: the rate over the first and the last 10 % of the messages (and every tenth), what the
 * worker's claims read over the first and the last 10 % (buffers per claim, from `pg_stat_statements` where the
 * server loads it), what the claim's row lookup reads near the start and near the end (an `EXPLAIN (ANALYZE,
 * BUFFERS)` probe of the unkeyed claim's SELECT from a connection of its own, three times around 1 % and three times
 * around 90 %, medians), and the table's and its indexes' sizes before, right after the drain, after a plain `VACUUM`
 * and after `PgCompaction.compactIndexes` (what `outbox storage:compact` runs).
 */
import * as Effect from "effect/Effect"
import pg from "pg"
import * as PgCompaction from "../src/layers/PgCompaction.js"
import { freshDatabase, settle, withClient } from "./cluster.js"
import { queue, sleep, table, withDeadline } from "./common.js"
import * as Ours from "./ours.js"
import { mb, rate, summarize, type Summary, table as markdown } from "./stats.js"

export interface DrainOptions {
  readonly messages: number
  readonly rounds: number
  readonly batchSize: number
  /** Drained once first on a database of its own, not measured (JIT warm-up), unless 0. */
  readonly warmupMessages: number
}

/** What the claim's row lookup read, from one probe. */
export interface Probe {
  /** Messages handled when the probe was asked for. */
  readonly handled: number
  /** Shared buffers hit + read by the lookup from the worker's floor (planning not included). */
  readonly buffers: number
  readonly ms: number
  /** The same from the start of the index, as the worker's claim every second and after a short one. */
  readonly fromStartBuffers: number
  readonly fromStartMs: number
  /** Rows the lookup returned. */
  readonly rows: number
  /** The index it scanned. */
  readonly index: string
}

export interface Storage {
  /** `pg_relation_size` of the table (its main fork). */
  readonly tableBytes: number
  /** `pg_indexes_size` of the table. */
  readonly indexBytes: number
  readonly liveTuples: number
  readonly deadTuples: number
  readonly autovacuums: number
  readonly autoanalyzes: number
  /** An autovacuum of the table was under way when the figures were read. */
  readonly autovacuumRunning: boolean
}

export interface DrainRound {
  readonly seedSeconds: number
  readonly drainSeconds: number
  /** msg/s over each tenth of the messages, in order (the first: from the first handler call). */
  readonly tenths: ReadonlyArray<number>
  readonly startProbes: ReadonlyArray<Probe>
  readonly endProbes: ReadonlyArray<Probe>
  /**
   * Buffers per claim (shared hit + read of the claim function's call, every statement inside it included) over the
   * first and the last 10 % of the messages, from `pg_stat_statements`; undefined where the server does not load it.
   */
  readonly claimBuffers: { readonly first: number; readonly last: number } | undefined
  /** Messages handled when an autovacuum of the table was seen running (looked for every second of the drain). */
  readonly autovacuumSeenAt: ReadonlyArray<number>
  readonly before: Storage
  readonly after: Storage
  readonly vacuumed: Storage
  readonly vacuumSeconds: number
  readonly compacted: Storage
  readonly compactSeconds: number
}

export interface DrainResult {
  readonly messages: number
  readonly batchSize: number
  readonly warmupMessages: number
  readonly rounds: ReadonlyArray<DrainRound>
  readonly first: Summary
  readonly last: Summary
  /** Per round: last-10 % rate ÷ first-10 % rate. */
  readonly rateRatio: Summary
  readonly buffersStart: Summary
  readonly buffersEnd: Summary
  /** Per round: median end buffers ÷ median start buffers. */
  readonly buffersRatio: Summary
  /** The worker's claims (`pg_stat_statements`): buffers per claim over the first and the last 10 %; NaN without. */
  readonly claimBuffersFirst: Summary
  readonly claimBuffersLast: Summary
  readonly claimBuffersRatio: Summary
  readonly msStart: Summary
  readonly msEnd: Summary
  /** The lookup from the start of the index (a claim every second, and after a short one). */
  readonly fromStartBuffersStart: Summary
  readonly fromStartBuffersEnd: Summary
  readonly overall: Summary
}

/** The transport's default lease (30 s), the claim's `lease`. */
const leaseMs = 30_000

/** Where the probes are taken: fractions of the messages handled. */
const startPoints = [0.005, 0.01, 0.015]
const endPoints = [0.89, 0.9, 0.91]

/** A drain round that has not ended after this long fails the run. */
const drainCapMs = 30 * 60_000

/**
 * The row lookup of the claim function's unkeyed path (`unkeyedFillAndNextDueV11` in
 * src/layers/pg/sql/claimFunctionV11.ts, copied: the claim runs it inside the function), with the function's arguments
 * as parameters: $1 queue, $2 lease in ms, $3 the rows to take, $4 the floor (the session's, in PgSession.ts). Without
 * the claim's `FOR UPDATE SKIP LOCKED`: the probe must not lock the rows the worker is about to claim — its claims
 * would skip them, and near the end of a small drain a claim could find only those, come back empty and stop the
 * worker (`stopWhenEmpty`) with them left. The lock reads no index page the scan did not (it marks the rows it
 * returns, whose heap pages the scan has just read).
 */
export const lookupSql = `SELECT ready.id FROM "${table}" AS ready
      WHERE ready.queue_name = $1 AND ready.ordering_key IS NULL
        AND ready.available_at >= $4::timestamptz AND ready.available_at <= now()
        AND (ready.delivered_at IS NULL OR ready.delivered_at < now() - $2::float8 * interval '1 millisecond'
          OR ready.delivered_at = 'infinity')
      ORDER BY ready.available_at, ready.id
      LIMIT $3`

interface PlanNode {
  readonly "Shared Hit Blocks"?: number
  readonly "Shared Read Blocks"?: number
  readonly "Actual Rows"?: number
  readonly "Index Name"?: string
  readonly Plans?: ReadonlyArray<PlanNode>
}

const indexOf = (node: PlanNode): string | undefined =>
  node["Index Name"] ?? node.Plans?.map(indexOf).find((name) => name !== undefined)

/**
 * The worker's floor as its session computes it, read from the rows in flight: a second below the oldest leased
 * row (its last claims' rows are leased; a little lower than the session's own floor, if anything).
 */
const floorSql = `SELECT coalesce(min(available_at) - interval '1 second', '-infinity') AS floor FROM "${table}"
  WHERE queue_name = $1 AND ordering_key IS NULL AND delivered_at IS NOT NULL`

/** The lookup from `floor` under `EXPLAIN (ANALYZE, BUFFERS)`. */
const explain = async (client: pg.Client, batchSize: number, floor: string) => {
  const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode; "Execution Time": number }> }>(
    `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${lookupSql}`,
    [queue, leaseMs, batchSize, floor]
  )
  const explained = rows[0]!["QUERY PLAN"][0]!
  const plan = explained.Plan
  return {
    buffers: (plan["Shared Hit Blocks"] ?? 0) + (plan["Shared Read Blocks"] ?? 0),
    ms: explained["Execution Time"],
    rows: plan["Actual Rows"] ?? 0,
    index: indexOf(plan) ?? "none (sequential scan)"
  }
}

/** One probe: the lookup from the worker's floor, then from the start. */
const probe = async (client: pg.Client, batchSize: number, handled: number): Promise<Probe> => {
  const { rows } = await client.query<{ floor: string }>({ text: floorSql, values: [queue], types: textTypes })
  const fromFloor = await explain(client, batchSize, rows[0]!.floor)
  const fromStart = await explain(client, batchSize, "-infinity")
  return { handled, ...fromFloor, fromStartBuffers: fromStart.buffers, fromStartMs: fromStart.ms }
}

/** Timestamps read back as text, passed on as they came. */
const textTypes = { getTypeParser: () => (value: string) => value }

/** An autovacuum worker's progress row for the table `relid`. */
const autovacuumOf = (relid: string) =>
  `SELECT 1 FROM pg_stat_progress_vacuum p JOIN pg_stat_activity a ON a.pid = p.pid
   WHERE p.relid = ${relid} AND a.backend_type = 'autovacuum worker'`

/** The table's sizes and its cumulative statistics (read fresh, not from a cached snapshot). */
const storage = (url: string): Promise<Storage> =>
  withClient(url, async (client) => {
    await client.query("SET stats_fetch_consistency = none").catch(() => undefined) // PostgreSQL 15+
    const { rows } = await client.query<{
      table_bytes: string
      index_bytes: string
      live: string | null
      dead: string | null
      autovacuums: string | null
      autoanalyzes: string | null
      autovacuum_running: boolean
    }>(
      `SELECT pg_relation_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS index_bytes,
         s.n_live_tup AS live, s.n_dead_tup AS dead, s.autovacuum_count AS autovacuums,
         s.autoanalyze_count AS autoanalyzes,
         EXISTS (${autovacuumOf("c.oid")}) AS autovacuum_running
       FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
       WHERE c.oid = $1::regclass`,
      [`"${table}"`]
    )
    const r = rows[0]!
    return {
      tableBytes: Number(r.table_bytes),
      indexBytes: Number(r.index_bytes),
      liveTuples: Number(r.live ?? 0),
      deadTuples: Number(r.dead ?? 0),
      autovacuums: Number(r.autovacuums ?? 0),
      autoanalyzes: Number(r.autoanalyzes ?? 0),
      autovacuumRunning: r.autovacuum_running
    }
  })

/**
 * The worker's claims as `pg_stat_statements` counts them: the calls of the claim function, and the shared buffers
 * they hit or read (a top-level statement's include those of every statement inside the function).
 */
export interface ClaimCounts {
  readonly calls: number
  readonly buffers: number
}

/**
 * Has the database's sessions counted by `pg_stat_statements` (top-level statements; sessions opened from now on),
 * when the server loads it (the embedded cluster does, counting nothing elsewhere: bench/cluster.ts). Whether it
 * does.
 */
const countClaims = (url: string): Promise<boolean> =>
  withClient(url, async (client) => {
    try {
      await client.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
      await client.query(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET pg_stat_statements.track = 'top'`)
      await client.query("SELECT 1 FROM pg_stat_statements LIMIT 1")
      return true
    } catch {
      return false
    }
  })

/** The claims counted so far on this database (by the claim function's name in the statement). */
const claimCountsSql = `SELECT coalesce(sum(calls), 0)::float8 AS calls,
    coalesce(sum(shared_blks_hit + shared_blks_read), 0)::float8 AS buffers
  FROM pg_stat_statements
  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND query LIKE '%' || $1 || '(%'`

/** The probes of a run, and the looks for an autovacuum, taken one after the other on one connection of their own. */
const prober = async (url: string, batchSize: number) => {
  const client = new pg.Client({ connectionString: url })
  client.on("error", () => {})
  await client.connect()
  let pending: Promise<unknown> = Promise.resolve()
  const failures: Array<unknown> = []
  return {
    take: (handled: number, into: Array<Probe>) => {
      pending = pending.then(() => probe(client, batchSize, handled).then((p) => into.push(p), (e) => failures.push(e)))
    },
    /** The claims counted so far, once the probes and looks asked for before have run. */
    counts: (into: Array<ClaimCounts>) => {
      pending = pending.then(() =>
        client.query<ClaimCounts>(claimCountsSql, [`"${table}_claim"`]).then(
          (r) => into.push({ calls: Number(r.rows[0]!.calls), buffers: Number(r.rows[0]!.buffers) }),
          (e) => failures.push(e)
        )
      )
    },
    /** Whether an autovacuum of the table is running now. */
    look: (seen: () => void) => {
      pending = pending.then(() =>
        client.query(`${autovacuumOf(`'"${table}"'::regclass`)}`).then(
          (r) => (r.rows.length > 0 ? seen() : undefined),
          (e) => failures.push(e)
        )
      )
    },
    close: async () => {
      await pending
      await client.end()
      if (failures.length > 0) throw failures[0]
    }
  }
}

const median = (values: ReadonlyArray<number>) => summarize(values).median

/** One round on a fresh database. */
export const round = async (url: string, options: DrainOptions): Promise<DrainRound> => {
  const n = options.messages
  await Ours.setup(url)
  const seedStarted = performance.now()
  await Ours.seed(url, 1, n)
  const seedSeconds = (performance.now() - seedStarted) / 1000
  const before = await storage(url)
  const counting = await countClaims(url)

  const probes = await prober(url, options.batchSize)
  // The claims counted at the drain's start, at 10 % and at 90 % of the messages handled, and at its end.
  const counts: Array<ClaimCounts> = []
  const countAt = new Set(counting ? [0.1, 0.9].map((f) => Math.max(1, Math.round(f * n))) : [])
  if (counting) probes.counts(counts)
  const startProbes: Array<Probe> = []
  const endProbes: Array<Probe> = []
  const probeAt = new Map<number, Array<Probe>>([
    ...startPoints.map((f) => [Math.max(1, Math.round(f * n)), startProbes] as const),
    ...endPoints.map((f) => [Math.max(1, Math.round(f * n)), endProbes] as const)
  ])
  // The times at which the 1st, the n/10-th, …, the n-th message's handler ran.
  const marks = Array.from({ length: 11 }, (_, k) => (k === 0 ? 1 : Math.round((k * n) / 10)))
  const marked = new Set(marks)
  const times = new Map<number, number>()
  let handled = 0
  const autovacuumSeenAt: Array<number> = []
  const looking = setInterval(() => probes.look(() => autovacuumSeenAt.push(handled)), 1_000)
  const drainStarted = performance.now()
  let result: { readonly handled: number; readonly capped: boolean }
  try {
    result = await Ours.consume(url, {
      batchSize: options.batchSize,
      capMs: drainCapMs,
      onHandled: () => {
        handled++
        if (marked.has(handled)) times.set(handled, performance.now())
        if (countAt.has(handled)) probes.counts(counts)
        const into = probeAt.get(handled)
        if (into !== undefined) probes.take(handled, into)
      }
    })
    if (counting) probes.counts(counts)
  } finally {
    clearInterval(looking)
    await probes.close()
  }
  const drainSeconds = (performance.now() - drainStarted) / 1000
  if (result.capped || result.handled !== n) {
    throw new Error(`drain: handled ${result.handled} of ${n}${result.capped ? ` (capped at ${drainCapMs} ms)` : ""}`)
  }
  const tenths = marks.slice(1).map((m, k) => (m - marks[k]!) / ((times.get(m)! - times.get(marks[k]!)!) / 1000))

  await sleep(1_000) // the worker's sessions have ended: their statistics are flushed
  const after = await storage(url)
  const vacuumStarted = performance.now()
  await withClient(url, (client) => client.query(`VACUUM "${table}"`))
  const vacuumSeconds = (performance.now() - vacuumStarted) / 1000
  const vacuumed = await storage(url)
  const compactStarted = performance.now()
  await Effect.runPromise(
    PgCompaction.compactIndexes({ table }).pipe(Effect.provide(Ours.stack(url, { maxConnections: 2 })))
  )
  const compactSeconds = (performance.now() - compactStarted) / 1000
  const compacted = await storage(url)
  const perClaim = (from: ClaimCounts, to: ClaimCounts) => (to.buffers - from.buffers) / (to.calls - from.calls)
  const claimBuffers = counts.length === 4
    ? { first: perClaim(counts[0]!, counts[1]!), last: perClaim(counts[2]!, counts[3]!) }
    : undefined
  const figures = { seedSeconds, drainSeconds, tenths, startProbes, endProbes, claimBuffers, autovacuumSeenAt }
  return { ...figures, before, after, vacuumed, vacuumSeconds, compacted, compactSeconds }
}

const bytes = (n: number) => (n < 1024 * 1024 ? `${Math.round(n / 1024)} kB` : mb(n))

/** Runs the rounds, each on a fresh database of the cluster. */
export const run = async (
  adminUrl: string,
  options: DrainOptions,
  log: (line: string) => void
): Promise<DrainResult> => {
  if (options.warmupMessages > 0) {
    log(`drain: warm-up (${options.warmupMessages} messages, settled, not measured)`)
    const db = await freshDatabase(adminUrl, "ours_drain_warmup")
    try {
      await Ours.setup(db.url)
      await Ours.seed(db.url, 1, options.warmupMessages)
      // With statistics: on a never-analyzed table this small, the claim's cached ack DELETE goes slow (generic plan)
      await settle(db.url)
      await withDeadline(Ours.consume(db.url, { batchSize: options.batchSize, capMs: 600_000 }), 660_000, "warm-up")
    } finally {
      await db.drop()
    }
  }
  const rounds: Array<DrainRound> = []
  for (let i = 0; i < options.rounds; i++) {
    const db = await freshDatabase(adminUrl, "ours_drain")
    try {
      log(`drain round ${i + 1}/${options.rounds}: seeding ${options.messages} messages`)
      const r = await withDeadline(round(db.url, options), drainCapMs + 30 * 60_000, "drain round")
      rounds.push(r)
      const ps = (list: ReadonlyArray<Probe>) =>
        list.map((p) =>
          `${p.buffers} buffers/${
            p.ms.toFixed(1)
          } ms/${p.rows} rows (from the start ${p.fromStartBuffers}) at ${p.handled}`
        ).join(", ")
      log(
        `drain round ${i + 1}/${options.rounds}: seeded in ${r.seedSeconds.toFixed(1)} s, drained in ${
          r.drainSeconds.toFixed(1)
        } s; msg/s per tenth ${r.tenths.map(rate).join(" | ")}`
      )
      log(
        `  claims (pg_stat_statements): ${
          r.claimBuffers === undefined
            ? "not counted (the server does not load pg_stat_statements)"
            : `${r.claimBuffers.first.toFixed(0)} buffers per claim over the first 10 %, ${
              r.claimBuffers.last.toFixed(0)
            } over the last 10 %`
        }`
      )
      log(`  probes at the start: ${ps(r.startProbes)}; index ${r.startProbes[0]?.index ?? "?"}`)
      log(`  probes near the end: ${ps(r.endProbes)}; index ${r.endProbes[0]?.index ?? "?"}`)
      log(`  autovacuum seen running during the drain: ${seenDuring(r, options.messages)}`)
      const stages = [["before", r.before], ["after", r.after], ["vacuumed", r.vacuumed], [
        "compacted",
        r.compacted
      ]] as const
      for (const [what, s] of stages) {
        log(
          `  ${what.padEnd(9)} table ${bytes(s.tableBytes)}, indexes ${bytes(s.indexBytes)}, live ${s.liveTuples}, ` +
            `dead ${s.deadTuples}, autovacuum ${s.autovacuums}, autoanalyze ${s.autoanalyzes}${
              s.autovacuumRunning ? ", an autovacuum running" : ""
            }`
        )
      }
    } finally {
      await db.drop()
    }
  }
  const of = (f: (r: DrainRound) => number) => summarize(rounds.map(f))
  const bufferMedian = (list: ReadonlyArray<Probe>) => median(list.map((p) => p.buffers))
  const counted = rounds.flatMap((r) => (r.claimBuffers === undefined ? [] : [r.claimBuffers]))
  return {
    messages: options.messages,
    batchSize: options.batchSize,
    warmupMessages: options.warmupMessages,
    rounds,
    first: of((r) => r.tenths[0]!),
    last: of((r) => r.tenths[9]!),
    rateRatio: of((r) => r.tenths[9]! / r.tenths[0]!),
    buffersStart: of((r) => bufferMedian(r.startProbes)),
    buffersEnd: of((r) => bufferMedian(r.endProbes)),
    buffersRatio: of((r) => bufferMedian(r.endProbes) / bufferMedian(r.startProbes)),
    claimBuffersFirst: summarize(counted.map((c) => c.first)),
    claimBuffersLast: summarize(counted.map((c) => c.last)),
    claimBuffersRatio: summarize(counted.map((c) => c.last / c.first)),
    msStart: of((r) => median(r.startProbes.map((p) => p.ms))),
    msEnd: of((r) => median(r.endProbes.map((p) => p.ms))),
    fromStartBuffersStart: of((r) => median(r.startProbes.map((p) => p.fromStartBuffers))),
    fromStartBuffersEnd: of((r) => median(r.endProbes.map((p) => p.fromStartBuffers))),
    overall: of((r) => options.messages / r.drainSeconds)
  }
}

// ---------------------------------------------------------------------------------------------------
// Report

const count = (n: number) => n.toLocaleString("en-US")

/** 1 000 000 → "1 M", 20 000 → "20,000". */
const size = (n: number) => (n % 1_000_000 === 0 ? `${n / 1_000_000} M` : count(n))

const spread = (s: Summary, f: (n: number) => string) => (s.rounds <= 1 ? "" : `${f(s.min)} – ${f(s.max)}`)

const fixed = (digits: number) => (n: number) => (Number.isFinite(n) ? n.toFixed(digits) : "–")

const percent = (f: number) => `${Number((f * 100).toFixed(1))} %`

/** "no", or between which shares of the messages handled an autovacuum of the table was seen running. */
const seenDuring = (r: DrainRound, messages: number) =>
  r.autovacuumSeenAt.length === 0
    ? "no"
    : `at ${percent(r.autovacuumSeenAt[0]! / messages)}–${
      percent(r.autovacuumSeenAt[r.autovacuumSeenAt.length - 1]! / messages)
    } handled`

/** The section of BENCHMARKS.md's results. */
export const section = (d: DrainResult): string => {
  const rs = d.rounds.length
  const figures: Array<[string, Summary, (n: number) => string]> = [
    ["msg/s over the first 10 % of the messages", d.first, rate],
    ["msg/s over the last 10 %", d.last, rate],
    ["last 10 % ÷ first 10 %", d.rateRatio, fixed(3)],
    ["msg/s over the whole drain (worker start → stop)", d.overall, rate],
    ["buffers per claim over the first 10 % (the worker's claims)", d.claimBuffersFirst, fixed(0)],
    ["buffers per claim over the last 10 %", d.claimBuffersLast, fixed(0)],
    ["last 10 % ÷ first 10 %", d.claimBuffersRatio, fixed(2)],
    [`claim lookup near the start (${startPoints.map(percent).join(", ")}): buffers`, d.buffersStart, fixed(0)],
    [`claim lookup near the end (${endPoints.map(percent).join(", ")}): buffers`, d.buffersEnd, fixed(0)],
    ["buffers near the end ÷ near the start", d.buffersRatio, fixed(2)],
    ["claim lookup near the start: execution time (ms)", d.msStart, fixed(2)],
    ["claim lookup near the end: execution time (ms)", d.msEnd, fixed(2)],
    ["the same lookup from the start of the index, near the start: buffers", d.fromStartBuffersStart, fixed(0)],
    ["the same from the start, near the end: buffers", d.fromStartBuffersEnd, fixed(0)]
  ]
  const figuresTable = markdown(
    ["figure", "median", "min – max"],
    figures.map(([name, s, f]) => [name, f(s.median), spread(s, f)]),
    ["l", "r", "r"]
  )
  const stage = (name: string, f: (r: DrainRound) => Storage, extra: (r: DrainRound) => number | undefined) => {
    const m = (g: (s: Storage) => number) => summarize(d.rounds.map((r) => g(f(r)))).median
    const e = summarize(d.rounds.map((r) => extra(r) ?? Number.NaN)).median
    return [
      name,
      bytes(m((s) => s.tableBytes)),
      bytes(m((s) => s.indexBytes)),
      count(Math.round(m((s) => s.liveTuples))),
      count(Math.round(m((s) => s.deadTuples))),
      d.rounds.map((r) => f(r).autovacuums).join(", "),
      d.rounds.map((r) => f(r).autoanalyzes).join(", "),
      Number.isFinite(e) ? e.toFixed(1) : ""
    ]
  }
  const storageTable = markdown(
    [
      "when",
      "table",
      "indexes",
      "n_live_tup",
      "n_dead_tup",
      "autovacuum_count (per round)",
      "autoanalyze_count (per round)",
      "took (s)"
    ],
    [
      stage("after seeding, before the drain", (r) => r.before, (r) => r.seedSeconds),
      stage("right after the drain", (r) => r.after, (r) => r.drainSeconds),
      stage("after a plain VACUUM", (r) => r.vacuumed, (r) => r.vacuumSeconds),
      stage("after `outbox storage:compact`", (r) => r.compacted, (r) => r.compactSeconds)
    ],
    ["l", "r", "r", "r", "r", "r", "r", "r"]
  )
  const tenthsTable = markdown(
    ["handled", ...Array.from({ length: 10 }, (_, k) => `${k * 10}–${k * 10 + 10} %`)],
    [["msg/s", ...Array.from({ length: 10 }, (_, k) => rate(median(d.rounds.map((r) => r.tenths[k]!))))]],
    ["l", ...Array.from({ length: 10 }, () => "r" as const)]
  )
  const seen = d.rounds.map((r, i) => `round ${i + 1}: ${seenDuring(r, d.messages)}`).join("; ")
  const running = d.rounds.filter((r) => r.after.autovacuumRunning).length
  return `### Drain\n\n${
    count(d.messages)
  } messages inserted in the shape \`Outbox.dispatch\` writes, then no VACUUM, ` +
    `ANALYZE or CHECKPOINT (autovacuum at the server's settings; its runs are counted), drained by one worker: ` +
    `\`Worker.run\` batchSize ${d.batchSize}, default concurrency, no-op handler, \`stopWhenEmpty\`; ${rs} round${
      rs > 1 ? "s" : ""
    }, each on a fresh database, medians of the rounds. The rates run from the first handler call${
      d.warmupMessages > 0 ? ` (after a drain of ${count(d.warmupMessages)} messages, not measured: JIT warm-up)` : ""
    }; buffers per claim are the shared buffers hit or read by the worker's claim calls (every statement inside the ` +
    `claim function: acks, lookup, lease), ÷ the calls, over the first and the last 10 % of the messages, as ` +
    `\`pg_stat_statements\` counts them${
      d.claimBuffersRatio.rounds === 0 ? " (not counted in this run: the server does not load it)" : ""
    }; the claim lookup ` +
    `is the unkeyed claim's \`SELECT … ORDER BY available_at, id LIMIT ${d.batchSize}\` (without its row locks, ` +
    `which would hide the rows from the worker) under \`EXPLAIN (ANALYZE, BUFFERS)\` from a connection of its own, ` +
    `while the worker runs (shared ` +
    `buffers hit + read, median of three probes), from the worker's floor as its session sets it while claims come ` +
    `back full (a second below the oldest row in flight), and again from the start of the index, as the session's ` +
    `claim once a second and after a short claim reads it.\n\n` +
    figuresTable +
    "\n\nTable and indexes (`pg_relation_size`, `pg_indexes_size`; `pg_stat_user_tables`). An autovacuum of the " +
    `table seen running during the drain (looked for every second): ${seen}${
      running > 0 ? `; one was under way when the drain ended in ${running} of ${rs} rounds (not counted)` : ""
    }:\n\n` +
    storageTable +
    `\n\nRate per tenth of the messages (median of the rounds):\n\n${tenthsTable}`
}

/** The table's and its indexes' bytes after the drain, a VACUUM and a compaction: the largest of the rounds. */
const compactedBytes = (d: DrainResult) =>
  Math.max(...d.rounds.map((r) => r.compacted.tableBytes + r.compacted.indexBytes))

/**
 * Buffers per claim near the end ÷ at the start: the worker's own claims where `pg_stat_statements` counted them,
 * otherwise the probes' lookups.
 */
const claimBuffersTarget = (d: DrainResult, what: string) => {
  const counted = d.claimBuffersRatio.rounds > 0
  const value = counted ? d.claimBuffersRatio.median : d.buffersRatio.median
  return {
    name: counted
      ? `${what}: buffers per claim over the last 10 % ÷ over the first 10 %`
      : `${what}: buffers per claim lookup near the end ÷ at the start (probes)`,
    value: `${fixed(2)(value)}×`,
    goal: "≤ 2×",
    met: value <= 2
  }
}

/** The rows of the Targets table. */
export const targets = (d: DrainResult) => {
  const what = `${size(d.messages)} drain`
  return [
    {
      name: `${what}: last-10 % rate ÷ first-10 % rate`,
      value: fixed(3)(d.rateRatio.median),
      goal: "≥ 0.90",
      met: d.rateRatio.median >= 0.9
    },
    claimBuffersTarget(d, what),
    {
      name: `${what}: table + indexes after a VACUUM and \`outbox storage:compact\``,
      value: bytes(compactedBytes(d)),
      goal: "≤ 1 MB",
      met: compactedBytes(d) <= 1024 * 1024
    }
  ]
}
