/**
 * The sustained scenario's report: its section of BENCHMARKS.md's results and its rows of the Targets table.
 */
import { rate, table as markdown } from "./stats.js"
import type { Phase, SustainedResult, Tick, Window } from "./sustained.js"

const ms = (n: number) => (Number.isFinite(n) ? `${n.toFixed(n < 100 ? 2 : 0)} ms` : "–")

const bytes = (n: number) =>
  !Number.isFinite(n) ? "–" : n < 1024 * 1024 ? `${Math.round(n / 1024)} kB` : `${(n / 1024 ** 2).toFixed(1)} MB`

const count = (n: number) => n.toLocaleString("en-US")

const percent = (load: number | null) => (load === null ? "max" : `${Math.round(load * 100)} %`)

const total = (t: Tick) => t.tableBytes + t.indexBytes

/** The queue depth did not grow over the run: at its end no more than twice its start, plus a second's messages. */
const flat = (p: Phase) =>
  p.ticks.length < 2 || p.ticks[p.ticks.length - 1]!.depth <= 2 * p.ticks[0]!.depth + p.achievedRate

/** The largest table + indexes size the monitoring read. */
export const maxSize = (p: Phase) => Math.max(...p.ticks.map(total))

/**
 * The worst window's p99 ÷ the median of the windows' p99s, and which window. Against the median, not the first
 * window: a start that saturates would otherwise raise the bar every later window is judged by.
 */
export const p99Growth = (
  p: Phase
): { readonly ratio: number; readonly at: Window | undefined; readonly median: number } => {
  if (p.minutes.length < 2) return { ratio: Number.NaN, at: undefined, median: Number.NaN }
  const p99s = p.minutes.map((w) => w.latency.p99).sort((a, b) => a - b)
  const middle = p99s.length / 2
  const median = p99s.length % 2 === 1 ? p99s[Math.floor(middle)]! : (p99s[middle - 1]! + p99s[middle]!) / 2
  let worst: Window | undefined
  for (const w of p.minutes) if (worst === undefined || w.latency.p99 > worst.latency.p99) worst = w
  return { ratio: worst!.latency.p99 / median, at: worst, median }
}

/** The largest size read in the last window ÷ the size read at the end of the first window. */
export const sizeGrowth = (p: Phase): { readonly ratio: number; readonly first: number; readonly last: number } => {
  const first = p.minutes[0]
  const lastWindow = p.minutes[p.minutes.length - 1]
  if (first === undefined || lastWindow === undefined || p.minutes.length < 2) {
    return { ratio: Number.NaN, first: Number.NaN, last: Number.NaN }
  }
  const last = Math.max(...p.ticks.filter((t) => t.at > lastWindow.from && t.at <= lastWindow.to).map(total))
  return { ratio: last / total(first.end), first: total(first.end), last }
}

const windowName = (p: Phase) => {
  const w = p.minutes[0]
  return w === undefined ? "window" : w.to - w.from === 60 ? "minute" : `${w.to - w.from} s window`
}

const runsTable = (r: SustainedResult) =>
  markdown(
    [
      "load",
      "asked msg/s",
      "committed msg/s",
      "handled msg/s",
      "measured",
      "min",
      "p50",
      "p95",
      "p99",
      "max",
      "depth (max)",
      "table + indexes (max)",
      "autovacuums",
      "failed commits"
    ],
    [r.max, ...r.phases].map((p) => [
      percent(p.load),
      Number.isFinite(p.targetRate) ? rate(p.targetRate) : "unthrottled",
      rate(p.achievedRate),
      rate(p.handledRate),
      `${p.seconds} s`,
      ms(p.minLatency),
      ms(p.latency.p50),
      ms(p.latency.p95),
      ms(p.latency.p99),
      ms(p.latency.max),
      count(Math.max(...p.ticks.map((t) => t.depth))),
      bytes(maxSize(p)),
      String(p.ticks[p.ticks.length - 1]?.autovacuums ?? "–"),
      String(p.errors)
    ]),
    ["l", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r"]
  )

const windowsTable = (p: Phase) =>
  markdown(
    [
      "s",
      "committed msg/s",
      "handled msg/s",
      "p50",
      "p99",
      "max",
      "depth",
      "n_dead_tup",
      "table",
      "indexes",
      "autovacuum_count",
      "autovacuum running"
    ],
    p.rows.map((w) => [
      `${w.from}–${w.to}`,
      rate(w.produced),
      rate(w.handled),
      ms(w.latency.p50),
      ms(w.latency.p99),
      ms(w.latency.max),
      count(w.end.depth),
      count(w.end.deadTuples),
      bytes(w.end.tableBytes),
      bytes(w.end.indexBytes),
      String(w.end.autovacuums),
      w.end.autovacuumRunning ? "yes" : ""
    ]),
    ["r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "l"]
  )

/** The section of BENCHMARKS.md's results; `chart`: the chart's path, shown above the tables. */
export const section = (r: SustainedResult, chart?: string): string => {
  const m = r.max
  const depths = m.ticks.map((t) => count(t.depth))
  const perRow = r.phases[0]?.rows[0]
  return `### Sustained load\n\n${chart === undefined ? "" : `![Sustained load chart](${chart})\n\n`}` +
    `${r.producers} producer loops in a process of their own, each on a pool of one connection, each message ` +
    "committed alone as `sql.withTransaction(Outbox.dispatch(new BenchNoop({ n })))`; one worker in a process of its " +
    `own (\`Worker.run\` batchSize ${r.batchSize}, default concurrency, LISTEN/NOTIFY wake-up, a handler noting its ` +
    "start). Each run on a fresh database with fresh processes, " +
    `${r.warmupSeconds} s at its rate first (not measured: JIT warm-up). First the maximum: the producers unthrottled ` +
    `while the worker consumes, ${m.seconds} s: ${rate(m.achievedRate)} commits/s, the worker handling ${
      rate(m.handledRate)
    } msg/s, queue depth ${
      depths.length > 6 ? `${depths.slice(0, 3).join(", ")}, …, ${depths.at(-1)}` : depths.join(", ")
    } ` +
    "every " +
    `${r.intervalSeconds} s: ${
      flat(m)
        ? "the worker keeps the queue flat, so the producers' rate is the maximum sustained rate"
        : "the queue grew, so the worker's rate, not the producers', bounds the maximum (the producers' is used)"
    }. ` +
    "Then runs paced at fractions of it by a token bucket the loops share. Latency: each message's COMMIT returning " +
    "in its producer (the response reaching that connection's `pg` client) to its handler start, on the machine's " +
    "monotonic clock; by the window its commit fell in (below 0 when the handler started before the producer's " +
    "process, its CPU taken, read the reply). Every " +
    `${r.intervalSeconds} s a monitoring connection of its own reads the queue depth (\`count(*)\`), ` +
    "`pg_relation_size`, `pg_indexes_size`, `n_dead_tup` and `autovacuum_count` (`pg_stat_user_tables`, " +
    "autovacuum at the server's settings).\n\n" +
    runsTable(r) +
    r.phases.map((p) =>
      `\n\n${percent(p.load)} of the max (${rate(p.targetRate)} msg/s asked), ${
        perRow ? `every ${p.rows[0]!.to - p.rows[0]!.from} s` : ""
      } (latency of the messages committed in the window; depth, sizes and counts at its end):\n\n` +
      windowsTable(p)
    ).join("")
}

/** The Targets rows: the run at 90 % of the max (the last phase). */
export const targets = (r: SustainedResult) => {
  const p = r.phases.find((x) => x.load === 0.9) ?? r.phases[r.phases.length - 1]
  if (p === undefined) return []
  const long = p.seconds >= 300
  const what = `sustained: ${percent(p.load)} of max (${rate(p.achievedRate)} msg/s) for ${p.seconds} s${
    long ? "" : " (under 5 min: not judged)"
  }`
  const unit = windowName(p)
  const growth = p99Growth(p)
  const size = sizeGrowth(p)
  return [
    {
      name: `${what}: worst ${unit}'s p99 ÷ the median ${unit}'s`,
      value: `${Number.isFinite(growth.ratio) ? growth.ratio.toFixed(2) : "–"}× (${
        ms(growth.at?.latency.p99 ?? NaN)
      } vs ${ms(growth.median)})`,
      goal: "≤ 2× for ≥ 5 min",
      met: long ? growth.ratio <= 2 : undefined
    },
    {
      name: `${what}: table + indexes, max (its largest in the last ${unit} ÷ at the end of the first)`,
      value: `${bytes(maxSize(p))} (${Number.isFinite(size.ratio) ? size.ratio.toFixed(2) : "–"}×)`,
      goal: "bounded: ≤ 2×",
      met: long ? size.ratio <= 2 : undefined
    }
  ]
}
