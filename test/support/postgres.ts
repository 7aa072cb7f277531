/**
 * PostgreSQL for the tests: src/programs/EmbeddedPostgres.ts's throwaway cluster, tracked (support/leftovers.ts)
 * from before it starts, so that its postmaster and data directory go when the test process ends, however it ends.
 */
import { randomBytes } from "node:crypto"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"
import * as EmbeddedPostgres from "../../src/programs/EmbeddedPostgres.js"
import { track } from "./leftovers.js"

/**
 * What logical decoding needs (Debezium's connector reads the WAL through a replication slot): settings PostgreSQL
 * 13 takes too. Replication connections and slots beyond the defaults' 10: parallel test files each have their own.
 */
const logicalDecoding = { wal_level: "logical", max_wal_senders: 20, max_replication_slots: 20 } as const

/**
 * Starts a cluster in a fresh temporary directory; its `stop` removes it (and its record). With `logicalDecoding`
 * it runs with `wal_level = logical`: set by ALTER SYSTEM and a restart, as EmbeddedPostgres takes no settings.
 */
export const startPostgres = async (
  options: {
    readonly maxConnections?: number
    readonly log?: (line: string) => void
    readonly logicalDecoding?: boolean
  } = {}
): Promise<EmbeddedPostgres.RunningPostgres> => {
  const dataDir = path.join(os.tmpdir(), `effect-outbox-pg-${process.pid}-${randomBytes(4).toString("hex")}`)
  // SIGQUIT: PostgreSQL's immediate shutdown, which also removes its shared memory (SIGKILL would leave it).
  const tracked = track({
    label: `postgresql ${path.basename(dataDir)}`,
    processes: [{ pid: { file: path.join(dataDir, "postmaster.pid") }, signal: "SIGQUIT" }],
    dirs: [dataDir]
  })
  const { logicalDecoding: logical, ...startOptions } = options
  const server = await EmbeddedPostgres.start({ ...startOptions, dataDir })
  if (logical === true) {
    try {
      const client = new pg.Client({ connectionString: server.url })
      await client.connect()
      try {
        for (const [name, value] of Object.entries(logicalDecoding)) {
          await client.query(`ALTER SYSTEM SET ${name} = '${value}'`)
        }
      } finally {
        await client.end()
      }
      await server.restart()
    } catch (error) {
      await server.stop()
      tracked.release()
      throw error
    }
  }
  return {
    ...server,
    stop: async () => {
      await server.stop()
      tracked.release()
    }
  }
}
