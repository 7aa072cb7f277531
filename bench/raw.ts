/**
 * The raw-SQL limit: the claim and delete statements of our transport, driven directly through `pg`
 * (one connection, claim → no-op → delete, same batch size), with no library around them.
 *
 * The statement texts are copied from src/layers/PgTransport.ts (`claim` and `ack`, as compiled by
 * @effect/sql for the default table). `ours.verify` records the statements the transport really sends
 * and the benchmark refuses to call this the limit when they differ (see `sameStatements`).
 */
import pg from "pg"
import { type BurnDownContender, clock, queue, table } from "./common.js"
import * as Ours from "./ours.js"

/**
 * src/layers/PgTransport.ts, `claim` and `ackAndClaim`: the table's claim function (migrations
 * `3_claim_function`, `4_claim_next_due`). $1 queue name, $2 lease in ms, $3 batch size, $4 the ids to delete first (the previous
 * batch; text, cast to bigint[]), $5 relaxed commit (true: the worker's claim is its own transaction).
 */
export const claimSql = `SELECT * FROM "${table}_claim"($1, $2,
          $3, $4::bigint[], $5)`

/** src/layers/PgTransport.ts, `ack` (what the worker writes when no claim follows soon): $1 the ids. */
export const deleteSql = `DELETE FROM "${table}" WHERE id = ANY($1::bigint[])`

/** The transport's default lease (30 s), passed as the claim's $2. */
const leaseMs = 30_000

const normalize = (sql: string) => sql.replace(/\s+/g, " ").trim()

/** Whether the statements recorded from the library include exactly our claim and delete texts. */
export const sameStatements = (recorded: ReadonlyArray<string>): { readonly claim: boolean } => {
  const texts = new Set(recorded.map(normalize))
  return { claim: texts.has(normalize(claimSql)) }
}

interface Row {
  readonly id: string | null
}

export const burnDown = (batchSize: number): BurnDownContender => ({
  id: "raw",
  label: "raw-SQL limit",
  settings: `our claim function (batch ${batchSize}), deleting the previous batch in the same call; one pg connection, no library`,
  run: async (url, options) => {
    await Ours.setup(url)
    await Ours.seed(url, 1, options.messages)
    await options.settle()
    const client = new pg.Client({ connectionString: url })
    client.on("error", () => {})
    await client.connect()
    try {
      const time = clock()
      const deadline = performance.now() + options.capMs
      let handled = 0
      let capped = false
      // Like the worker: the acks of a batch ride on the next claim; the last (empty) claim deletes the last batch.
      let ids: Array<string> = []
      while (true) {
        if (performance.now() >= deadline) {
          capped = true
          break
        }
        const { rows } = await client.query<Row>(claimSql, [queue, leaseMs, batchSize, ids, true])
        // Leased nothing: one row with a NULL id (and when the next message is due).
        if (rows.length === 0 || rows[0]!.id === null) {
          ids = [] // deleted by this very call
          break
        }
        ids = new Array<string>(rows.length)
        for (let i = 0; i < rows.length; i++) {
          time.start() // the no-op handler
          ids[i] = rows[i]!.id!
          handled++
        }
      }
      if (ids.length > 0) await client.query(deleteSql, [ids])
      return { handled, seconds: time.seconds(), capped }
    } finally {
      await client.end()
    }
  }
})
