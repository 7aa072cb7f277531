/**
 * The latency scenario's producer in a process of its own (the worker process then runs only the worker,
 * as in production): the same Effect application for both contenders, each message committed with
 * `sql.withTransaction` — ours enqueues with `Outbox.dispatch`, graphile-worker's with its `add_job` SQL
 * function on the transaction's connection (the transactional way). One message per request from the parent
 * (IPC); answers with the time the COMMIT's response reached its `pg` client (`commitClock`), on the clock every
 * process of the machine shares.
 * Usage: node --import tsx bench/latency-producer.ts <ours|graphile> <database-url>
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Redacted from "effect/Redacted"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Outbox from "../src/services/Outbox.js"
import { BenchNoop, table } from "./common.js"
import { graphileAddJob } from "./latency.js"
import { commitClock } from "./latency-clock.js"

const [kind, url] = process.argv.slice(2) as [string, string]

const oursCommit = async (): Promise<(n: number) => Promise<void>> => {
  const runtime = ManagedRuntime.make(
    Outbox.layer().pipe(
      Layer.provideMerge(PgTransport.layer({ table })),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 }))
    )
  )
  const sql = await runtime.runPromise(SqlClient.SqlClient)
  return (n) => runtime.runPromise(sql.withTransaction(Outbox.dispatch(new BenchNoop({ n }))).pipe(Effect.asVoid))
}

const graphileCommit = async (): Promise<(n: number) => Promise<void>> => {
  const runtime = ManagedRuntime.make(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 }))
  const sql = await runtime.runPromise(SqlClient.SqlClient)
  return (n) => runtime.runPromise(sql.withTransaction(graphileAddJob(sql, n)).pipe(Effect.asVoid))
}

const committedAt = commitClock()
const commit = kind === "ours" ? await oursCommit() : await graphileCommit()
process.on("message", (request: { readonly n: number }) => {
  void commit(request.n).then(
    () => process.send!({ n: request.n, at: committedAt() }),
    (error: unknown) => process.send!({ n: request.n, error: String(error) })
  )
})
process.on("disconnect", () => process.exit(0))
process.send!({ ready: true })
