/**
 * `npm run bench:smoke`: the benchmark's smoke mode, so that the benchmark cannot rot. Runs
 * `bench/main.ts --quick --no-write --json` on the library as it ships (the compiled dist/, through
 * bench/compiled-library.mjs; `npm run bench:smoke` builds it first) and checks its output: every contender
 * runs and prints a positive figure (the ordering-keys burn-down: every contender over every key count; the drain: its
 * rates and claim probes; the sustained load: its maximum, both paced runs and their windows), the raw-SQL contender still runs the transport's own statements, and the tables name every
 * contender. It never rewrites BENCHMARKS.md (`--no-write`). Then a small run of
 * `bench/observability.ts` (every configuration prints a positive rate).
 *
 * The benchmark starts its own embedded PostgreSQL, unless DATABASE_URL names a server (a role that may create
 * databases). Exits 0 when every check passed, 1 otherwise.
 */
import { spawn } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const timeoutMs = 10 * 60_000

interface Figure {
  readonly median: number
  readonly rounds: number
}

interface Percentiles {
  readonly count: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
}

interface BenchJson {
  readonly statementsMatch: boolean
  readonly shapeOk: boolean
  readonly burnDown: ReadonlyArray<{ readonly id: string; readonly label: string; readonly rates: Figure }>
  readonly ordered: ReadonlyArray<
    { readonly id: string; readonly label: string; readonly keys: number | null; readonly rates: Figure }
  >
  readonly dispatch: ReadonlyArray<
    { readonly id: string; readonly label: string; readonly with: Figure; readonly without: Figure }
  >
  readonly memory: ReadonlyArray<{ readonly id: string; readonly rssFirst: Figure; readonly rssTotal: Figure }>
  readonly latency: ReadonlyArray<
    { readonly id: string; readonly label: string; readonly ms: Percentiles; readonly startup: Percentiles }
  >
  readonly delayed: { readonly delayMs: number; readonly ms: Percentiles }
  readonly recovery: { readonly leaseMs: number; readonly rounds: ReadonlyArray<number>; readonly summary: Figure }
  readonly drain: {
    readonly messages: number
    readonly rounds: ReadonlyArray<
      { readonly tenths: ReadonlyArray<number>; readonly startProbes: ReadonlyArray<unknown> }
    >
    readonly first: Figure
    readonly last: Figure
    readonly buffersStart: Figure
    readonly buffersEnd: Figure
    readonly claimBuffersFirst: Figure
    readonly claimBuffersLast: Figure
  }
  readonly sustained: {
    readonly max: SustainedPhase
    readonly phases: ReadonlyArray<SustainedPhase>
  }
  readonly mariadb: {
    readonly ours: { readonly median: number }
    readonly raw: { readonly median: number }
    readonly latency: ReadonlyArray<{ readonly label: string; readonly ms: Percentiles }>
  }
  readonly targets: ReadonlyArray<{ readonly name: string }>
}

interface SustainedPhase {
  readonly load: number | null
  readonly achievedRate: number
  readonly handledRate: number
  readonly lost: number
  readonly latency: Percentiles
  readonly ticks: ReadonlyArray<{ readonly tableBytes: number }>
  readonly intervals: ReadonlyArray<{ readonly handled: number }>
}

/** The arguments that run a benchmark program on the compiled library. */
const benchArgs = (program: string, args: ReadonlyArray<string>) => [
  "--import",
  "tsx",
  "--import",
  path.join(root, "bench", "compiled-library.mjs"),
  path.join(root, "bench", program),
  ...args
]

const runQuick = () =>
  new Promise<{ readonly code: number | null; readonly signal: string | null; readonly stdout: string }>(
    (resolve, reject) => {
      const child = spawn(
        process.execPath,
        benchArgs("main.ts", ["--quick", "--no-write", "--json"]),
        { cwd: root, env: process.env, stdio: ["ignore", "pipe", "inherit"] }
      )
      const timer = setTimeout(() => {
        process.stderr.write(`bench:smoke: no result after ${timeoutMs / 1000} s, stopping the benchmark\n`)
        child.kill("SIGTERM")
      }, timeoutMs)
      let stdout = ""
      let shown = 0
      // Shown line by line as it comes (the tables), but for the one long JSON line.
      const show = (upTo: number) => {
        for (const l of stdout.slice(shown, upTo).split(/(?<=\n)/)) {
          if (l !== "") process.stdout.write(l.startsWith("BENCH_JSON ") ? "BENCH_JSON {…}\n" : l)
        }
        shown = Math.max(shown, upTo)
      }
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        stdout += chunk
        show(stdout.lastIndexOf("\n") + 1)
      })
      child.stdout.on("end", () => show(stdout.length))
      child.on("error", (error) => {
        clearTimeout(timer)
        reject(error)
      })
      child.on("close", (code, signal) => {
        clearTimeout(timer)
        resolve({ code, signal, stdout })
      })
    }
  )

let passed = 0
const failures: Array<string> = []
const check = (ok: boolean, what: string) => {
  if (ok) passed++
  else failures.push(what)
}
const sameIds = (actual: ReadonlyArray<{ readonly id: string }>, expected: ReadonlyArray<string>, what: string) => {
  const ids = actual.map((r) => r.id).sort()
  check(
    JSON.stringify(ids) === JSON.stringify([...expected].sort()),
    `${what}: contenders ${JSON.stringify(ids)}, expected ${JSON.stringify([...expected].sort())}`
  )
}

const checkResult = (result: BenchJson, stdout: string) => {
  check(result.statementsMatch === true, "raw-SQL contender: its statements no longer match the transport's")
  check(result.shapeOk === true, "raw-SQL contender: the shape check failed")

  sameIds(
    result.burnDown,
    ["graphile-default", "graphile-fast", "ours-1", "ours-50", "ours-500", "pgboss", "raw"],
    "burn-down"
  )
  for (const r of result.burnDown) check(r.rates.median > 0, `burn-down ${r.id}: rate ${r.rates.median}, expected > 0`)

  // Without keys and over the quick run's key counts (10 and 1 000).
  const keyCounts = [null, 10, 1000]
  for (const id of ["graphile", "ours", "pgboss"]) {
    const runs = result.ordered.filter((r) => r.id === id)
    check(
      JSON.stringify(runs.map((r) => r.keys)) === JSON.stringify(keyCounts),
      `ordered ${id}: key counts ${JSON.stringify(runs.map((r) => r.keys))}, expected ${JSON.stringify(keyCounts)}`
    )
  }
  check(result.ordered.length === 9, `ordered: ${result.ordered.length} runs, expected 9`)
  for (const r of result.ordered) {
    check(r.rates.median > 0, `ordered ${r.id} over ${r.keys ?? "no"} keys: rate ${r.rates.median}, expected > 0`)
  }

  sameIds(
    result.dispatch,
    ["bare-insert", "graphile", "graphile-keyed", "ours", "ours-keyed", "ours-worker", "pgboss", "pgboss-keyed"],
    "dispatch"
  )
  for (const r of result.dispatch) {
    check(r.with.median > 0, `dispatch ${r.id}: with ${r.with.median}, expected > 0`)
    check(r.without.median > 0, `dispatch ${r.id}: without ${r.without.median}, expected > 0`)
  }

  sameIds(result.memory, ["graphile-fast", "ours", "ours-semi-space-16"], "memory")
  for (const r of result.memory) {
    check(r.rssFirst.median > 0, `memory ${r.id}: first RSS ${r.rssFirst.median}, expected > 0`)
    check(r.rssTotal.median > 0, `memory ${r.id}: total RSS ${r.rssTotal.median}, expected > 0`)
  }

  // The producer in the worker's process, and in a process of its own.
  sameIds(result.latency, ["graphile-default", "graphile-default-own-process", "ours", "ours-own-process"], "latency")
  for (const r of result.latency) {
    check(r.ms.count > 0, `latency ${r.id}: ${r.ms.count} samples, expected > 0`)
    check(r.ms.p50 > 0, `latency ${r.id}: p50 ${r.ms.p50}, expected > 0`)
    check(r.ms.p50 <= r.ms.p99, `latency ${r.id}: p50 ${r.ms.p50} > p99 ${r.ms.p99}`)
    check(r.ms.p99 <= r.ms.max, `latency ${r.id}: p99 ${r.ms.p99} > max ${r.ms.max}`)
    // The warm-up is measured too, apart (the start-up tail).
    check(r.startup.count > 0, `latency ${r.id}: ${r.startup.count} start-up samples, expected > 0`)
    check(r.startup.p99 <= r.startup.max, `latency ${r.id}: start-up p99 ${r.startup.p99} > max ${r.startup.max}`)
  }

  // Delayed messages are handled after they are due (database clock), not before.
  check(result.delayed.ms.count > 0, `delayed: ${result.delayed.ms.count} samples, expected > 0`)
  check(result.delayed.ms.p50 >= 0, `delayed: p50 ${result.delayed.ms.p50}, expected >= 0 (handled before due)`)
  check(Number.isFinite(result.delayed.ms.max), `delayed: max ${result.delayed.ms.max}, expected a finite number`)

  // A killed worker's messages come back no earlier than a lease fraction and within a bounded time.
  check(result.recovery.rounds.length > 0, "recovery: no round")
  for (const ms of result.recovery.rounds) {
    check(ms > 0, `recovery: redelivered after ${ms} ms, expected > 0`)
    check(ms < result.recovery.leaseMs * 5, `recovery: redelivered after ${ms} ms, expected < 5 leases`)
  }

  // The drain: one round, every tenth's rate and both claim probes' buffers positive.
  check(result.drain.rounds.length === 1, `drain: ${result.drain.rounds.length} rounds, expected 1`)
  for (const r of result.drain.rounds) {
    check(r.tenths.length === 10 && r.tenths.every((t) => t > 0), `drain: rates per tenth ${JSON.stringify(r.tenths)}`)
    check(r.startProbes.length === 3, `drain: ${r.startProbes.length} probes at the start, expected 3`)
  }
  check(result.drain.first.median > 0 && result.drain.last.median > 0, "drain: first or last 10 % rate not > 0")
  check(
    result.drain.buffersStart.median > 0 && result.drain.buffersEnd.median > 0,
    "drain: the claim probes read no buffers"
  )
  // The embedded cluster loads pg_stat_statements: the worker's own claims are counted.
  check(
    result.drain.claimBuffersFirst.median > 0 && result.drain.claimBuffersLast.median > 0,
    "drain: the worker's claims were not counted (pg_stat_statements)"
  )

  // The sustained load: the maximum, then 50 % and 90 % of it; every message handled, every window read.
  const sustained = result.sustained
  check(sustained.max.achievedRate > 0, `sustained: max rate ${sustained.max.achievedRate}, expected > 0`)
  check(
    JSON.stringify(sustained.phases.map((p) => p.load)) === "[0.5,0.9]",
    `sustained: loads ${JSON.stringify(sustained.phases.map((p) => p.load))}, expected [0.5,0.9]`
  )
  for (const p of [sustained.max, ...sustained.phases]) {
    const what = `sustained ${p.load === null ? "max" : p.load}`
    check(p.achievedRate > 0 && p.handledRate > 0, `${what}: rates ${p.achievedRate}/${p.handledRate}, expected > 0`)
    check(p.lost === 0, `${what}: ${p.lost} messages not handled`)
    check(p.latency.count > 0 && p.latency.p50 <= p.latency.p99, `${what}: latency ${JSON.stringify(p.latency)}`)
    check(p.intervals.length > 0 && p.intervals.every((w) => w.handled > 0), `${what}: an interval handled nothing`)
    check(p.ticks.length > 1 && p.ticks.every((t) => t.tableBytes > 0), `${what}: table sizes not read`)
  }

  // MariaDB: both burn-downs ran, and every latency row has samples.
  check(result.mariadb.ours.median > 0 && result.mariadb.raw.median > 0, "mariadb: a burn-down rate is not > 0")
  check(result.mariadb.latency.length === 3, `mariadb: ${result.mariadb.latency.length} latency rows, expected 3`)
  for (const l of result.mariadb.latency) {
    check(l.ms.count > 0 && l.ms.p50 <= l.ms.max, `mariadb latency ${l.label}: ${JSON.stringify(l.ms)}`)
  }

  // 12, 3 of the ordering keys over 1 000 keys (against ours without keys, pg-boss and graphile-worker), 3 of the
  // dispatch (against a bare INSERT, graphile-worker and pg-boss), 3 of the drain and 2 of the sustained load.
  check(result.targets.length === 23, `targets: ${result.targets.length}, expected 23`)

  // The printed tables name every contender.
  for (
    const label of [...result.burnDown, ...result.ordered, ...result.dispatch, ...result.latency].map((r) => r.label)
  ) {
    check(stdout.includes(`| ${label}`), `the tables do not name ${label}`)
  }
  for (
    const heading of [
      "### Burn-down",
      "### Ordering keys",
      "### Dispatch cost",
      "### Memory",
      "### Latency",
      "### Recovery",
      "### Drain",
      "### Sustained load",
      "### MariaDB",
      "### Targets"
    ]
  ) {
    check(stdout.includes(heading), `the output has no "${heading}" table`)
  }
}

const { code, signal, stdout } = await runQuick()
check(code === 0, `the benchmark exited with ${signal ?? code}`)
const line = stdout.split("\n").find((l) => l.startsWith("BENCH_JSON "))
check(line !== undefined, "the benchmark printed no BENCH_JSON line")
if (line !== undefined) {
  let result: BenchJson | undefined
  try {
    result = JSON.parse(line.slice("BENCH_JSON ".length)) as BenchJson
  } catch (error) {
    check(false, `the BENCH_JSON line is not JSON: ${String(error)}`)
  }
  if (result !== undefined) {
    try {
      checkResult(result, stdout)
    } catch (error) {
      check(false, `the BENCH_JSON result lacks a field: ${String(error)}`)
    }
  }
}

// The observability benchmark (`npm run bench:observability`): every configuration runs and prints a rate.
const observability = await new Promise<{ readonly code: number | null; readonly stdout: string }>((resolve) => {
  const child = spawn(process.execPath, benchArgs("observability.ts", ["2000", "1"]), {
    cwd: root,
    env: process.env,
    stdio: ["ignore", "pipe", "inherit"]
  })
  let stdout = ""
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk
    process.stdout.write(chunk)
  })
  child.on("close", (code) => resolve({ code, stdout }))
})
check(observability.code === 0, `the observability benchmark exited with ${observability.code}`)
for (const configuration of ["bare", "metrics", "stamped", "unsampled", "sampled", "otlp"]) {
  const row = new RegExp(`^\\| ${configuration} \\| ([\\d ]+) \\|`, "m").exec(observability.stdout)
  check(
    row !== null && Number(row[1]!.replace(/ /g, "")) > 0,
    `observability: no positive rate for ${configuration}`
  )
}

for (const failure of failures) process.stderr.write(`bench:smoke FAILED: ${failure}\n`)
console.log(`\nbench:smoke: ${passed} passed, ${failures.length} failed`)
process.exitCode = failures.length === 0 ? 0 : 1
