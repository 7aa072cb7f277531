/**
 * The MySQL and MariaDB idempotency store: one `(message_id, consumer)` row per processed message and consumer,
 * recorded with `INSERT IGNORE` in the transaction of the side effect. Its statements live in
 * `mysql/sql/idempotency.ts`.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { type OutboxConfigError, TransportError } from "../domain/Errors.js"
import * as Identifier from "../domain/Identifier.js"
import { IdempotencyStore, type IdempotencyStoreShape } from "../services/IdempotencyStore.js"
import { validateRetention } from "./internal/purge.js"
import * as SqlIdempotencyStore from "./internal/sqlIdempotencyStore.js"
import { errnoOf, isTableNamed, missingTable } from "./mysql/errors.js"
import { runMigrations } from "./mysql/migrate.js"
import * as statements from "./mysql/sql/idempotency.js"
import { lockName } from "./mysql/sql/identifiers.js"
import { config, defaultTable, type Options } from "./PgIdempotencyStore.js"

export {
  /**
   * The default table name (`outbox_idempotency`), as PostgreSQL's.
   *
   * @since 0.1.0
   * @category constants
   */
  defaultTable,
  /**
   * The store's options, as PostgreSQL's: a table (`db.table` names another database), the retention, `autoSetup`
   * and the transport table whose stored messages keep their records.
   *
   * @since 0.1.0
   * @category models
   */
  type Options
}

/**
 * The name of the lock (`GET_LOCK`) `purgeExclusive` holds while it deletes a batch. Take it with
 * `SELECT GET_LOCK(<this name>, <seconds>)` to keep purgers away during maintenance; it is released with
 * `RELEASE_LOCK` or when the session ends.
 *
 * @since 0.1.0
 * @category constants
 */
export const purgeLockName = (table: string): string => lockName("idempotency-purge", table)

/**
 * Builds the store on the `SqlClient` in context (a `MysqlClient`). The side effects given to `runOnce` must use
 * the same database through `SqlClient` to share its transaction. Until the table is set up, its operations fail
 * with `StorageNotReadyError`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<IdempotencyStoreShape, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const table = yield* Identifier.validateTableName(options.table ?? defaultTable, 48)
    const messagesTable = options.messagesTable === undefined
      ? undefined
      : yield* Identifier.validateTableName(options.messagesTable)
    const retention = yield* validateRetention(options.retention)
    const lock = purgeLockName(table)

    const setup = runMigrations({
      sql,
      migrationsTable: `${table}_migrations`,
      migrations: statements.migrations(table),
      onError: (detail, cause) =>
        new TransportError({
          transport: table,
          operation: "setup",
          message: `Setup of ${table} failed: ${detail}`,
          cause
        })
    })

    const store = SqlIdempotencyStore.make(sql, retention, {
      table,
      messagesTable,
      setup,
      // The affected rows are the answer: the statement returns no row.
      record: (key) =>
        Effect.map(
          statements.record(sql, table, key).raw,
          (result) => (result as { affectedRows?: number }).affectedRows === 1
        ),
      isProcessed: (key) =>
        Effect.map(statements.isProcessed(sql, table, key), (rows) => Number(rows[0]?.processed) === 1),
      deleteBatch: ({ batchSize, olderThanMillis }) =>
        Effect.map(
          statements.deleteBatch(sql, table, { olderThanMillis, batchSize, messagesTable }).raw,
          (result) => (result as { affectedRows?: number }).affectedRows ?? 0
        ),
      // A named lock belongs to the connection, not the transaction: released when the batch ends, however it ends
      // (a lost connection releases it on the server).
      withPurgeLock: (body) =>
        Effect.acquireUseRelease(
          Effect.map(statements.getLock(sql, lock, 0), (rows) => Number(rows[0]?.locked) === 1),
          (locked) => locked ? Effect.map(body, Option.some) : Effect.succeedNone,
          (locked) => locked ? Effect.ignore(statements.releaseLock(sql, lock)) : Effect.void
        ),
      missingRelation: (error) => {
        const named = missingTable(error)
        return named === undefined
          ? undefined
          : messagesTable !== undefined && isTableNamed(named, messagesTable)
          ? messagesTable
          : ""
      },
      // Privileges the user lacks on a table or a column.
      denied: (error) => {
        const errno = errnoOf(error)
        return errno === 1142 || errno === 1143
      },
      grantsSection: "MySQL and MariaDB",
      setupHint: "build the store with `MysqlIdempotencyStore.layer({ autoSetup: true })`"
    })
    if (options.autoSetup === true) yield* setup
    return store
  })

/**
 * The store layer over the `SqlClient` in context (for example `MysqlClient.layer`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<IdempotencyStore, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Layer.effect(IdempotencyStore, make(options))

/**
 * The store layer with its table and retention read from configuration (`OUTBOX_IDEMPOTENCY_TABLE`,
 * `OUTBOX_IDEMPOTENCY_RETENTION`, `OUTBOX_IDEMPOTENCY_MESSAGES_TABLE`, as `PgIdempotencyStore.config`); `options`
 * gives the rest.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Options = {}
): Layer.Layer<IdempotencyStore, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  SqlIdempotencyStore.layerConfig(make, config, options)
