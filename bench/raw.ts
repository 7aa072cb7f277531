/**
 * The raw-SQL limit: the claim and delete statements of our transport, driven directly through `pg`
 * (one connection, claim → no-op → delete, same batch size), with no library around them.
 *
 * The claim text is the transport's own (`claimCall` of src/layers/pg/sql/transport.ts, the text a worker's
 * session sends on its connection), imported rather than copied; `ours.verify` records the statements the
 * library really sends, and the benchmark checks that this text is among them (see `sameStatements`).
 */
import pg from "pg"
import { quote } from "../src/layers/pg/sql/identifiers.js"
import { claimCall } from "../src/layers/pg/sql/transport.js"
import { type BurnDownContender, clock, queue, table } from "./common.js"
import * as Ours from "./ours.js"

/**
 * The table's claim function (migrations `3_claim_function`, `4_claim_next_due`): $1 queue name, $2 lease in ms,
 * $3 batch size, $4 the ids to delete first (the previous batch; cast to bigint[]), $5 relaxed commit (true: the
 * worker's claim is its own transaction).
 */
export const claimSql = claimCall(table)

/**
 * The transport's `ack` (what the worker writes when no claim follows soon), as text: $1 the ids, $2 the queue.
 * Used once, for the last batch (every other batch is deleted by the claim that follows it).
 */
export const deleteSql = `DELETE FROM ${quote(table)} WHERE id = ANY($1::bigint[]) AND queue_name = $2`

/** The transport's default lease (30 s), passed as the claim's $2. */
const leaseMs = 30_000

const normalize = (sql: string) => sql.replace(/\s+/g, " ").trim()

/** Whether the statements recorded from the library include the claim text this contender runs. */
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
  settings:
    `our claim function (batch ${batchSize}), deleting the previous batch in the same call; one pg connection, no library`,
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
        const { rows } = await client.query<Row>(claimSql, [queue, leaseMs, batchSize, ids, true, null])
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
      if (ids.length > 0) await client.query(deleteSql, [ids, queue])
      return { handled, seconds: time.seconds(), capped }
    } finally {
      await client.end()
    }
  }
})
