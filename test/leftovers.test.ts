/**
 * What the tests start outside their own process is recorded until it is stopped (support/leftovers.ts), and what
 * a killed test process could not stop the next run's sweep stops: only a dead owner's, only processes that are
 * still the ones recorded.
 *
 * With `OUTBOX_INTERRUPT_READY=<file>` (test/interrupt/check.ts), the first test writes the file once everything
 * is started and then waits: the check interrupts the run there and looks for anything left.
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { launchChromium } from "./support/chromium.js"
import { spawnScript } from "./support/cli.js"
import { startConnect } from "./support/connect.js"
import { startKafka } from "./support/kafka.js"
import { recordsDir, sweep, track } from "./support/leftovers.js"
import { startPrivateMariadb } from "./support/mariadb.js"
import { startPostgres } from "./support/postgres.js"
import { startBroker } from "./support/rabbitmq.js"

const holdFile = process.env["OUTBOX_INTERRUPT_READY"]

interface Recorded {
  readonly owner: { readonly pid: number }
  readonly label: string
  readonly processes: ReadonlyArray<{ readonly pid?: { readonly pid: number }; readonly pidFile?: string }>
  readonly dirs: ReadonlyArray<string>
}

/** The records this process owns, by label. */
const ownRecords = (): Map<string, Recorded> => {
  const records = new Map<string, Recorded>()
  const names = fs.existsSync(recordsDir()) ? fs.readdirSync(recordsDir()) : []
  for (const name of names) {
    if (!name.endsWith(".json")) continue
    const record = JSON.parse(fs.readFileSync(path.join(recordsDir(), name), "utf8")) as Recorded
    if (record.owner.pid === process.pid) records.set(record.label, record)
  }
  return records
}

const alive = (pid: number): boolean => {
  try {
    const state = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]![0]
    return state !== "Z"
  } catch {
    return false
  }
}

/** A recorded process's pid: its own, or its pid file's. */
const pidOf = (process: Recorded["processes"][number]): number | undefined =>
  process.pid?.pid ?? (process.pidFile !== undefined && fs.existsSync(process.pidFile)
    ? Number(fs.readFileSync(process.pidFile, "utf8").split("\n")[0])
    : undefined)

/** What a test started, stopped after it also when it failed half-way. */
const cleanups: Array<() => unknown> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

describe("leftovers", () => {
  it(
    "every server, browser and child a helper starts is recorded while it runs, and gone with its record once stopped",
    async () => {
      const [broker, mariadb, postgres, chromium, { connect, kafka }] = await Promise.all([
        startBroker(),
        startPrivateMariadb(),
        startPostgres(),
        launchChromium(),
        // A Kafka Connect worker needs its broker up.
        startKafka().then(async (kafka) => ({ kafka, connect: await startConnect({ bootstrap: kafka.bootstrap }) }))
      ])
      const child = spawnScript("test/fixtures/idle-child.ts", [], {})
      await child.waitFor(/READY/)

      const records = [...ownRecords().values()]
      const labels = records.map((record) => record.label.split(" ")[0])
      expect(labels.sort()).toEqual([
        "chromium",
        "connect",
        "kafka",
        "mariadb",
        "postgresql",
        "rabbitmq",
        "test/fixtures/idle-child.ts"
      ])
      const pids = records.flatMap((record) => record.processes.map(pidOf)).filter((pid) => pid !== undefined)
      const dirs = records.flatMap((record) => record.dirs)
      // rabbitmq: its script, beam.smp and epmd; mariadb: mariadbd (its pid and pid file); postgres, chromium, the
      // child, kafka's JVM, connect's JVM.
      expect(pids.length).toBe(10)
      expect(pids.every(alive)).toBe(true)
      expect(dirs).toEqual(expect.arrayContaining([broker.dir, mariadb.dir, postgres.dataDir, kafka.dir, connect.dir]))
      expect(dirs.length).toBe(7) // and chromium's temporary folder and profile
      expect(dirs.every((dir) => path.dirname(dir) === os.tmpdir() && fs.existsSync(dir))).toBe(true)

      if (holdFile !== undefined) {
        fs.writeFileSync(holdFile, JSON.stringify({ pid: process.pid, pids, dirs }))
        await new Promise(() => {}) // until the check's signal
      }

      child.kill("SIGTERM")
      await Promise.all([
        broker.destroy(),
        mariadb.stop(),
        postgres.stop(),
        chromium.close(),
        connect.destroy().then(kafka.destroy),
        child.exited
      ])
      expect(ownRecords().size).toBe(0)
      expect(pids.filter(alive)).toEqual([])
      expect(dirs.filter((dir) => fs.existsSync(dir))).toEqual([])
    },
    holdFile === undefined ? 180_000 : 3_600_000
  )

  it("the sweep stops and removes what a killed owner recorded, and nothing of a live owner's", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-outbox-leftovers-"))
    const child = spawnScript("test/fixtures/idle-child.ts", ["track", dir], {})
    const server = Number(/SERVER (\d+)/.exec(await child.waitFor(/SERVER/))![1])
    await child.waitFor(/READY/)
    // Another run's server: recorded by an owner that is alive (this process) until the test ends.
    const ours = spawn("sleep", ["1000"], { stdio: "ignore" })
    const live = track({ label: "live owner's", processes: [{ pid: ours.pid! }], dirs: [] })
    cleanups.push(() => {
      live.release()
      ours.kill("SIGKILL")
    })

    child.kill("SIGKILL") // no exit listener runs: its server and folder stay
    await child.exited
    expect(alive(server)).toBe(true)
    expect(fs.existsSync(dir)).toBe(true)

    expect(sweep()).toContain(`idle ${server}`)
    expect(alive(server)).toBe(false)
    expect(fs.existsSync(dir)).toBe(false)
    expect(alive(ours.pid!)).toBe(true)
    expect(ownRecords().has("live owner's")).toBe(true)
  })

  it("the sweep never signals a pid the system gave to another process since it was recorded", async () => {
    // A dead owner's record naming a live process with another start time: a pid used again.
    const stranger = spawn("sleep", ["1000"], { stdio: "ignore" })
    cleanups.push(() => void stranger.kill("SIGKILL"))
    const dead = spawn("true")
    await new Promise((resolve) => dead.once("exit", resolve))
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-outbox-leftovers-"))
    fs.mkdirSync(recordsDir(), { recursive: true })
    fs.writeFileSync(
      path.join(recordsDir(), `${dead.pid}-1-1.json`),
      JSON.stringify({
        owner: { pid: dead.pid, start: "1" },
        label: "reused",
        processes: [{ pid: { pid: stranger.pid, start: "1" }, group: false, signal: "SIGKILL" }],
        dirs: [dir]
      })
    )
    expect(sweep()).toContain("reused")
    expect(alive(stranger.pid!)).toBe(true)
    expect(fs.existsSync(dir)).toBe(false)
  })

  it("a record that a killed sweep had claimed is swept again", async () => {
    const dead = spawn("true")
    await new Promise((resolve) => dead.once("exit", resolve))
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-outbox-leftovers-"))
    fs.mkdirSync(recordsDir(), { recursive: true })
    const claimed = path.join(recordsDir(), `${dead.pid}-1-1.json.sweep-${dead.pid}`)
    fs.writeFileSync(
      claimed,
      JSON.stringify({ owner: { pid: dead.pid, start: "1" }, label: "claimed", processes: [], dirs: [dir] })
    )
    expect(sweep()).toContain("claimed")
    expect(fs.existsSync(dir)).toBe(false)
    expect(fs.existsSync(claimed)).toBe(false)
  })
})
