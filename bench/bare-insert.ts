/**
 * The dispatch scenario's baseline: the row `Outbox.dispatch(new BenchNoop({ n }))` writes, inserted by a plain
 * `INSERT … VALUES` through the same client stack as ours (@effect/sql-pg's `sql.withTransaction` and an `sql`
 * statement, one `ManagedRuntime`, a pool of producers + 2) into the same table (our migrations), without the
 * library: no `pg_notify`, no `RETURNING`, no encoding. Its "with ÷ without" is what writing that row costs the
 * business transaction on this stack; ours' against it is what the library adds.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Redacted from "effect/Redacted"
import * as MessageId from "../src/domain/MessageId.js"
import { businessRow, businessUpdateSql, type DispatchContender, queue, runProducers, table } from "./common.js"
import * as Ours from "./ours.js"

/** The body and headers ours writes for `BenchNoop({ n })` (as `Ours.bodySql` and `Ours.headersSql` in SQL). */
const body = (n: number) => `{"n":${n},"_tag":"BenchNoop"}`
const headers = `{"type":"BenchNoop"}`

export const dispatch: DispatchContender = {
  id: "bare-insert",
  label: "bare INSERT (baseline)",
  enqueueCall: `\`INSERT INTO ${table} (message_id, body, headers, queue_name, created_at, available_at) VALUES ` +
    "(…, now(), now())` of the row ours writes (a UUIDv7 `message_id`, the same body and headers), an `sql` " +
    "statement inside `sql.withTransaction` on the same @effect/sql-pg client, no `pg_notify`",
  keyed: false,
  run: async (url, options) => {
    await Ours.setup(url)
    await options.settle()
    const runtime = ManagedRuntime.make(
      PgClient.layer({ url: Redacted.make(url), maxConnections: options.producers + 2 })
    )
    try {
      const transaction = (producer: number, i: number) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const id = businessRow(producer, i)
          yield* sql.withTransaction(Effect.gen(function*() {
            yield* sql.unsafe(businessUpdateSql, [id])
            if (options.enqueue) {
              yield* sql`INSERT INTO ${sql(table)} (message_id, body, headers, queue_name, created_at, available_at)
                VALUES (${MessageId.make()}, ${body(id)}, ${headers}, ${queue}, now(), now())`
            }
          }))
        })
      await runtime.runPromise(Effect.void) // build the layer (pool, first connection) before the clock
      return await runProducers(
        options,
        (producer, i) => runtime.runPromise(Logger.withMinimumLogLevel(transaction(producer, i), LogLevel.Error))
      )
    } finally {
      await runtime.dispose()
    }
  }
}
