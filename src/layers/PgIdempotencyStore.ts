/**
 * The PostgreSQL idempotency store: one `(message_id, consumer)` row per processed message and
 * consumer, inserted in the transaction of the side effect.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Cause from "effect/Cause"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { OutboxConfigError, StorageNotReadyError, TransportError } from "../domain/Errors.js"
import * as IdempotencyKey from "../domain/IdempotencyKey.js"
import * as Identifier from "../domain/Identifier.js"
import { optionalFields } from "../internal/config.js"
import { mapConfigError } from "../internal/configError.js"
import { describeError } from "../internal/describeError.js"
import { IdempotencyStore, type IdempotencyStoreShape, type StoreError } from "../services/IdempotencyStore.js"
import { runMigrations } from "./internal/migrate.js"
import { purgeLoop, type ResolvedPurgeOptions, resolvePurgeOptions, validateRetention } from "./internal/purge.js"
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

/** The store's operations, as `TransportError.operation` names them. */
type Operation =
  | "setup"
  | "runOnce"
  | "runOnce.begin"
  | "runOnce.commit"
  | "isProcessed"
  | "purge"
  | "purge.begin"
  | "purge.commit"
  | "purge.lock"

/** The failure of the caller's effect, carried through the transaction untouched. */
class EffectFailure<E> {
  constructor(readonly cause: Cause.Cause<E>) {}
}

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

    const notReady = (relation: string): StorageNotReadyError =>
      relation === messagesTable
        ? new StorageNotReadyError({
          storage: relation,
          message: `The messages table ${relation} (the idempotency store's messagesTable) does not exist: ` +
            "run `outbox setup-transports --idempotency` or `TransportAdmin.setup`"
        })
        : new StorageNotReadyError({
          storage: table,
          message: `The idempotency table ${table} does not exist: run \`outbox setup-transports --idempotency\`, ` +
            "`IdempotencyStore.setup`, or build the store with `PgIdempotencyStore.layer({ autoSetup: true })`"
        })
    const toStoreError = (operation: Operation, error: SqlError): StoreError => {
      const relation = undefinedTable(error)
      return relation !== undefined
        ? notReady(relation)
        : new TransportError({ transport: table, operation, message: describeError(error), cause: error })
    }
    const wrap = (operation: Operation) => <A, R>(self: Effect.Effect<A, SqlError, R>) =>
      Effect.mapError(self, (error) => toStoreError(operation, error))

    /**
     * `sql.withTransaction` with its own failures typed: a failed `BEGIN` (or connection) and a failed
     * `COMMIT` — a defect in `@effect/sql` — become `TransportError`s. A failed COMMIT is ambiguous
     * (committed or not); a retry finds out through the record.
     */
    const transaction = <A, E, R>(
      operation: "runOnce" | "purge",
      body: Effect.Effect<A, E | StoreError, R>
    ): Effect.Effect<A, E | StoreError, R> =>
      sql.withTransaction(body).pipe(
        Effect.catchAllCause((cause) => {
          if (Option.isNone(Cause.failureOption(cause)) && !Cause.isInterrupted(cause)) {
            const defect = Cause.dieOption(cause)
            if (Option.isSome(defect) && isSqlError(defect.value)) {
              return Effect.fail(toStoreError(`${operation}.commit`, defect.value))
            }
          }
          return Effect.failCause(
            Cause.map(cause, (error) =>
              isSqlError(error) ? toStoreError(`${operation}.begin`, error) : error as E | StoreError)
          )
        })
      )

    /** Outside any caller's transaction: maintenance statements run on their own pool connections. */
    const isolated = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      Effect.mapInputContext(
        self,
        (context: Context.Context<R>) => Context.omit(SqlClient.TransactionConnection)(context) as Context.Context<R>
      )

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

    const runOnce: IdempotencyStoreShape["runOnce"] = <A, E, R>(
      key: IdempotencyKey.IdempotencyKey,
      effect: Effect.Effect<A, E, R>
    ) =>
      Effect.flatMap(IdempotencyKey.validate(key), (valid) =>
        transaction(
          "runOnce",
          Effect.flatMap(
            statements.record(sql, table, valid).pipe(Effect.map((rows) => rows.length > 0), wrap("runOnce")),
            (inserted) =>
              inserted
                ? effect.pipe(
                  // The effect's failure travels boxed, so that its own `SqlError`s and defects are never
                  // mistaken for the transaction's. Interruption stays interruption (and rolls back).
                  Effect.catchAllCause((cause) =>
                    Cause.isInterruptedOnly(cause)
                      ? Effect.failCause(cause as Cause.Cause<never>)
                      : Effect.fail(new EffectFailure(cause))
                  ),
                  Effect.map(Option.some)
                )
                : Effect.succeedNone
          )
        ).pipe(
          Effect.catchAllCause((cause) =>
            Effect.failCause(
              Cause.flatMap(cause, (error): Cause.Cause<E | StoreError> =>
                error instanceof EffectFailure ? (error.cause as Cause.Cause<E>) : Cause.fail(error))
            )
          )
        ))

    const isProcessed: IdempotencyStoreShape["isProcessed"] = (key) =>
      Effect.flatMap(IdempotencyKey.validate(key), (valid) =>
        statements.isProcessed(sql, table, valid).pipe(
          Effect.map((rows) => rows[0]?.processed === true),
          wrap("isProcessed")
        ))

    const deleteBatch = (o: ResolvedPurgeOptions) =>
      statements.deleteBatch(sql, table, {
        olderThanMillis: Duration.toMillis(o.olderThan),
        batchSize: o.batchSize,
        messagesTable
      }).pipe(Effect.map((rows) => rows[0]?.deleted ?? 0), wrap("purge"))

    const purge: IdempotencyStoreShape["purge"] = (purgeOptions) =>
      Effect.flatMap(
        resolvePurgeOptions(purgeOptions, retention),
        (o) =>
          purgeLoop(o, isolated(Effect.map(deleteBatch(o), Option.some))).pipe(
            Effect.map(Option.getOrElse(() => 0))
          )
      )

    // Each batch is one short transaction holding the transaction-level advisory lock, so a purger
    // that finds it taken between two batches stops there (see `statements.tryPurgeLock`).
    const exclusiveBatch = (o: ResolvedPurgeOptions) =>
      isolated(transaction(
        "purge",
        Effect.gen(function*() {
          const rows = yield* statements.tryPurgeLock(sql, lockName).pipe(wrap("purge.lock"))
          if (rows[0]?.locked !== true) return Option.none<number>()
          return Option.some(yield* deleteBatch(o))
        })
      ))

    const purgeExclusive: IdempotencyStoreShape["purgeExclusive"] = (purgeOptions) =>
      Effect.flatMap(resolvePurgeOptions(purgeOptions, retention), (o) => purgeLoop(o, exclusiveBatch(o)))

    if (options.autoSetup === true) yield* setup

    return { retention, setup, runOnce, isProcessed, purge, purgeExclusive }
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
  Layer.effect(
    IdempotencyStore,
    Effect.flatMap(mapConfigError(config), (configured) => make({ ...options, ...configured }))
  )

const isSqlError = (u: unknown): u is SqlError =>
  typeof u === "object" && u !== null && (u as { _tag?: unknown })._tag === "SqlError"

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
