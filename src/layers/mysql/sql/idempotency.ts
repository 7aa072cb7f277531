/**
 * Every statement of the MySQL idempotency store, in one place, and its migrations, frozen: a migration that has
 * shipped means the same on every fresh install. Only the validated table names are interpolated (quoted); every
 * value is bound. Times are the server's `UTC_TIMESTAMP(6)`, as the transport's.
 *
 * @since 0.1.0
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { IdempotencyKey } from "../../../domain/IdempotencyKey.js"
import type { Migration } from "../migrate.js"
import { indexName, quote } from "./identifiers.js"

/**
 * Records the key unless it is recorded: one affected row when this statement recorded it, none when it was. A
 * record inserted but not committed by another transaction makes the statement wait for that transaction's end
 * (the duplicate check locks the key); that wait serialises concurrent runs of a key. The key is validated (a
 * UUID, a consumer of at most 190 characters), so `IGNORE` has nothing but the duplicate to ignore.
 *
 * @internal
 */
export const record = (sql: SqlClient.SqlClient, table: string, key: IdempotencyKey) =>
  sql`INSERT IGNORE INTO ${sql(table)} (message_id, consumer, processed_at)
    VALUES (${key.messageId}, ${key.consumer}, UTC_TIMESTAMP(6))`

/** Whether the key's record exists (committed, or written earlier by the transaction it runs in). @internal */
export const isProcessed = (sql: SqlClient.SqlClient, table: string, key: IdempotencyKey) =>
  sql<{ readonly processed: number }>`SELECT EXISTS (
      SELECT 1 FROM ${sql(table)} WHERE message_id = ${key.messageId} AND consumer = ${key.consumer}
    ) AS processed`

/**
 * One bounded purge batch: deletes at most `batchSize` of the oldest records processed more than
 * `olderThanMillis` ago (the count is the statement's affected rows). With `messagesTable`, a record whose message
 * is still stored there is kept (an index probe on its `message_id`).
 *
 * @internal
 */
export const deleteBatch = (
  sql: SqlClient.SqlClient,
  table: string,
  options: { readonly olderThanMillis: number; readonly batchSize: number; readonly messagesTable: string | undefined }
) => {
  const guard = options.messagesTable === undefined
    ? sql.literal("")
    : sql`AND NOT EXISTS (SELECT 1 FROM ${sql(options.messagesTable)} AS m WHERE m.message_id = ${
      sql(table)
    }.message_id)`
  return sql`DELETE FROM ${sql(table)}
    WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ${Math.round(options.olderThanMillis * 1000)} MICROSECOND
      ${guard}
    ORDER BY processed_at
    LIMIT ${sql.literal(String(options.batchSize))}`
}

/** Takes the purge lock of the store, waiting for it at most `seconds`: `1` taken, `0` held elsewhere. @internal */
export const getLock = (sql: SqlClient.SqlClient, name: string, seconds: number) =>
  sql<{ readonly locked: number | null }>`SELECT GET_LOCK(${name}, ${seconds}) AS locked`

/** @internal */
export const releaseLock = (sql: SqlClient.SqlClient, name: string) => sql`SELECT RELEASE_LOCK(${name}) AS released`

/**
 * The migrations of a (validated) table. Consumers compare exactly (`utf8mb4_bin`), as PostgreSQL's `text`.
 *
 * @internal
 */
export const migrations = (table: string): ReadonlyArray<Migration> => [{
  id: 1,
  name: "create_idempotency",
  steps: [
    `CREATE TABLE IF NOT EXISTS ${quote(table)} (
      message_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
      consumer VARCHAR(190) NOT NULL,
      processed_at DATETIME(6) NOT NULL,
      PRIMARY KEY (message_id, consumer),
      INDEX ${quote(indexName(table, "_processed_at_idx"))} (processed_at)
    ) ENGINE = InnoDB DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`
  ]
}]
