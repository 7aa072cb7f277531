/**
 * The conformance suite against MysqlIdempotencyStore on MariaDB, on a database of its own: each test gets a table
 * of its own, records age by moving `processed_at` back (the store compares with the server's clock), "another
 * purger" is a second session holding the named lock, and a run waiting behind another is a statement of the process list
 * still recording the key.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as TestServices from "effect/TestServices"
import * as MysqlIdempotencyStore from "../src/layers/MysqlIdempotencyStore.js"
import type { IdempotencyStoreShape } from "../src/services/IdempotencyStore.js"
import { exerciseIdempotencyStore } from "../src/testing/IdempotencyStoreSuite.js"
import { uniqueTable } from "./support/harness.js"
import { freshMysqlDatabase } from "./support/mysql.js"

interface MysqlStore extends IdempotencyStoreShape {
  readonly table: string
}

/**
 * Returns once a statement of the server has been waiting for 20 ms or more on the record of a key (InnoDB lists a
 * `LOCK WAIT` only for some waits; the process list shows every statement still running, and recording a key takes
 * well under a millisecond when nothing holds it).
 */
const awaitLockWaiter = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (let i = 0; i < 500; i++) {
    const rows = yield* sql<{ n: number }>`SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST
      WHERE INFO LIKE 'INSERT IGNORE INTO%' AND TIME_MS >= 20`
    if (Number(rows[0]!.n) > 0) return
    yield* Effect.sleep("10 millis")
  }
  return yield* Effect.dieMessage("no statement ever waited on a lock")
}).pipe(TestServices.provideLive)

exerciseIdempotencyStore("MysqlIdempotencyStore (MariaDB)", {
  layer: freshMysqlDatabase("idempotency_suite"),
  make: (options) =>
    Effect.gen(function*() {
      const table = uniqueTable("suite")
      const store = yield* MysqlIdempotencyStore.make({ ...options, table, autoSetup: true })
      const mysqlStore: MysqlStore = { ...store, table }
      return mysqlStore
    }),
  age: (store, by) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql`UPDATE ${sql(store.table)}
        SET processed_at = processed_at - INTERVAL ${Math.round(Duration.toMillis(by) * 1000)} MICROSECOND`),
  count: (store) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) =>
        Effect.map(sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${sql(store.table)}`, (rows) => Number(rows[0]!.n))
    ),
  awaitWaiting: () => awaitLockWaiter,
  // A session of its own holding the named lock, released (and the connection given back) with the scope.
  holdPurgeLock: (store) =>
    Effect.gen(function*() {
      const connection = yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql.reserve)
      const name = MysqlIdempotencyStore.purgeLockName(store.table)
      yield* Effect.acquireRelease(
        connection.executeRaw("SELECT GET_LOCK(?, 10)", [name]),
        () => Effect.orDie(connection.executeRaw("SELECT RELEASE_LOCK(?)", [name]))
      )
    }),
  transaction: (self) => Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(self))
})
