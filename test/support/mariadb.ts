/**
 * MariaDB for the tests: `MYSQL_URL` when set, otherwise Debian's `mariadb-server` run as a private server of the
 * test run — its own data directory (`mariadb-install-db`) in a temporary directory, a free loopback port, no
 * defaults file, no binary log, no name resolution. Run as root (CI), the server drops to Debian's unprivileged
 * `mysql` user (`--user`), which owns the directory. It is ready when a connection succeeds (about 2 s); `stop`
 * sends SIGTERM (a clean shutdown) and removes the directory. The server and its directory are tracked
 * (support/leftovers.ts): they go when the test process ends, however it ends.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../src/programs/EmbeddedPostgres.js"
import { ensurePackage } from "./debian.js"
import { sleep, track } from "./leftovers.js"

const serverBinary = "/usr/sbin/mariadbd"
const installBinary = "/usr/bin/mariadb-install-db"

/** A server found or started for the tests. */
export interface RunningMariadb {
  /** `mysql://root@127.0.0.1:<port>` (no database: each test file creates its own). */
  readonly url: string
  /** Stops what was started here and removes its directory (nothing for `MYSQL_URL`). */
  readonly stop: () => Promise<void>
}

/** A server started here, which the chaos run stops and starts again on the same data. */
export interface ControlledMariadb extends RunningMariadb {
  /** The server's directory (data, log, socket). */
  readonly dir: string
  /**
   * Stops the server, keeping its data: `fast` is a clean shutdown (SIGTERM), `immediate` a crash (SIGKILL: InnoDB
   * recovers at the next start). Resolves when the process is gone.
   */
  readonly halt: (mode: "fast" | "immediate") => Promise<void>
  /** Starts it again on the same port and data; resolves when it accepts connections. */
  readonly resume: () => Promise<void>
}

/** Installs `mariadb-server` from Debian when it is missing and we are root. */
const ensureInstalled = (): void =>
  ensurePackage("mariadb-server", [serverBinary, installBinary], "apt-get install mariadb-server, or set MYSQL_URL")

/** Whether a connection to the server succeeds (closed at once). */
const canConnect = async (url: string): Promise<boolean> => {
  const { createConnection } = await import("mysql2/promise")
  try {
    const connection = await createConnection({ uri: url, connectTimeout: 1000 })
    await connection.end()
    return true
  } catch {
    return false
  }
}

/** The server's user: as root, Debian's `mysql` (mariadbd refuses to run as root); otherwise the current one. */
const serverUser = (): { readonly name: string; readonly uid: number; readonly gid: number } | undefined => {
  if (process.getuid?.() !== 0) return undefined
  const id = (flag: string) => Number(execFileSync("id", [flag, "mysql"], { encoding: "utf8" }).trim())
  return { name: "mysql", uid: id("-u"), gid: id("-g") }
}

/** `MYSQL_URL`, or a private server started in a temporary directory (see the module's comment). */
export const startMariadb = async (options: { readonly timeoutMs?: number } = {}): Promise<RunningMariadb> => {
  const fromEnv = process.env.MYSQL_URL
  if (fromEnv !== undefined && fromEnv !== "") return { url: fromEnv, stop: async () => {} }
  return startPrivateMariadb(options)
}

/**
 * A private server in a temporary directory, always (`MYSQL_URL` is not used: the caller stops and starts it).
 * `serverArgs` replace the default `--skip-log-bin` (a test of the binary log's formats passes its own).
 */
export const startPrivateMariadb = async (
  options: { readonly timeoutMs?: number; readonly serverArgs?: ReadonlyArray<string> } = {}
): Promise<ControlledMariadb> => {
  ensureInstalled()
  const timeoutMs = options.timeoutMs ?? 60_000
  const port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `effect-outbox-mariadb-${port}-`))
  const user = serverUser()
  if (user !== undefined) fs.chownSync(dir, user.uid, user.gid)
  const userArgs = user === undefined ? [] : [`--user=${user.name}`]
  const dataDir = path.join(dir, "data")
  const log = path.join(dir, "server.log")
  const leftover = (pid?: number) => ({
    label: `mariadb ${port}`,
    processes: [...(pid === undefined ? [] : [{ pid }]), { pid: { file: path.join(dir, "mariadb.pid") } }],
    dirs: [dir]
  })
  const tracked = track(leftover())
  const remove = () => {
    fs.rmSync(dir, { recursive: true, force: true })
    tracked.release()
  }
  try {
    execFileSync(installBinary, [
      "--no-defaults",
      ...userArgs,
      `--datadir=${dataDir}`,
      "--auth-root-authentication-method=normal",
      "--skip-test-db"
    ], { stdio: "ignore" })
  } catch (error) {
    remove()
    throw new Error(`mariadb-install-db failed in ${dataDir}`, { cause: error })
  }
  const url = `mysql://root@127.0.0.1:${port}`
  let running: { readonly child: ChildProcess; readonly gone: Promise<void>; exited: boolean } | undefined

  const launch = async () => {
    const out = fs.openSync(log, "a")
    const child = spawn(serverBinary, [
      "--no-defaults",
      ...userArgs,
      `--datadir=${dataDir}`,
      `--port=${port}`,
      "--bind-address=127.0.0.1",
      `--socket=${path.join(dir, "mariadb.sock")}`,
      `--pid-file=${path.join(dir, "mariadb.pid")}`,
      "--skip-name-resolve",
      ...(options.serverArgs ?? ["--skip-log-bin"]),
      "--innodb-buffer-pool-size=64M",
      "--max-connections=300"
    ], { stdio: ["ignore", out, out] })
    fs.closeSync(out)
    tracked.update(leftover(child.pid))
    const current = {
      child,
      exited: false,
      gone: new Promise<void>((resolve) => child.once("exit", () => resolve()))
    }
    void current.gone.then(() => {
      current.exited = true
    })
    running = current
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      if (current.exited) {
        const tail = fs.readFileSync(log, "utf8").split("\n").slice(-20).join("\n")
        throw new Error(`mariadbd exited while starting:\n${tail}`)
      }
      if (await canConnect(url)) return
      await sleep(100)
    }
    throw new Error(`mariadbd did not accept connections within ${timeoutMs} ms`)
  }

  const halt = async (mode: "fast" | "immediate") => {
    const current = running
    if (current === undefined || current.exited) return
    current.child.kill(mode === "fast" ? "SIGTERM" : "SIGKILL")
    await current.gone
  }
  const stop = async () => {
    await halt("fast")
    remove()
  }
  try {
    await launch()
  } catch (error) {
    await stop()
    throw error
  }
  return { url, dir, stop, halt, resume: launch }
}

/** Creates a fresh database on the server of `serverUrl` (named after `prefix`) and returns its URL. */
export const createMysqlDatabase = async (serverUrl: string, prefix: string): Promise<string> => {
  const { createConnection } = await import("mysql2/promise")
  const name = `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
  const connection = await createConnection({ uri: serverUrl })
  try {
    await connection.query(`CREATE DATABASE \`${name}\``)
  } finally {
    await connection.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}
