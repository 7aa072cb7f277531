/**
 * What the tests start outside their own process (servers, a browser, child programs) and the temporary folders
 * those use, recorded so that nothing outlives the test run.
 *
 * `track` writes a record to `<os.tmpdir()>/effect-outbox-tests/`: the process that started it (its owner: the
 * vitest process, main or worker), the processes to stop and the folders to remove. The owner stops and removes them
 * when it ends: at a normal exit, at `process.exit` (vitest's answer to SIGINT and SIGTERM), on SIGINT, SIGTERM or
 * SIGHUP, and when a vitest worker loses its parent (a main process that exited on a signal leaves its workers
 * running). What an owner that could not clean up left (SIGKILL, a crash of the machine) `sweep` removes at the next
 * run's start. Both run synchronously: an `exit` listener cannot wait for anything else.
 *
 * A process is known by its pid and its start time (a pid read from a server's pid file, by its command line naming
 * the server's folder), so a pid the system has given to another process since is never signalled. A record whose
 * owner is alive (another test run, in another worktree) is left alone, and a server the tests did not start is
 * never in a record.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/** A process to stop. */
export interface TrackedProcess {
  /** Its pid, or the pid file the server writes (read when it is stopped: it changes at each restart). */
  readonly pid: number | { readonly file: string }
  /** It leads a process group (spawned `detached`): the whole group is signalled. */
  readonly group?: boolean
  /**
   * The signal that stops it cleanly enough (PostgreSQL: SIGQUIT, whose immediate shutdown still removes its
   * shared memory); SIGKILL follows when it is not gone within 5 s. SIGKILL by default: its folder goes anyway.
   */
  readonly signal?: NodeJS.Signals
}

/** What one start left to stop and remove. */
export interface Leftover {
  /** What it is, for messages ("rabbitmq 41234"). */
  readonly label: string
  readonly processes: ReadonlyArray<TrackedProcess>
  /** Folders directly inside `os.tmpdir()`; a path elsewhere is refused. */
  readonly dirs: ReadonlyArray<string>
}

/** A tracked start: `update` when its processes change, `release` once it stopped and removed them itself. */
export interface Tracked {
  readonly update: (leftover: Leftover) => void
  readonly release: () => void
}

/** A pid with the start time it had when it was recorded (clock ticks since boot, /proc/<pid>/stat). */
interface Identity {
  readonly pid: number
  readonly start: string
}

interface RecordedProcess {
  readonly pid?: Identity
  readonly pidFile?: string
  readonly group: boolean
  readonly signal: NodeJS.Signals
}

interface RecordFile {
  readonly owner: Identity
  readonly label: string
  readonly processes: ReadonlyArray<RecordedProcess>
  readonly dirs: ReadonlyArray<string>
}

/** Where the records are: one folder per machine (and `TMPDIR`), shared by every worktree's runs. */
export const recordsDir = (): string => path.join(os.tmpdir(), "effect-outbox-tests")

/** The start time of a live process, or `undefined` when there is none (or only its zombie). */
const startTime = (pid: number): string | undefined => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name (field 2) is in parentheses and may hold spaces: count the fields after it.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return fields[0] === "Z" ? undefined : fields[19]
  } catch {
    return undefined
  }
}

const identify = (pid: number): Identity | undefined => {
  const start = startTime(pid)
  return start === undefined ? undefined : { pid, start }
}

const isAlive = (identity: Identity): boolean => startTime(identity.pid) === identity.start

const commandLine = (pid: number): string => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ")
  } catch {
    return ""
  }
}

/** The pids of a process group's live members (from /proc, whose fifth field of stat is the group). */
const groupMembers = (pgid: number): Array<number> => {
  const members: Array<number> = []
  for (const entry of fs.readdirSync("/proc")) {
    const pid = Number(entry)
    if (!Number.isInteger(pid)) continue
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      if (fields[0] !== "Z" && Number(fields[2]) === pgid) members.push(pid)
    } catch {
      // gone meanwhile
    }
  }
  return members
}

/** Whether a process with this pid exists (its zombie counts: its parent reaps it). */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Resolves after `ms`: the polls of the server helpers. */
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const sleepSync = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)

const signal = (pid: number, name: NodeJS.Signals) => {
  try {
    process.kill(pid, name)
  } catch {
    // gone already
  }
}

/**
 * The live processes a record names, as pids to signal: a pid whose start time still matches, a pid file's pid
 * whose command line names the record's first folder (the server's own), and a group's members while its leader is
 * that process.
 */
const liveTargets = (record: RecordFile): Array<{ readonly pid: number; readonly process: RecordedProcess }> => {
  const targets: Array<{ pid: number; process: RecordedProcess }> = []
  for (const process of record.processes) {
    let pid: number | undefined
    if (process.pid !== undefined && isAlive(process.pid)) pid = process.pid.pid
    if (process.pidFile !== undefined) {
      try {
        const read = Number(fs.readFileSync(process.pidFile, "utf8").split("\n")[0]!.trim())
        const dir = record.dirs[0]
        if (
          Number.isInteger(read) && read > 0 && startTime(read) !== undefined && dir !== undefined &&
          commandLine(read).includes(dir)
        ) pid = read
      } catch {
        // no pid file: not running
      }
    }
    if (pid !== undefined) targets.push({ pid, process })
  }
  return targets
}

/** Whether a pid (or the group it leads) still has a live process. */
const stillThere = (pid: number, group: boolean) =>
  startTime(pid) !== undefined || (group && groupMembers(pid).length > 0)

/**
 * Stops what a record names and removes its folders, synchronously. False when a folder could not be removed (a
 * later sweep tries again).
 */
const clean = (record: RecordFile): boolean => {
  const targets = liveTargets(record)
  const send = (name: (process: RecordedProcess) => NodeJS.Signals) => {
    for (const { pid, process } of targets) {
      if (process.group) signal(-pid, name(process))
      signal(pid, name(process))
    }
  }
  const waitGone = (ms: number) => {
    const deadline = Date.now() + ms
    while (targets.some(({ pid, process }) => stillThere(pid, process.group)) && Date.now() < deadline) {
      sleepSync(20)
    }
  }
  send((process) => process.signal)
  waitGone(5_000)
  send(() => "SIGKILL")
  waitGone(5_000)
  for (const dir of record.dirs) {
    if (path.dirname(dir) !== os.tmpdir()) continue
    try {
      fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 })
    } catch {
      return false
    }
  }
  return true
}

const tracked = new Map<string, RecordFile>()
let installed = false
let counter = 0

/** Stops everything this process still tracks (synchronously: it also runs in an `exit` listener). */
const cleanAll = () => {
  for (const [file, record] of [...tracked]) {
    tracked.delete(file)
    if (clean(record)) removeRecord(file)
  }
}

/**
 * Exits at once, with the `exit` event (playwright's listener kills its browsers and removes their folders). In a
 * vitest worker `process.exit` is a stub that throws, which is why vitest's own SIGTERM listener there does not
 * exit either: the worker then exits the way `process.exit` does it, through `reallyExit`.
 */
const exitNow = (code: number): never => {
  try {
    process.exit(code)
  } catch {
    // vitest's stub
  }
  process.exitCode = code
  process.emit("exit", code)
  return (process as unknown as { readonly reallyExit: (code: number) => never }).reallyExit(code)
}

const onSignal = (name: NodeJS.Signals) => {
  cleanAll()
  exitNow(128 + (os.constants.signals[name] ?? 0))
}

/**
 * The listeners that stop what this process tracks when it ends; once per process. The signal listeners go first:
 * a listener before them that throws (vitest's in a worker, playwright's) would keep them from running.
 */
const install = () => {
  if (installed) return
  installed = true
  process.on("exit", cleanAll)
  for (const name of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.prependListener(name, onSignal)
  // A vitest worker whose parent is gone (it exited on a signal without stopping its pool) would run on alone.
  if (process.connected) {
    process.on("disconnect", () => {
      if (tracked.size === 0) return
      cleanAll()
      exitNow(1)
    })
  }
  sweep()
}

const toRecord = (leftover: Leftover, owner: Identity): RecordFile => ({
  owner,
  label: leftover.label,
  processes: leftover.processes.map((process) => {
    const pid = typeof process.pid === "number" ? identify(process.pid) : undefined
    return {
      ...(pid === undefined ? {} : { pid }),
      ...(typeof process.pid === "number" ? {} : { pidFile: process.pid.file }),
      group: process.group ?? false,
      signal: process.signal ?? "SIGKILL"
    }
  }),
  dirs: leftover.dirs.map((dir) => path.resolve(dir))
})

const write = (file: string, record: RecordFile) => {
  const temporary = `${file}.${process.pid}.tmp`
  // The folder goes with its last record (see `removeRecord`), possibly another run's at this moment.
  fs.mkdirSync(recordsDir(), { recursive: true })
  try {
    fs.writeFileSync(temporary, JSON.stringify(record))
  } catch {
    fs.mkdirSync(recordsDir(), { recursive: true })
    fs.writeFileSync(temporary, JSON.stringify(record))
  }
  fs.renameSync(temporary, file)
}

/** Removes a record file, and the folder when it was the last record. */
const removeRecord = (file: string) => {
  fs.rmSync(file, { force: true })
  try {
    fs.rmdirSync(recordsDir())
  } catch {
    // other records (another run's), or gone
  }
}

/**
 * Records what a start left to stop and remove, until `release`. Call it as soon as a pid or folder exists (before
 * waiting for the server to be ready), and `update` when its processes change (a restart).
 */
export const track = (leftover: Leftover): Tracked => {
  install()
  const owner = identify(process.pid)!
  const file = path.join(recordsDir(), `${process.pid}-${owner.start}-${++counter}.json`)
  const save = (next: Leftover) => {
    const record = toRecord(next, owner)
    tracked.set(file, record)
    write(file, record)
  }
  save(leftover)
  return {
    update: (next) => {
      if (tracked.has(file)) save(next)
    },
    release: () => {
      tracked.delete(file)
      removeRecord(file)
    }
  }
}

/**
 * Stops and removes what earlier runs left: every record whose owner is gone (and whose pid was not given to another
 * process since). Records of live owners, this run's or a concurrent one's, stay. Returns the labels it cleaned.
 */
export const sweep = (): Array<string> => {
  const cleaned: Array<string> = []
  let names: Array<string>
  try {
    names = fs.readdirSync(recordsDir())
  } catch {
    return cleaned
  }
  for (const name of names) {
    // A record half written, or claimed by a sweep, by a process that died meanwhile: dropped, or swept again.
    const stale = /^(.*\.json)\.(?:sweep-)?(\d+)(\.tmp)?$/.exec(name)
    if (stale !== null && startTime(Number(stale[2])) === undefined) {
      const from = path.join(recordsDir(), name)
      try {
        if (stale[3] !== undefined) fs.rmSync(from, { force: true })
        else {
          fs.renameSync(from, path.join(recordsDir(), stale[1]!))
          names.push(stale[1]!)
        }
      } catch {
        // another sweep got there first
      }
      continue
    }
    if (!name.endsWith(".json")) continue
    const file = path.join(recordsDir(), name)
    let record: RecordFile
    try {
      record = JSON.parse(fs.readFileSync(file, "utf8")) as RecordFile
    } catch {
      continue // being replaced, or removed by a concurrent sweep
    }
    if (isAlive(record.owner)) continue
    // Claimed by renaming: two runs sweeping at once clean each record once.
    const claimed = `${file}.sweep-${process.pid}`
    try {
      fs.renameSync(file, claimed)
    } catch {
      continue
    }
    if (clean(record)) removeRecord(claimed)
    else fs.renameSync(claimed, file)
    cleaned.push(record.label)
  }
  return cleaned
}
