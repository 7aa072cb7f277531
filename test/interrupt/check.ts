/**
 * `npm run test:interrupt`: an interrupted test run leaves no process and no temporary folder behind.
 *
 * Runs `npm run test:integration -- test/leftovers.test.ts` (npm, its shell, vitest, a worker: the chain of
 * `npm test`) in a temporary folder of its own (`TMPDIR`) with a mark in its environment, which every process of
 * the run inherits: the global setup's PostgreSQL, RabbitMQ, MariaDB and Kafka, and in the worker a private RabbitMQ
 * node, MariaDB server, PostgreSQL cluster, Kafka broker and Kafka Connect worker, Chromium and a child program
 * (test/leftovers.test.ts holds them all once `OUTBOX_INTERRUPT_READY` names a file). Once they all run, it interrupts the run the two ways it
 * happens:
 *
 * - SIGTERM to npm alone (a CI runner's timeout, `kill <pid>`): npm passes it to its child only;
 * - SIGINT to the run's process group (Ctrl-C in a terminal).
 *
 * Then, once every process of the run is gone, nothing carrying the mark may remain and the temporary folder must
 * hold nothing but tsx's compile cache. Exits 0 when both hold for both ways, 1 otherwise.
 */
import { spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
/** Starting everything takes about 20 s here; a first run on a fresh machine also installs Debian's packages. */
const readyTimeoutMs = 15 * 60_000
/** Stopping is bounded by the helpers (5 s for a clean stop, then SIGKILL): generous for a busy machine. */
const goneTimeoutMs = 120_000

interface Scenario {
  readonly signal: NodeJS.Signals
  readonly to: "npm" | "group"
}

/** Both ways, or those named on the command line (`SIGTERM:npm`, `SIGINT:group`, `SIGTERM:group`…). */
const scenarios: ReadonlyArray<Scenario> = process.argv.length > 2
  ? process.argv.slice(2).map((arg) => {
    const [signal, to] = arg.split(":")
    return { signal: signal as NodeJS.Signals, to: to === "group" ? "group" : "npm" }
  })
  : [{ signal: "SIGTERM", to: "npm" }, { signal: "SIGINT", to: "group" }]

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The live processes whose environment carries `mark`: pid → command. */
const marked = (mark: string): Map<number, string> => {
  const found = new Map<number, string>()
  for (const entry of fs.readdirSync("/proc")) {
    const pid = Number(entry)
    if (!Number.isInteger(pid) || pid === process.pid) continue
    try {
      if (!fs.readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(mark)) continue
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue
      found.set(pid, fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim().slice(0, 160))
    } catch {
      // gone, or not ours to read
    }
  }
  return found
}

/** What the temporary folder holds besides tsx's compile cache (`tsx-<uid>`). */
const leftoverFiles = (dir: string): Array<string> => fs.readdirSync(dir).filter((name) => !/^tsx-\d+$/.test(name))

const summary = (processes: Map<number, string>) => {
  const counts = new Map<string, number>()
  for (const command of processes.values()) {
    const name = path.basename(command.split(" ")[0]!)
    counts.set(name, (counts.get(name) ?? 0) + 1)
  }
  return [...counts].map(([name, count]) => `${name} ×${count}`).join(", ")
}

const run = async ({ signal, to }: Scenario): Promise<Array<string>> => {
  const mark = `OUTBOX_INTERRUPT_MARK=${randomUUID()}`
  // Short: Chromium's socket path under it must fit in 108 bytes.
  const own = fs.mkdtempSync(path.join(os.tmpdir(), "outbox-int-"))
  fs.chmodSync(own, 0o755)
  const tmp = path.join(own, "t")
  fs.mkdirSync(tmp)
  fs.chmodSync(tmp, 0o1777) // like /tmp: PostgreSQL and MariaDB run as their own users
  const ready = path.join(own, "ready.json")
  const logFile = path.join(own, "run.log")
  const log = fs.openSync(logFile, "w")
  const npm = spawn("npm", ["run", "test:integration", "--", "test/leftovers.test.ts"], {
    cwd: root,
    detached: true, // a process group of its own, as a terminal gives a command
    stdio: ["ignore", log, log],
    env: {
      ...process.env,
      TMPDIR: tmp,
      OUTBOX_INTERRUPT_READY: ready,
      [mark.split("=")[0]!]: mark.split("=")[1]!
    }
  })
  fs.closeSync(log)
  const npmExit = new Promise<number | string>((resolve) =>
    npm.once("exit", (code, received) => resolve(code ?? received ?? "?"))
  )
  const problems: Array<string> = []
  const title = `${signal} to ${to === "npm" ? "npm" : "the process group"}`
  try {
    const deadline = Date.now() + readyTimeoutMs
    while (!fs.existsSync(ready)) {
      if (npm.exitCode !== null || npm.signalCode !== null || Date.now() > deadline) {
        throw new Error(`${title}: the run ended or took too long before its servers were up:\n${tail(logFile, 150)}`)
      }
      await sleep(200)
    }
    const before = marked(mark)
    console.log(`${title}: the run's processes before: ${summary(before)}`)
    process.kill(to === "npm" ? npm.pid! : -npm.pid!, signal)
    const code = await npmExit
    // npm is gone; a worker whose parent exited cleans up on its own: wait for the last of them.
    const goneBy = Date.now() + goneTimeoutMs
    while (marked(mark).size > 0 && Date.now() < goneBy) await sleep(200)
    const after = marked(mark)
    const files = leftoverFiles(tmp)
    console.log(
      `${title}: npm exited (${code}); left: ${after.size} processes${after.size > 0 ? ` (${summary(after)})` : ""}, ` +
        `${files.length} temporary entries${files.length > 0 ? ` (${files.join(", ")})` : ""}`
    )
    for (const [pid, command] of after) problems.push(`${title}: process ${pid} left running: ${command}`)
    for (const name of files) problems.push(`${title}: ${path.join(tmp, name)} left behind`)
  } finally {
    // Whatever happened, nothing of the check's own stays: the group, then anything else marked.
    try {
      process.kill(-npm.pid!, "SIGKILL")
    } catch {
      // gone
    }
    for (const pid of marked(mark).keys()) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // gone
      }
    }
    if (problems.length > 0) console.log(tail(logFile))
    await sleep(500)
    fs.rmSync(own, { recursive: true, force: true })
  }
  return problems
}

const tail = (file: string, lines = 30) =>
  fs.readFileSync(file, "utf8").split("\n").filter((line) => !line.startsWith("timestamp=")).slice(-lines).join("\n")

const problems: Array<string> = []
let failed = 0
for (const scenario of scenarios) {
  const found = await run(scenario)
  if (found.length > 0) failed++
  problems.push(...found)
}
if (problems.length > 0) console.error(problems.join("\n"))
console.log(`interrupted: ${scenarios.length - failed} passed, ${failed} failed`)
process.exit(failed > 0 ? 1 : 0)
