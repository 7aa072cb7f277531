/**
 * The sustained scenario: storage at scale under a steady load. Producers (8 loops, each committing
 * `sql.withTransaction(Outbox.dispatch(new BenchNoop({ n })))` of one message) and one worker (`Worker.run`, batch
 * 500, LISTEN/NOTIFY) run at once, each in a process of its own (bench/sustained-node.ts), on a fresh database per phase:
 *
 * 1. the maximum: the producers unthrottled while the worker consumes; their commit rate is the max sustained rate
 *    (the worker is far faster than the producers: it keeps the queue flat, the queue depth is recorded to show it);
 * 2. 50 % and 90 % of that rate, paced by a token bucket shared by the producers, for minutes.
 *
 * Every `interval` (10 s) a monitoring connection of its own reads the queue depth (`count(*)`), the table's and its
 * indexes' sizes, `n_dead_tup` and the autovacuum count; each message's latency runs from its COMMIT returning in the
 * producer to its handler start in the worker, on the monotonic clock the processes share (as bench/latency.ts).
 * The report (bench/sustained-report.ts) and the chart (bench/sustained-chart.ts) are made from the result.
 */
import { fork } from "node:child_process"
import * as path from "node:path"
import pg from "pg"
import { freshDatabase } from "./cluster.js"
import { root, sleep, table, tsNodeArgs, withDeadline } from "./common.js"
import { monotonicMs } from "./latency-clock.js"
import type { Percentiles } from "./latency.js"
import * as Ours from "./ours.js"
import { rate } from "./stats.js"
import type { FromNode, ToNode } from "./sustained-node.js"

export interface SustainedOptions {
  readonly producers: number
  readonly batchSize: number
  /** The unthrottled run that measures the maximum (after the warm-up), seconds. */
  readonly maxSeconds: number
  /** The paced runs: load (a fraction of the maximum) and duration, in order. */
  readonly loads: ReadonlyArray<{ readonly load: number; readonly seconds: number }>
  /** At the phase's rate before the measured part, not measured (fresh processes: JIT warm-up). */
  readonly warmupSeconds: number
  /** The monitoring interval. */
  readonly intervalSeconds: number
}

/** What the monitoring connection read at one instant. */
export interface Tick {
  /** Seconds since the measured part began. */
  readonly at: number
  /** Rows in the table (`count(*)`): the messages not yet acknowledged. */
  readonly depth: number
  readonly tableBytes: number
  readonly indexBytes: number
  readonly deadTuples: number
  readonly autovacuums: number
  readonly autoanalyzes: number
  readonly autovacuumRunning: boolean
}

/** A window of the measured part: the messages committed in it (latency), committed and handled in it (rates). */
export interface Window {
  readonly from: number
  readonly to: number
  /** Commits per second in the window. */
  readonly produced: number
  /** Handler starts per second in the window. */
  readonly handled: number
  /** Commit → handler start (ms) of the messages committed in the window. */
  readonly latency: Percentiles
  /** The tick at the window's end. */
  readonly end: Tick
}

export interface Phase {
  /** The fraction of the maximum; null: the unthrottled run. */
  readonly load: number | null
  /** Messages per second asked for (Infinity: unthrottled). */
  readonly targetRate: number
  /** Commits per second over the measured part. */
  readonly achievedRate: number
  /** Handler starts per second over the measured part. */
  readonly handledRate: number
  readonly seconds: number
  readonly committed: number
  readonly errors: number
  /** Messages committed that no handler started within a minute of the producers' end. */
  readonly lost: number
  /** From the producers' end to the last handler start (the tail drained). */
  readonly tailSeconds: number
  readonly latency: Percentiles
  /** The smallest latency: below 0 when a handler started before its producer's event loop read the COMMIT's reply. */
  readonly minLatency: number
  readonly ticks: ReadonlyArray<Tick>
  /** Every `intervalSeconds`. */
  readonly intervals: ReadonlyArray<Window>
  /** The report's rows: every 30 s (every interval when the run is under two minutes). */
  readonly rows: ReadonlyArray<Window>
  /** The targets' windows: every 60 s (halves of the run when it is under two minutes). */
  readonly minutes: ReadonlyArray<Window>
}

export interface SustainedResult {
  readonly producers: number
  readonly batchSize: number
  readonly warmupSeconds: number
  readonly intervalSeconds: number
  readonly max: Phase
  readonly phases: ReadonlyArray<Phase>
}

/** A window's length: `preferred` when the run is at least two of them long, else half the run (whole intervals). */
const windowSeconds = (seconds: number, interval: number, preferred: number) =>
  seconds >= 2 * preferred ? preferred : Math.max(interval, Math.floor(seconds / 2 / interval) * interval)

const monitorSql = `SELECT (SELECT count(*) FROM "${table}") AS depth,
    pg_relation_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS index_bytes,
    s.n_dead_tup AS dead, s.autovacuum_count AS autovacuums, s.autoanalyze_count AS autoanalyzes,
    EXISTS (SELECT 1 FROM pg_stat_progress_vacuum p JOIN pg_stat_activity a ON a.pid = p.pid
            WHERE p.relid = c.oid AND a.backend_type = 'autovacuum worker') AS autovacuum_running
  FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
  WHERE c.oid = $1::regclass`

const monitor = async (url: string) => {
  const client = new pg.Client({ connectionString: url, application_name: "sustained-monitor" })
  client.on("error", () => {})
  await client.connect()
  await client.query("SET stats_fetch_consistency = none").catch(() => undefined) // PostgreSQL 15+
  return {
    tick: async (at: number): Promise<Tick> => {
      const { rows } = await client.query<Record<string, string | boolean | null>>(monitorSql, [`"${table}"`])
      const r = rows[0]!
      return {
        at,
        depth: Number(r.depth),
        tableBytes: Number(r.table_bytes),
        indexBytes: Number(r.index_bytes),
        deadTuples: Number(r.dead ?? 0),
        autovacuums: Number(r.autovacuums ?? 0),
        autoanalyzes: Number(r.autoanalyzes ?? 0),
        autovacuumRunning: r.autovacuum_running === true
      }
    },
    close: () => client.end()
  }
}

/** A sustained-node process; `on` gets its messages. */
const node = async (role: "worker" | "producers", url: string, arg: number, on: (m: FromNode) => void) => {
  const child = fork(path.join(root, "bench", "sustained-node.ts"), [role, url, String(arg)], {
    cwd: root,
    execArgv: tsNodeArgs(),
    stdio: ["ignore", "inherit", "inherit", "ipc"]
  })
  let done: (handled: number) => void = () => {}
  let failed: (e: Error) => void = () => {}
  const finished = new Promise<number>((resolve, reject) => {
    done = resolve
    failed = reject
  })
  finished.catch(() => undefined)
  let ready: () => void = () => {}
  const isReady = new Promise<void>((resolve) => (ready = resolve))
  child.on("exit", (code) => failed(new Error(`the sustained ${role} process exited (${code})`)))
  child.on("message", (m: FromNode) => {
    if ("ready" in m) ready()
    else if ("done" in m) done(m.done.handled)
    else on(m)
  })
  await withDeadline(Promise.race([isReady, finished.then(() => undefined)]), 60_000, `the sustained ${role} start`)
  return {
    send: (m: ToNode) => child.send(m),
    stop: async () => {
      child.send({ stop: true })
      try {
        return await withDeadline(finished, 60_000, `the sustained ${role} stop`)
      } finally {
        if (child.exitCode === null) child.kill("SIGKILL")
      }
    },
    kill: () => child.kill("SIGKILL")
  }
}

/** Nearest-rank percentiles, sorting once (runs hold hundreds of thousands of samples). */
const percentiles = (values: ReadonlyArray<number>): Percentiles => {
  const sorted = Float64Array.from(values).sort()
  const at = (p: number) =>
    sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length, Math.max(1, Math.ceil(p * sorted.length))) - 1]!
  return { count: sorted.length, p50: at(0.5), p95: at(0.95), p99: at(0.99), max: at(1) }
}

const sleepUntil = (at: number) => sleep(Math.max(0, at - monotonicMs()))

/** One phase on a fresh database: `targetRate` msg/s (Infinity: unthrottled) for warm-up + `seconds`. */
const phase = async (
  adminUrl: string,
  o: SustainedOptions,
  load: number | null,
  targetRate: number,
  seconds: number,
  log: (line: string) => void
): Promise<Phase> => {
  const db = await freshDatabase(adminUrl, "ours_sustained")
  const commitAt: Array<number> = []
  const startAt: Array<number> = []
  let handledCount = 0
  let lastStart = 0
  let produced: { committed: number; errors: number; firstError?: string } | undefined
  let producedSignal: () => void = () => {}
  const producedPromise = new Promise<void>((resolve) => (producedSignal = resolve))
  const running: Array<{ readonly kill: () => void }> = []
  let mon: Awaited<ReturnType<typeof monitor>> | undefined
  try {
    await Ours.setup(db.url)
    const worker = await node("worker", db.url, o.batchSize, (m) => {
      if (!("starts" in m)) return
      for (let i = 0; i < m.starts.length; i += 2) {
        const n = m.starts[i]!
        if (startAt[n] === undefined) handledCount++
        startAt[n] ??= m.starts[i + 1]!
        lastStart = Math.max(lastStart, m.starts[i + 1]!)
      }
    })
    running.push(worker)
    const producers = await node("producers", db.url, o.producers, (m) => {
      if ("commits" in m) { for (let i = 0; i < m.commits.length; i += 2) commitAt[m.commits[i]!] = m.commits[i + 1]! }
      else if ("produced" in m) {
        produced = m.produced
        producedSignal()
      }
    })
    running.push(producers)
    mon = await monitor(db.url)
    const t0 = monotonicMs() + 500
    const measureStart = t0 + o.warmupSeconds * 1000
    const end = measureStart + seconds * 1000
    producers.send({ produce: { startAt: t0, until: end, rate: targetRate } })
    const interval = o.intervalSeconds * 1000
    const ticks: Array<Tick> = []
    for (let k = 0; k * interval <= seconds * 1000 + 1e-6; k++) {
      await sleepUntil(measureStart + k * interval)
      ticks.push(await mon.tick(k * o.intervalSeconds))
      if (k > 0 && (k * o.intervalSeconds) % 60 === 0) {
        const t = ticks[ticks.length - 1]!
        log(
          `  ${k * o.intervalSeconds} s: handled ${handledCount}, depth ${t.depth}, table+indexes ${
            ((t.tableBytes + t.indexBytes) / 1024 ** 2).toFixed(1)
          } MB, n_dead_tup ${t.deadTuples}, autovacuums ${t.autovacuums}`
        )
      }
    }
    await withDeadline(producedPromise, 120_000, "the sustained producers' end")
    const committed = produced!.committed
    const drained = monotonicMs() + 60_000
    while (handledCount < committed && monotonicMs() < drained) await sleep(50)
    await sleep(200) // the worker's last report
    const tailSeconds = Math.max(0, lastStart - end) / 1000
    await producers.stop()
    await worker.stop()
    running.length = 0
    await mon.close()
    mon = undefined

    // Latencies by commit window; rates by the window a commit or a handler start fell in.
    const latencies: Array<number> = []
    const windowOf = (at: number) => (at - measureStart) / 1000
    let lost = 0
    let inMeasured = 0
    let startsInMeasured = 0
    const samples: Array<{ readonly at: number; readonly ms: number }> = []
    for (let n = 1; n < commitAt.length; n++) {
      const c = commitAt[n]
      if (c === undefined) continue
      const s = startAt[n]
      if (s === undefined) {
        lost++
        continue
      }
      const at = windowOf(c)
      if (at >= 0 && at < seconds) {
        inMeasured++
        latencies.push(s - c)
        samples.push({ at, ms: s - c })
      }
    }
    const starts: Array<number> = []
    for (const s of startAt) {
      if (s === undefined) continue
      const at = windowOf(s)
      if (at >= 0 && at < seconds) {
        startsInMeasured++
        starts.push(at)
      }
    }
    const commits: Array<number> = []
    for (const c of commitAt) if (c !== undefined) commits.push(windowOf(c))
    const windows = (length: number): Array<Window> => {
      const out: Array<Window> = []
      for (let from = 0; from + length <= seconds + 1e-6; from += length) {
        const to = from + length
        const inside = (at: number) => at >= from && at < to
        out.push({
          from,
          to,
          produced: commits.filter(inside).length / length,
          handled: starts.filter(inside).length / length,
          latency: percentiles(samples.filter((x) => inside(x.at)).map((x) => x.ms)),
          end: ticks.find((t) => Math.abs(t.at - to) < 1e-6) ?? ticks[ticks.length - 1]!
        })
      }
      return out
    }
    const result: Phase = {
      load,
      targetRate,
      achievedRate: inMeasured / seconds,
      handledRate: startsInMeasured / seconds,
      seconds,
      committed,
      errors: produced!.errors,
      lost,
      tailSeconds,
      latency: percentiles(latencies),
      minLatency: latencies.reduce((a, b) => Math.min(a, b), Number.POSITIVE_INFINITY),
      ticks,
      intervals: windows(o.intervalSeconds),
      rows: windows(windowSeconds(seconds, o.intervalSeconds, 30)),
      minutes: windows(windowSeconds(seconds, o.intervalSeconds, 60))
    }
    if (produced!.errors > 0) log(`  producers: ${produced!.errors} failed commits, the first: ${produced!.firstError}`)
    if (lost > 0) throw new Error(`sustained: ${lost} committed messages were not handled within 60 s of the end`)
    return result
  } finally {
    for (const r of running) r.kill()
    await mon?.close().catch(() => undefined)
    await db.drop()
  }
}

const describe = (p: Phase) => {
  const last = p.ticks[p.ticks.length - 1]
  return `${rate(p.achievedRate)} msg/s committed (asked ${rate(p.targetRate)}), handled ${
    rate(p.handledRate)
  } msg/s, latency min ${p.minLatency.toFixed(2)} ms p50 ${p.latency.p50.toFixed(2)} ms p99 ${
    p.latency.p99.toFixed(2)
  } ms max ${p.latency.max.toFixed(1)} ms; depth ${p.ticks.map((t) => t.depth).join("/")}${
    last
      ? `; at the end table+indexes ${
        ((last.tableBytes + last.indexBytes) / 1024 ** 2).toFixed(2)
      } MB, autovacuums ${last.autovacuums}`
      : ""
  }`
}

export const run = async (
  adminUrl: string,
  o: SustainedOptions,
  log: (line: string) => void
): Promise<SustainedResult> => {
  log(`sustained: the maximum, producers unthrottled, ${o.warmupSeconds} s warm-up + ${o.maxSeconds} s`)
  const max = await phase(adminUrl, o, null, Number.POSITIVE_INFINITY, o.maxSeconds, log)
  log(`sustained max: ${describe(max)}`)
  const phases: Array<Phase> = []
  for (const { load, seconds } of o.loads) {
    const target = load * max.achievedRate
    log(`sustained: ${Math.round(load * 100)} % of the max, ${rate(target)} msg/s, ${o.warmupSeconds} s + ${seconds} s`)
    const p = await phase(adminUrl, o, load, target, seconds, log)
    phases.push(p)
    log(`sustained ${Math.round(load * 100)} %: ${describe(p)}`)
  }
  return {
    producers: o.producers,
    batchSize: o.batchSize,
    warmupSeconds: o.warmupSeconds,
    intervalSeconds: o.intervalSeconds,
    max,
    phases
  }
}
