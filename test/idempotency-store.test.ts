/**
 * The conformance suite against PgIdempotencyStore, on a database of its own: each test gets a table of its
 * own, records age by moving `processed_at` back (the store compares with the database's `now()`), and
 * "another purger" is a second session holding the advisory lock. The PostgreSQL-only behaviour is in
 * idempotency-postgres.test.ts.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import type { IdempotencyStoreShape } from "../src/services/IdempotencyStore.js"
import { exerciseIdempotencyStore } from "../src/testing/IdempotencyStoreSuite.js"
import { freshDatabase } from "./support/database.js"
import { awaitLockWaiter, uniqueTable } from "./support/harness.js"

interface PgStore extends IdempotencyStoreShape {
  readonly table: string
}

exerciseIdempotencyStore("PgIdempotencyStore", {
  layer: freshDatabase(),
  make: (options) =>
    Effect.gen(function*() {
      const table = uniqueTable("suite")
      const store = yield* PgIdempotencyStore.make({ ...options, table, autoSetup: true })
      const pgStore: PgStore = { ...store, table }
      return pgStore
    }),
  age: (store, by) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql`UPDATE ${sql(store.table)}
        SET processed_at = processed_at - ${Duration.toMillis(by)}::float8 * interval '1 millisecond'`),
  count: (store) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(store.table)}`, (rows) => rows[0]!.n)
    ),
  awaitWaiting: () => awaitLockWaiter,
  // A session of its own, in a transaction holding the lock; rolled back before the connection goes back to the
  // pool, so the lock never outlives the scope.
  holdPurgeLock: (store) =>
    Effect.gen(function*() {
      const connection = yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql.reserve)
      yield* Effect.acquireRelease(
        Effect.zipRight(
          connection.executeRaw("BEGIN", []),
          connection.executeRaw("SELECT pg_advisory_xact_lock(hashtext($1))", [
            PgIdempotencyStore.purgeLockName(store.table)
          ])
        ),
        () => Effect.orDie(connection.executeRaw("ROLLBACK", []))
      )
    }),
  transaction: (self) => Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(self))
})
