import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as TestServices from "effect/TestServices"
import type { ReceivedMessage } from "../../src/domain/Envelope.js"
import type { StorageNotReadyError, TransportError, UnknownTransportError } from "../../src/domain/Errors.js"
import type { Routing } from "../../src/domain/Routing.js"
import * as PgSession from "../../src/layers/pg/PgSession.js"
import * as PgTransport from "../../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport, type TransportShape } from "../../src/services/Transport.js"

export { pgLayer } from "./database.js"

let tables = 0

/** A unique table name for one test. */
export const uniqueTable = (prefix = "outbox") => `${prefix}_${process.pid}_${++tables}`

/** Outbox, transport (set up on build), retry strategy and handlers over the SqlClient in context. */
export const outboxStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(options: {
  readonly handlers: Hs
  readonly table: string
  readonly transports?: PgTransport.Options["transports"]
  readonly retry?: ScheduleRetryStrategy.Options
  readonly routing?: Routing
}) =>
  Layer.mergeAll(
    Outbox.layer(options.routing),
    Handlers.layer(options.handlers),
    ScheduleRetryStrategy.layer(options.retry)
  ).pipe(
    Layer.provideMerge(
      PgTransport.layer({ table: options.table, transports: options.transports ?? { outbox: {} }, autoSetup: true })
    )
  )

/** One claim of `transport` in a session of its own (opened and closed around it), as a worker would claim. */
export const claimWith = (
  backend: TransportShape,
  transport: string,
  batchSize: number,
  acks: ReadonlyArray<string> = []
): Effect.Effect<ReadonlyArray<ReceivedMessage>, TransportError | UnknownTransportError | StorageNotReadyError> =>
  Effect.scoped(
    Effect.flatMap(backend.open([transport]), (session) => session.claim(transport, batchSize, acks))
  ).pipe(Effect.map((claimed) => claimed.messages))

/** `claimWith` on the `Transport` in context. */
export const claimNow = (transport: string, batchSize: number) =>
  Effect.flatMap(Transport, (backend) => claimWith(backend, transport, batchSize))

/**
 * The pids of this database's worker-session connections (`application_name = 'effect-outbox worker'`), with
 * `state` when given (for example `idle`: the session's statement has answered).
 */
export const workerConnections = (state?: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ pid: number }>`SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND application_name = ${PgSession.applicationName}
        ${state === undefined ? sql.literal("") : sql`AND state = ${state}`}`).pipe(
      Effect.map((rows) => rows.map((r) => r.pid))
    )

/** Until some session of this database waits on a lock (a blocked `INSERT … ON CONFLICT`); on real time. */
export const awaitLockWaiter = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (let i = 0; i < 500; i++) {
    const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`
    if (rows[0]!.n > 0) return
    yield* Effect.sleep("10 millis")
  }
  return yield* Effect.dieMessage("no session ever waited on a lock")
}).pipe(TestServices.provideLive)
