/**
 * `npm run bench:runtimes`: ours and the raw-SQL limit on each Node.js users run, in one run on one PostgreSQL.
 * Each round runs `bench/main.ts` once per runtime (burn-down of ours and raw, ours' commit → handler latency),
 * the runtimes' order rotated every round, so a slow stretch of the machine falls on all alike; the figures are
 * medians over the rounds. A variant runs Node 24 with Node 20's young generation (`--max-semi-space-size=16`),
 * the setting that explains most of the difference (see BENCHMARKS.md, "Node.js 20, 22 and 24").
 *
 *   npm run bench:runtimes -- [--rounds N] [--no-write] [--quick]
 *
 * The runtimes come from `.ci/matrix` (`npm ci --prefix .ci/matrix`); this machine's own `node` is the Node 20
 * cell. The results replace the section between the `bench:runtimes` markers of BENCHMARKS.md.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { serverInfo, startCluster } from "./cluster.js"
import { root } from "./common.js"
import { rate, ratio, summarize, type Summary, table } from "./stats.js"

interface Runtime {
  readonly id: string
  readonly label: string
  readonly node: string
  readonly flags: ReadonlyArray<string>
}

const matrixNode = (major: number) => path.join(root, ".ci", "matrix", "node_modules", `node-${major}`, "bin", "node")

const runtimes: ReadonlyArray<Runtime> = [
  { id: "20", label: "Node.js 20 (this machine's)", node: process.execPath, flags: [] },
  { id: "22", label: "Node.js 22", node: matrixNode(22), flags: [] },
  { id: "24", label: "Node.js 24", node: matrixNode(24), flags: [] },
  {
    id: "24-semi-16",
    label: "Node.js 24, `--max-semi-space-size=16`",
    node: matrixNode(24),
    flags: ["--max-semi-space-size=16"]
  }
]

const args = process.argv.slice(2)
// --quick: tiny sizes (main.ts --quick), to check the program, not to measure; never written.
const quick = args.includes("--quick")
const write = !args.includes("--no-write") && !quick
const roundsAt = args.indexOf("--rounds")
const rounds = roundsAt >= 0 ? Number(args[roundsAt + 1]) : 3
if (!Number.isInteger(rounds) || rounds < 1) {
  console.error("usage: npm run bench:runtimes -- [--rounds N] [--no-write] [--quick]")
  process.exit(2)
}
for (const r of runtimes) {
  if (!fs.existsSync(r.node)) {
    console.error(`${r.node} is missing: run npm ci --prefix .ci/matrix first`)
    process.exit(2)
  }
}

const log = (line: string) => console.error(`[runtimes] ${line}`)

interface Figures {
  readonly version: string
  /** Burn-down msg/s, the median of the run's rounds. */
  readonly ours: number
  readonly raw: number
  readonly p50: number
  readonly p99: number
}

/** One `bench/main.ts` run on a runtime: its BENCH_JSON figures. */
const runOnce = (runtime: Runtime, databaseUrl: string) =>
  new Promise<Figures>((resolve, reject) => {
    const child = spawn(runtime.node, [
      ...runtime.flags,
      "--import",
      "tsx",
      "--import",
      "./bench/compiled-library.mjs",
      "bench/main.ts",
      "--scenarios",
      "burn-down,latency",
      "--only",
      "ours-500,raw,latency-ours",
      "--rounds",
      "2",
      "--latency-rounds",
      "1",
      "--delayed-messages",
      "1",
      "--no-write",
      "--json",
      ...(quick ? ["--quick"] : [])
    ], { cwd: root, env: { ...process.env, DATABASE_URL: databaseUrl }, stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    child.stdout.setEncoding("utf8")
    child.stdout.on("data", (chunk: string) => {
      out += chunk
    })
    child.on("error", reject)
    child.on("exit", (code) => {
      const line = out.split("\n").find((l) => l.startsWith("BENCH_JSON "))
      if (code !== 0 || line === undefined) return reject(new Error(`${runtime.id}: bench/main.ts exited with ${code}`))
      const json = JSON.parse(line.slice("BENCH_JSON ".length)) as {
        readonly node: string
        readonly burnDown: ReadonlyArray<{ readonly id: string; readonly rates: Summary }>
        readonly latency: ReadonlyArray<
          { readonly id: string; readonly ms: { readonly p50: number; readonly p99: number } }
        >
      }
      const rate = (id: string) => json.burnDown.find((r) => r.id === id)?.rates.median ?? Number.NaN
      const latency = json.latency.find((r) => r.id === "ours")
      resolve({
        version: json.node,
        ours: rate("ours-500"),
        raw: rate("raw"),
        p50: latency?.ms.p50 ?? Number.NaN,
        p99: latency?.ms.p99 ?? Number.NaN
      })
    })
  })

const began = performance.now()
const cluster = await startCluster({ noFsync: false, log })
const results = new Map<string, Array<Figures>>(runtimes.map((r) => [r.id, []]))
let server = ""
try {
  server = (await serverInfo(cluster.adminUrl)).version
  for (let round = 0; round < rounds; round++) {
    const order = runtimes.map((_, i) => runtimes[(i + round) % runtimes.length]!)
    for (const runtime of order) {
      log(`round ${round + 1}/${rounds}: ${runtime.id}`)
      results.get(runtime.id)!.push(await runOnce(runtime, cluster.adminUrl))
    }
  }
} finally {
  await cluster.stop()
}

const ms = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)} ms` : "–")
const rows = runtimes.map((r) => {
  const figures = results.get(r.id)!
  const ours = summarize(figures.map((f) => f.ours))
  const raw = summarize(figures.map((f) => f.raw))
  return [
    r.label,
    figures[0]?.version ?? "?",
    rate(ours.median),
    `${rate(ours.min)} – ${rate(ours.max)}`,
    rate(raw.median),
    ratio(ours.median / raw.median),
    ms(summarize(figures.map((f) => f.p50)).median),
    ms(summarize(figures.map((f) => f.p99)).median)
  ]
})
const minutes = ((performance.now() - began) / 60_000).toFixed(0)
const generated = [
  `Run of ${new Date().toISOString().slice(0, 10)}, ${minutes} min, PostgreSQL ${server} on the same machine; ` +
  `${rounds} rounds, the runtimes' order rotated every round. Burn-down: 50,000 messages, batch 500, 2 per round ` +
  `and runtime (the median of the rounds' medians; min – max of the rounds' medians). Latency: ours alone, the producer in the worker's process, 3,000 warm-up then ` +
  `1,000 measured messages per round (medians of the rounds' percentiles).`,
  "",
  table(
    [
      "runtime",
      "version",
      "ours msg/s (median)",
      "min – max",
      "raw-SQL limit msg/s",
      "ours ÷ raw",
      "latency p50",
      "latency p99"
    ],
    rows,
    ["l", "l", "r", "r", "r", "r", "r", "r"]
  )
].join("\n")
console.log(generated)

if (write) {
  const file = path.join(root, "BENCHMARKS.md")
  const start = "<!-- bench:runtimes:start (generated by `npm run bench:runtimes`; do not edit by hand) -->"
  const end = "<!-- bench:runtimes:end -->"
  const current = fs.readFileSync(file, "utf8")
  const from = current.indexOf(start)
  const to = current.indexOf(end)
  if (from < 0 || to < 0) throw new Error("BENCHMARKS.md has no bench:runtimes markers")
  fs.writeFileSync(file, `${current.slice(0, from + start.length)}\n${generated}\n${current.slice(to)}`)
  log("wrote BENCHMARKS.md")
}
process.exit(0)
