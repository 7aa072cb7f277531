/**
 * Profiling aid (not part of `npm run bench`): what the enqueue costs in the dispatch scenario, by
 * variant, with 1 and 8 producers on a fresh database each:
 *
 * - `effect:none` / `effect:dispatch` — the business transaction through @effect/sql-pg without / with
 *   `Outbox.dispatch` (the transport's defaults);
 * - `pg:none` / `pg:insert` / `pg:insert+notify` — through `pg`: no enqueue, a plain `INSERT` into our
 *   table, the same `INSERT` wrapped with `pg_notify` the way the transport sends it;
 * - `pg:insert;commit` — the `INSERT` sent in the same round trip as `COMMIT` (simple query protocol).
 *
 *   npx tsx bench/dispatch-probe.ts [variants, comma-separated] [--no-fsync]
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as ManagedRuntime from "effect/ManagedRuntime"
import pg from "pg"
import * as Outbox from "../src/services/Outbox.js"
import { freshDatabase, settle, startCluster, withClient } from "./cluster.js"
import { BenchNoop, businessRow, businessTableSql, businessUpdateSql, runProducers, table } from "./common.js"
import * as Ours from "./ours.js"

const all = ["effect:none", "effect:dispatch", "pg:none", "pg:insert", "pg:insert+notify", "pg:insert;commit"]
const args = process.argv.slice(2).filter((a) => !a.startsWith("--"))
const variants = args[0] === undefined ? all : args[0].split(",")
const insert = (body: string) =>
  `INSERT INTO "${table}" (message_id, body, headers, queue_name, created_at, available_at)
   VALUES (gen_random_uuid(), ${body}, '{"type":"BenchNoop"}', 'outbox', now(), now())`

const cluster = await startCluster({ noFsync: process.argv.includes("--no-fsync"), log: console.error })
try {
  for (const producers of [1, 8]) {
    for (const variant of variants) {
      const db = await freshDatabase(cluster.adminUrl, "probe")
      await withClient(db.url, async (client) => {
        for (const statement of businessTableSql(8)) await client.query(statement)
      })
      await Ours.setup(db.url)
      await settle(db.url)
      const window = { producers, warmupMs: 300, measureMs: 2000 }
      let tps: number
      if (variant.startsWith("effect:")) {
        const runtime = ManagedRuntime.make(Ours.stack(db.url, { maxConnections: producers + 2 }))
        await runtime.runPromise(Effect.void)
        tps = await runProducers(window, (p, i) =>
          runtime.runPromise(Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            yield* sql.withTransaction(Effect.gen(function*() {
              yield* sql.unsafe(businessUpdateSql, [businessRow(p, i)])
              if (variant === "effect:dispatch") yield* Outbox.dispatch(new BenchNoop({ n: i }))
            }))
          })))
        await runtime.dispose()
      } else {
        const pool = new pg.Pool({ connectionString: db.url, max: producers })
        pool.on("error", () => {}) // an idle client cut when the database is dropped
        tps = await runProducers(window, async (p, i) => {
          const client = await pool.connect()
          try {
            await client.query("BEGIN")
            await client.query(businessUpdateSql, [businessRow(p, i)])
            const body = `{"n":${i},"_tag":"BenchNoop"}`
            if (variant === "pg:insert") await client.query(insert("$1"), [body])
            if (variant === "pg:insert+notify") {
              await client.query(
                `WITH changed AS (${insert("$1")} RETURNING 1)
                 SELECT count(*)::int AS n, pg_notify('${table}', 'outbox') FROM changed HAVING count(*) > 0`,
                [body]
              )
            }
            await client.query(
              variant === "pg:insert;commit" ? `${insert(client.escapeLiteral(body))}; COMMIT` : "COMMIT"
            )
          } finally {
            client.release()
          }
        })
        await pool.end()
      }
      console.log(
        `${variant.padEnd(18)} producers ${producers}: ${String(Math.round(tps)).padStart(5)} tx/s, ` +
          `${((1e6 / tps) * producers).toFixed(0).padStart(5)} µs per transaction`
      )
      await db.drop()
    }
  }
} finally {
  await cluster.stop()
}
process.exit(0)
