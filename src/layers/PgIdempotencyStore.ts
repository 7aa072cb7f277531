/**
 * The PostgreSQL idempotency store: one `(message_id, consumer)` row per processed message and
 * consumer, inserted in the transaction of the side effect.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { type OutboxConfigError, TransportError } from "../domain/Errors.js"
import * as Identifier from "../domain/Identifier.js"
import { optionalFields } from "../internal/config.js"
import { IdempotencyStore, type IdempotencyStoreShape } from "../services/IdempotencyStore.js"
import { runMigrations } from "./internal/migrate.js"
import { validateRetention } from "./internal/purge.js"
import * as SqlIdempotencyStore from "./internal/sqlIdempotencyStore.js"
import * as statements from "./pg/sql/idempotency.js"
import { migrations } from "./pg/sql/idempotencyMigrations.js"

/**
 * Options of the PostgreSQL idempotency store.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Table name, optionally schema-qualified (default `outbox_idempotency`). */
  readonly table?: string
  /** How long records are kept by default (default 30 days, see `IdempotencyStore.defaultRetention`). */
  readonly retention?: Duration.DurationInput
  /** Run the migrations when the layer is built (default `false`: production runs setup explicitly). */
  readonly autoSetup?: boolean
  /**
   * The transport table (for example `messenger_messages`). When set, a purge never deletes the record
   * of a message still stored there — pending, retrying or in the failure queue — however old it is,
   * so a failed message retried months later still skips the consumers that already handled it.
   * Costs one index probe (`message_id`) per purged record.
   */
  readonly messagesTable?: string
}

/**
 * The default table name.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTable = "outbox_idempotency"

/**
 * The name whose `hashtext` is the advisory lock key of `purgeExclusive` for a table. Take
 * `pg_advisory_xact_lock(hashtext(<this name>))` to keep purgers away during maintenance.
 *
 * @since 0.1.0
 * @category constants
 */
export const purgeLockName = (table: string): string => `effect-outbox:idempotency-purge:${table}`

/**
 * Builds the store on the `SqlClient` in context. The side effects given to `runOnce` must use the
 * same database through `SqlClient` to share its transaction. Until the table is set up (`setup`,
 * `autoSetup`, or `outbox setup-transports`), its operations fail with `StorageNotReadyError`.
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
    const lockName = purgeLockName(table)

    const setup = runMigrations({
      sql,
      loader: migrations(table),
      table: `${table}_migrations`,
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
      record: (key) => Effect.map(statements.record(sql, table, key), (rows) => rows.length > 0),
      isProcessed: (key) => Effect.map(statements.isProcessed(sql, table, key), (rows) => rows[0]?.processed === true),
      deleteBatch: ({ batchSize, olderThanMillis }) =>
        Effect.map(
          statements.deleteBatch(sql, table, { olderThanMillis, batchSize, messagesTable }),
          (rows) => rows[0]?.deleted ?? 0
        ),
      // A transaction-level advisory lock (see `statements.tryPurgeLock`).
      withPurgeLock: (body) =>
        Effect.flatMap(
          statements.tryPurgeLock(sql, lockName),
          (rows) => rows[0]?.locked === true ? Effect.map(body, Option.some) : Effect.succeedNone
        ),
      missingRelation: undefinedTable,
      denied: (error) => (error.cause as { readonly code?: unknown } | undefined)?.code === "42501",
      grantsSection: "Least privilege",
      setupHint: "build the store with `PgIdempotencyStore.layer({ autoSetup: true })`"
    })
    if (options.autoSetup === true) yield* setup
    return store
  })

/**
 * The store layer over the `SqlClient` in context (for example `PgClient.layer`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<IdempotencyStore, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Layer.effect(IdempotencyStore, make(options))

/**
 * The options read from configuration: `OUTBOX_IDEMPOTENCY_TABLE`, `OUTBOX_IDEMPOTENCY_RETENTION`
 * (a duration such as `30 days`) and `OUTBOX_IDEMPOTENCY_MESSAGES_TABLE`, each optional.
 *
 * @since 0.1.0
 * @category config
 */
export const config: Config.Config<Pick<Options, "table" | "retention" | "messagesTable">> = optionalFields({
  table: Config.string("TABLE"),
  retention: Config.duration("RETENTION"),
  messagesTable: Config.string("MESSAGES_TABLE")
}).pipe(
  Config.nested("IDEMPOTENCY"),
  Config.nested("OUTBOX")
)

/**
 * The store layer with its table and retention read from configuration (see `config`); `options`
 * gives the rest (and values configuration does not set).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Options = {}
): Layer.Layer<IdempotencyStore, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  SqlIdempotencyStore.layerConfig(make, config, options)

/**
 * The relation named by an `undefined_table` error (SQLSTATE 42P01), as PostgreSQL spells it in the
 * message (`relation "app.dedupe" does not exist`; `""` if the message names none, which blames the store's
 * own table), or `undefined` for any other error.
 */
const undefinedTable = (error: SqlError): string | undefined => {
  const cause = error.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
  if (cause?.code !== "42P01") return undefined
  const named = typeof cause.message === "string" ? /relation "([^"]+)" does not exist/.exec(cause.message) : null
  return named?.[1] ?? ""
}
