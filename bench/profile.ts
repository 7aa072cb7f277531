/**
 * Profiling aid (not part of `npm run bench`): one burn-down of ours (or of the raw limit) on a fresh
 * database, with a CPU profile of the timed part only, written to $PROFILE_OUT (default
 * /tmp/bench.cpuprofile).
 *
 *   npx tsx bench/profile.ts [ours|raw|ours,raw,…] [messages] [batch] [rounds]
 *
 * With several contenders, each runs `rounds` times (fresh database each), alternating, and only the
 * last run is profiled.
 */
import * as fs from "node:fs"
import * as inspector from "node:inspector"
import pg from "pg"
import { freshDatabase, settle, startCluster } from "./cluster.js"
import { clock } from "./common.js"
import * as Ours from "./ours.js"
import * as Raw from "./raw.js"

const [whichText = "ours", nText = "50000", batchText = "500", roundsText = "1"] = process.argv.slice(2)
const contenders = whichText.split(",")
const rounds = Number(roundsText)
const n = Number(nText)
const batch = Number(batchText)
const out = process.env.PROFILE_OUT ?? "/tmp/bench.cpuprofile"
// PROFILE_ALL=1: every measured run is profiled (and its breakdown printed), not only the last.
const profileAll = process.env.PROFILE_ALL === "1"

const session = new inspector.Session()
session.connect()
const post = (method: string, params: object = {}) =>
  new Promise<unknown>((resolve, reject) =>
    session.post(method, params, (error, result) => (error ? reject(error) : resolve(result)))
  )

const rawConsume = async (url: string, onHandled: () => void) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  let ids: Array<string> = []
  while (true) {
    const { rows } = await client.query<{ id: string | null }>(Raw.claimSql, ["outbox", 30000, batch, ids, true, null])
    // Leased nothing: one row with a NULL id (the claim also deleted the last batch).
    if (rows.length === 0 || rows[0]!.id === null) break
    ids = rows.map((r) => r.id!)
    for (const _ of rows) onHandled()
  }
  await client.end()
}

/** Busy and total jiffies of the whole machine (every process: the database server's too). */
const machineCpu = () => {
  const [, ...fields] = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/)
  const values = fields.map(Number)
  const idle = values[3]! + values[4]!
  const total = values.reduce((a, b) => a + b, 0)
  return { busy: total - idle, total }
}

interface CpuProfile {
  readonly nodes: ReadonlyArray<
    { readonly id: number; readonly callFrame: { readonly url: string; readonly functionName: string } }
  >
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

/** Where a profile's samples were taken, by what owns the code (self time). */
const categoryOf = (url: string, functionName: string): string => {
  if (functionName === "(idle)") return "idle"
  if (functionName === "(garbage collector)") return "GC"
  if (/node_modules\/(pg|pg-protocol|pg-types|pg-pool|postgres-[a-z]+|pgpass|pg-int8)\//.test(url)) return "pg driver"
  if (/node_modules\/(effect|@effect\/[a-z-]+)\//.test(url)) return "Effect runtime"
  if (/\/(dist|src)\//.test(url) && !url.includes("node_modules")) return "effect-outbox"
  if (url.includes("/bench/")) return "bench"
  // Node's own JavaScript (sockets, streams, buffers, timers) and native code (UTF-8 decoding, writes).
  return "Node.js"
}

/** Microseconds of self time per message, by category. */
const breakdown = (profile: CpuProfile, messages: number): Map<string, number> => {
  const category = new Map(
    profile.nodes.map((node) => [node.id, categoryOf(node.callFrame.url, node.callFrame.functionName)])
  )
  const totals = new Map<string, number>()
  profile.samples.forEach((id, i) => {
    const key = category.get(id) ?? "Node.js"
    totals.set(key, (totals.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0))
  })
  return new Map([...totals].map(([key, us]) => [key, us / messages]))
}

const categories = ["effect-outbox", "Effect runtime", "pg driver", "Node.js", "GC", "bench"]

const once = async (which: string, url: string, messages: number, profile: boolean) => {
  await Ours.setup(url)
  await Ours.seed(url, 1, messages)
  await settle(url)
  const time = clock()
  let handled = 0
  const onHandled = () => {
    time.start()
    handled++
  }
  if (profile) {
    await post("Profiler.enable")
    await post("Profiler.setSamplingInterval", { interval: 100 })
    await post("Profiler.start")
  }
  const cpu0 = process.cpuUsage()
  const machine0 = machineCpu()
  if (which === "raw") await rawConsume(url, onHandled)
  else await Ours.consume(url, { batchSize: batch, capMs: 600_000, onHandled })
  const cpu = process.cpuUsage(cpu0)
  const machine1 = machineCpu()
  const seconds = time.seconds()
  if (profile) {
    const { profile: p } = (await post("Profiler.stop")) as { profile: CpuProfile }
    fs.writeFileSync(out, JSON.stringify(p))
    const parts = breakdown(p, handled)
    console.log(
      `  self time per message: ${categories.map((key) => `${key} ${(parts.get(key) ?? 0).toFixed(2)} µs`).join(", ")}`
    )
  }
  return {
    handled,
    seconds,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    // The share of every core busy (this process, the server, the rest of the machine).
    machineBusy: (machine1.busy - machine0.busy) / (machine1.total - machine0.total)
  }
}

const cluster = await startCluster({ noFsync: process.env.BENCH_NO_FSYNC === "1", log: console.error })
try {
  for (const which of contenders) {
    const warm = await freshDatabase(cluster.adminUrl, "profile_warm")
    await once(which, warm.url, 5000, false)
    await warm.drop()
  }
  for (let round = 0; round < rounds; round++) {
    for (const which of contenders) {
      const last = profileAll || (round === rounds - 1 && which === contenders[contenders.length - 1])
      const db = await freshDatabase(cluster.adminUrl, "profile")
      const m = await once(which, db.url, n, last)
      console.log(
        `${which} batch ${batch}: ${m.handled} in ${m.seconds.toFixed(2)} s = ${
          Math.round(m.handled / m.seconds)
        } msg/s; ` +
          `node CPU ${m.cpuSeconds.toFixed(2)} s (${((m.cpuSeconds / m.seconds) * 100).toFixed(0)} % of one core), ` +
          `${((m.cpuSeconds / m.handled) * 1e6).toFixed(1)} µs CPU per message; machine ${
            (m.machineBusy * 100).toFixed(0)
          } % busy${last ? `; profile: ${out}` : ""}`
      )
      await db.drop()
    }
  }
} finally {
  await cluster.stop()
}
process.exit(0)
