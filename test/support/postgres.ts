/**
 * PostgreSQL for the tests: src/programs/EmbeddedPostgres.ts's throwaway cluster, tracked (support/leftovers.ts)
 * from before it starts, so that its postmaster and data directory go when the test process ends, however it ends.
 */
import { randomBytes } from "node:crypto"
import * as os from "node:os"
import * as path from "node:path"
import * as EmbeddedPostgres from "../../src/programs/EmbeddedPostgres.js"
import { track } from "./leftovers.js"

/** Starts a cluster in a fresh temporary directory; its `stop` removes it (and its record). */
export const startPostgres = async (
  options: { readonly maxConnections?: number; readonly log?: (line: string) => void } = {}
): Promise<EmbeddedPostgres.RunningPostgres> => {
  const dataDir = path.join(os.tmpdir(), `effect-outbox-pg-${process.pid}-${randomBytes(4).toString("hex")}`)
  // SIGQUIT: PostgreSQL's immediate shutdown, which also removes its shared memory (SIGKILL would leave it).
  const tracked = track({
    label: `postgresql ${path.basename(dataDir)}`,
    processes: [{ pid: { file: path.join(dataDir, "postmaster.pid") }, signal: "SIGQUIT" }],
    dirs: [dataDir]
  })
  const server = await EmbeddedPostgres.start({ ...options, dataDir })
  return {
    ...server,
    stop: async () => {
      await server.stop()
      tracked.release()
    }
  }
}
