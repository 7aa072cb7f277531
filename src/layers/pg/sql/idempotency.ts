/**
 * Every statement of the PostgreSQL idempotency store, in one place. Each builder takes the store's
 * `SqlClient` (without name transforms) and its table name, already checked by
 * `Identifier.validateTableName`: identifiers are the only interpolated text, every value is bound.
 * The migrations that create the table are frozen apart, in `idempotencyMigrations.ts`.
 *
 * @since 0.1.0
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type * as Statement from "@effect/sql/Statement"
import type { IdempotencyKey } from "../../../domain/IdempotencyKey.js"

/**
 * Inserts the key's record unless it exists: one row when this statement inserted it, none when the
 * key was already recorded. A record inserted but not yet committed by another transaction makes the
 * statement wait for that transaction's outcome; that wait is what serialises concurrent runs of a key.
 *
 * @since 0.1.0
 * @category statements
 * @internal
 */
export const record = (
  sql: SqlClient.SqlClient,
  table: string,
  key: IdempotencyKey
): Statement.Statement<{ readonly inserted: number }> =>
  sql`INSERT INTO ${sql(table)} (message_id, consumer) VALUES (${key.messageId}::uuid, ${key.consumer})
    ON CONFLICT (message_id, consumer) DO NOTHING
    RETURNING 1 AS inserted`

/**
 * Whether the key's record exists (committed, or written earlier by the transaction it runs in).
 *
 * @since 0.1.0
 * @category statements
 * @internal
 */
export const isProcessed = (
  sql: SqlClient.SqlClient,
  table: string,
  key: IdempotencyKey
): Statement.Statement<{ readonly processed: boolean }> =>
  sql`SELECT EXISTS (
      SELECT 1 FROM ${sql(table)} WHERE message_id = ${key.messageId}::uuid AND consumer = ${key.consumer}
    ) AS processed`

/**
 * One bounded purge batch: deletes at most `batchSize` of the oldest records processed more than
 * `olderThanMillis` ago and returns how many it deleted. With `messagesTable`, a record whose message is
 * still stored there is kept.
 *
 * The ctids are selected and locked (`FOR UPDATE … SKIP LOCKED`) in the same statement that deletes
 * them, so they still name the selected rows, and concurrent purges take disjoint rows instead of
 * waiting for each other.
 *
 * @since 0.1.0
 * @category statements
 * @internal
 */
export const deleteBatch = (
  sql: SqlClient.SqlClient,
  table: string,
  options: {
    readonly olderThanMillis: number
    readonly batchSize: number
    readonly messagesTable: string | undefined
  }
): Statement.Statement<{ readonly deleted: number }> => {
  const guard = options.messagesTable === undefined
    ? sql.literal("")
    : sql`AND NOT EXISTS (SELECT 1 FROM ${sql(options.messagesTable)} m WHERE m.message_id = i.message_id)`
  return sql`WITH doomed AS (
      SELECT i.ctid FROM ${sql(table)} AS i
      WHERE i.processed_at < now() - ${options.olderThanMillis}::float8 * interval '1 millisecond'
        ${guard}
      ORDER BY i.processed_at
      LIMIT ${options.batchSize}
      FOR UPDATE OF i SKIP LOCKED
    ), gone AS (
      DELETE FROM ${sql(table)} WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
    )
    SELECT count(*)::int AS deleted FROM gone`
}

/**
 * Tries the purge lock: a transaction-level advisory lock on `hashtext(lockName)`, so it is released on
 * commit, rollback, interruption or a lost connection, and never left behind on a pooled connection.
 * Must run inside a transaction; `locked` is `false` when another session holds it.
 *
 * @since 0.1.0
 * @category statements
 * @internal
 */
export const tryPurgeLock = (
  sql: SqlClient.SqlClient,
  lockName: string
): Statement.Statement<{ readonly locked: boolean }> =>
  sql`SELECT pg_try_advisory_xact_lock(hashtext(${lockName})) AS locked`
