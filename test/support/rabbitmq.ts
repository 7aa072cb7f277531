/**
 * RabbitMQ for the tests: Debian's `rabbitmq-server` (3.10), run as a private node of the test run.
 *
 * A private node runs `/usr/lib/rabbitmq/bin/rabbitmq-server` directly as the current user (the
 * `/usr/sbin` wrapper would `su` to the `rabbitmq` user and use the system's directories), with everything
 * in its own temporary directory: node name `outbox-<pid>-<port>@localhost`, AMQP and distribution ports
 * picked free, bound to 127.0.0.1, its own Erlang port mapper (epmd on a free port: `ERL_EPMD_PORT`, so that
 * stopping it never touches another run's nodes or the system's; started here in the foreground, because one
 * that the node starts with `-daemon` leaves the process group and is known by no pid), no plugins, no config file, its own Erlang
 * cookie (`HOME`). It is ready when an AMQP connection succeeds (about 5 s). `stop` sends SIGTERM (a clean
 * shutdown that keeps the data) and `start` boots it again on the same ports and data — the broker-outage test
 * controls its own node that way, never the shared one. The node, its epmd and its directory are tracked
 * (support/leftovers.ts): they go when the test process ends, however it ends.
 */
import * as Amqp from "amqplib"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../src/programs/EmbeddedPostgres.js"
import { ensurePackage } from "./debian.js"
import { alive, sleep, track } from "./leftovers.js"

const serverScript = "/usr/lib/rabbitmq/bin/rabbitmq-server"

/** The default guest URL of a broker on the standard port. */
export const standardUrl = "amqp://guest:guest@127.0.0.1:5672"

/** A node started by the tests. */
export interface RunningBroker {
  readonly url: string
  readonly port: number
  readonly node: string
  readonly dir: string
  /** Stops the node cleanly (SIGTERM), keeping its data; resolves when the process is gone. */
  readonly stop: () => Promise<void>
  /** Starts it again on the same ports and data; resolves when it accepts connections. */
  readonly start: () => Promise<void>
  /** Stops it and removes its directory. */
  readonly destroy: () => Promise<void>
}

/** Installs `rabbitmq-server` from Debian when it is missing and we are root. */
export const ensureInstalled = (): void =>
  ensurePackage("rabbitmq-server", [serverScript], "apt-get install rabbitmq-server, or set AMQP_URL")

/** Whether an AMQP connection to the URL succeeds (closed at once). */
export const canConnect = async (url: string, timeout = 2000): Promise<boolean> => {
  try {
    const connection = await Amqp.connect(url, { timeout })
    connection.on("error", () => undefined)
    await connection.close()
    return true
  } catch {
    return false
  }
}

/** Starts a private node on free loopback ports and waits until it accepts AMQP connections. */
export const startBroker = async (options: { readonly timeoutMs?: number } = {}): Promise<RunningBroker> => {
  ensureInstalled()
  // Three distinct ports: the kernel may hand a port just closed back to the next bind.
  const ports = new Set<number>()
  while (ports.size < 3) ports.add(await freePort())
  const [port, distPort, epmdPort] = [...ports] as [number, number, number]
  const node = `outbox-${process.pid}-${port}@localhost`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `effect-outbox-rabbitmq-${port}-`))
  fs.writeFileSync(path.join(dir, "enabled_plugins"), "[].\n")
  const url = `amqp://guest:guest@127.0.0.1:${port}`
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: dir,
    RABBITMQ_NODENAME: node,
    RABBITMQ_NODE_IP_ADDRESS: "127.0.0.1",
    RABBITMQ_NODE_PORT: String(port),
    RABBITMQ_DIST_PORT: String(distPort),
    RABBITMQ_MNESIA_BASE: path.join(dir, "mnesia"),
    RABBITMQ_LOG_BASE: path.join(dir, "log"),
    RABBITMQ_PID_FILE: path.join(dir, "rabbitmq.pid"),
    RABBITMQ_ENABLED_PLUGINS_FILE: path.join(dir, "enabled_plugins"),
    RABBITMQ_CONFIG_FILE: path.join(dir, "rabbitmq"),
    RABBITMQ_ADVANCED_CONFIG_FILE: path.join(dir, "advanced.config"),
    RABBITMQ_CONF_ENV_FILE: path.join(dir, "rabbitmq-env.conf"),
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS: "-kernel inet_dist_use_interface {127,0,0,1}",
    ERL_EPMD_ADDRESS: "127.0.0.1",
    ERL_EPMD_PORT: String(epmdPort)
  }
  delete env.RABBITMQ_NODE_PORT_OVERRIDE
  let child: ChildProcess | undefined
  // The script's pid leads the group (`detached`); beam.smp writes its own pid to RABBITMQ_PID_FILE.
  let epmd: ChildProcess | undefined
  const leftover = (pid?: number) => ({
    label: `rabbitmq ${port}`,
    processes: [
      ...(pid === undefined ? [] : [{ pid, group: true }]),
      { pid: { file: path.join(dir, "rabbitmq.pid") } },
      ...(epmd?.pid === undefined ? [] : [{ pid: epmd.pid, group: true }])
    ],
    dirs: [dir]
  })
  const tracked = track(leftover())

  /** The node's own epmd, in a group of its own; ready when `epmd -names` reaches it. */
  const startEpmd = async () => {
    const spawned = spawn("epmd", ["-port", String(epmdPort), "-address", "127.0.0.1"], {
      env,
      cwd: dir,
      stdio: "ignore",
      detached: true
    })
    spawned.unref()
    spawned.once("error", () => undefined)
    epmd = spawned
    tracked.update(leftover())
    const deadline = Date.now() + 10_000
    while (Date.now() < deadline) {
      try {
        execFileSync("epmd", ["-names"], { stdio: "ignore", env, timeout: 2_000 })
        return
      } catch {
        if (spawned.exitCode !== null) throw new Error(`epmd on port ${epmdPort} exited (${spawned.exitCode})`)
        await sleep(50)
      }
    }
    throw new Error(`epmd on port ${epmdPort} did not answer within 10 s`)
  }

  const start = async () => {
    const log = fs.openSync(path.join(dir, "server.log"), "a")
    const spawned = spawn(serverScript, [], { env, cwd: dir, stdio: ["ignore", log, log], detached: true })
    fs.closeSync(log)
    spawned.unref()
    child = spawned
    tracked.update(leftover(spawned.pid))
    let exited = false
    spawned.once("exit", () => {
      exited = true
    })
    const deadline = Date.now() + (options.timeoutMs ?? 60_000)
    while (Date.now() < deadline) {
      if (exited) {
        const tail = fs.readFileSync(path.join(dir, "server.log"), "utf8").split("\n").slice(-20).join("\n")
        throw new Error(`rabbitmq-server exited while starting (node ${node}):\n${tail}`)
      }
      if (await canConnect(url, 1000)) return
      await sleep(150)
    }
    throw new Error(
      `rabbitmq-server (node ${node}) did not accept connections within ${options.timeoutMs ?? 60_000} ms`
    )
  }

  const stop = async () => {
    const pid = child?.pid
    child = undefined
    if (pid === undefined || !alive(pid)) return
    process.kill(pid, "SIGTERM")
    const deadline = Date.now() + 30_000
    while (alive(pid) && Date.now() < deadline) await sleep(100)
    if (alive(pid)) process.kill(pid, "SIGKILL")
    while (alive(pid)) await sleep(50)
  }

  const destroy = async () => {
    await stop()
    const epmdPid = epmd?.pid
    epmd = undefined
    if (epmdPid !== undefined && alive(epmdPid)) {
      process.kill(epmdPid, "SIGKILL")
      while (alive(epmdPid)) await sleep(20)
    }
    fs.rmSync(dir, { recursive: true, force: true })
    tracked.release()
  }

  try {
    await startEpmd()
    await start()
  } catch (error) {
    await destroy().catch(() => undefined)
    throw error
  }
  return { url, port, node, dir, stop, start, destroy }
}

/**
 * The broker of a test run: `AMQP_URL` when set; else a broker already listening on 127.0.0.1:5672 (a
 * developer's, or the system service); else a private node started now and stopped by `stop`.
 */
export const ensureBroker = async (): Promise<{ readonly url: string; readonly stop?: () => Promise<void> }> => {
  const fromEnv = process.env.AMQP_URL
  if (fromEnv !== undefined && fromEnv !== "") return { url: fromEnv }
  if (await canConnect(standardUrl)) return { url: standardUrl }
  const broker = await startBroker()
  return { url: broker.url, stop: broker.destroy }
}
