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

const claimed = `
          UPDATE "${table}" AS m SET delivered_at = now(), delivery_count = m.delivery_count + 1
          WHERE m.id = ANY(ARRAY(SELECT id FROM next))
          RETURNING m.id::text AS id, m.message_id::text AS message_id, m.body, m.headers,
                    (extract(epoch FROM m.created_at) * 1000)::float8 AS created_ms,
                    (extract(epoch FROM m.available_at) * 1000)::float8 AS available_ms, m.delivery_count`

/** src/layers/PgTransport.ts, `claim` (the first claim): $1 queue name, $2 lease in ms, $3 batch size. */
export const claimSql = `
          WITH next AS MATERIALIZED (
            SELECT id FROM "${table}"
            WHERE queue_name = $1
              AND available_at <= now()
              AND (delivered_at IS NULL OR delivered_at < now() - $2::float8 * interval '1 millisecond')
            ORDER BY available_at, id
            LIMIT $3
            FOR UPDATE SKIP LOCKED
          )${claimed}`

/**
 * src/layers/PgTransport.ts, `ackAndClaim` (every later claim: it deletes the previous batch): $1 the ids
 * to delete (text, cast to bigint[]), $2 queue name, $3 lease in ms, $4 batch size.
 */
export const ackAndClaimSql = `
          WITH acked AS (
            DELETE FROM "${table}" WHERE id = ANY($1::bigint[])
          ), next AS MATERIALIZED (
            SELECT id FROM "${table}"
            WHERE queue_name = $2
              AND available_at <= now()
              AND (delivered_at IS NULL OR delivered_at < now() - $3::float8 * interval '1 millisecond')
            ORDER BY available_at, id
            LIMIT $4
            FOR UPDATE SKIP LOCKED
          )${claimed}`

/** src/layers/PgTransport.ts, `ack` (what the worker writes when no claim follows soon): $1 the ids. */
export const deleteSql = `DELETE FROM "${table}" WHERE id = ANY($1::bigint[])`

/** The transport's default lease (30 s), passed as the claim's $2. */
const leaseMs = 30_000

const normalize = (sql: string) => sql.replace(/\s+/g, " ").trim()

/** Whether the statements recorded from the library include exactly our claim and delete texts. */
export const sameStatements = (
  recorded: ReadonlyArray<string>
): { readonly claim: boolean; readonly ackAndClaim: boolean } => {
  const texts = new Set(recorded.map(normalize))
  return { claim: texts.has(normalize(claimSql)), ackAndClaim: texts.has(normalize(ackAndClaimSql)) }
}

interface Row {
  readonly id: string
}

export const burnDown = (batchSize: number): BurnDownContender => ({
  id: "raw",
  label: "raw-SQL limit",
  settings: `our claim (LIMIT ${batchSize}) carrying the previous batch's DELETE, one pg connection, no library`,
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
        const { rows } = ids.length === 0
          ? await client.query<Row>(claimSql, [queue, leaseMs, batchSize])
          : await client.query<Row>(ackAndClaimSql, [ids, queue, leaseMs, batchSize])
        ids = new Array<string>(rows.length)
        if (rows.length === 0) break
        for (let i = 0; i < rows.length; i++) {
          time.start() // the no-op handler
          ids[i] = rows[i]!.id
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
