/**
 * The body every SQL idempotency store shares: the record and the side effect in one transaction (the caller's
 * when there is one), typed failures of BEGIN and COMMIT, bounded purges, and `purgeExclusive` under a lock
 * another purger can see. A dialect supplies its statements, its purge lock and how it names a missing table.
 *
 * @since 0.1.0
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Cause from "effect/Cause"
import type * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { type OutboxConfigError, StorageNotReadyError, TransportError } from "../../domain/Errors.js"
import * as IdempotencyKey from "../../domain/IdempotencyKey.js"
import { mapConfigError } from "../../internal/configError.js"
import { describeError } from "../../internal/describeError.js"
import { IdempotencyStore, type IdempotencyStoreShape, type StoreError } from "../../services/IdempotencyStore.js"
import { purgeLoop, type ResolvedPurgeOptions, resolvePurgeOptions } from "./purge.js"

/**
 * The store's operations, as `TransportError.operation` names them.
 *
 * @internal
 */
export type Operation =
  | "setup"
  | "runOnce"
  | "runOnce.begin"
  | "runOnce.commit"
  | "isProcessed"
  | "purge"
  | "purge.begin"
  | "purge.commit"
  | "purge.lock"

/**
 * What a dialect gives the shared store. Every statement runs on the `SqlClient` the store was made with, and so
 * on the caller's transaction when there is one.
 *
 * @internal
 */
export interface Dialect {
  /** The validated table. */
  readonly table: string
  /** The transport table whose stored messages keep their records from purges, when configured. */
  readonly messagesTable: string | undefined
  /** How the store is set up (the dialect's migrations), already typed. */
  readonly setup: Effect.Effect<ReadonlyArray<string>, TransportError>
  /** Records the key unless it exists; `true` when this statement recorded it (waits for a concurrent writer). */
  readonly record: (key: IdempotencyKey.IdempotencyKey) => Effect.Effect<boolean, SqlError>
  readonly isProcessed: (key: IdempotencyKey.IdempotencyKey) => Effect.Effect<boolean, SqlError>
  /** Deletes one batch of records older than the window; returns how many it deleted. */
  readonly deleteBatch: (
    options: { readonly olderThanMillis: number; readonly batchSize: number }
  ) => Effect.Effect<number, SqlError>
  /**
   * Runs `body` holding the purge lock, inside the purge's transaction, or answers `None` at once when another
   * purger holds it. The lock is gone when the transaction ends, however it ends.
   */
  readonly withPurgeLock: <A, E, R>(body: Effect.Effect<A, E, R>) => Effect.Effect<Option.Option<A>, E | SqlError, R>
  /**
   * The relation a failure says does not exist (`""` when it names none: the store's own table), or `undefined`
   * for any other failure.
   */
  readonly missingRelation: (error: SqlError) => string | undefined
  /** Whether a failure says the role lacks a privilege the statement needs: retrying cannot grant it. */
  readonly denied: (error: SqlError) => boolean
  /** The README section that lists the grants, for the `StorageNotReadyError` of a privilege the role lacks. */
  readonly grantsSection: string
  /** What to run to create the table, for the `StorageNotReadyError` message. */
  readonly setupHint: string
}

/** The failure of the caller's effect, carried through the transaction untouched. */
class EffectFailure<E> {
  constructor(readonly cause: Cause.Cause<E>) {}
}

const isSqlError = (u: unknown): u is SqlError =>
  typeof u === "object" && u !== null && (u as { _tag?: unknown })._tag === "SqlError"

/**
 * The store over `sql` (without name transforms) and a dialect.
 *
 * @internal
 */
export const make = (
  sql: SqlClient.SqlClient,
  retention: Duration.Duration,
  dialect: Dialect
): IdempotencyStoreShape => {
  const { messagesTable, table } = dialect

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
          `\`IdempotencyStore.setup\`, or ${dialect.setupHint}`
      })
  const toStoreError = (operation: Operation, error: SqlError): StoreError => {
    const relation = dialect.missingRelation(error)
    if (relation !== undefined) return notReady(relation)
    // Not an outage either: a worker stops with it instead of failing every message it handles.
    if (dialect.denied(error)) {
      return new StorageNotReadyError({
        storage: table,
        message: `The idempotency store ${table} is not usable by this role (${describeError(error)}): grant what ` +
          `the README's "${dialect.grantsSection}" section lists for a worker`
      })
    }
    return new TransportError({ transport: table, operation, message: describeError(error), cause: error })
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
          Cause.map(cause, (error) => isSqlError(error) ? toStoreError(`${operation}.begin`, error) : error as E)
        )
      })
    )

  /** Outside any caller's transaction: maintenance statements run on their own pool connections. */
  const isolated = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.mapInputContext(
      self,
      (context: Context.Context<R>) => Context.omit(SqlClient.TransactionConnection)(context) as Context.Context<R>
    )

  const runOnce: IdempotencyStoreShape["runOnce"] = <A, E, R>(
    key: IdempotencyKey.IdempotencyKey,
    effect: Effect.Effect<A, E, R>
  ) =>
    Effect.flatMap(IdempotencyKey.validate(key), (valid) =>
      transaction(
        "runOnce",
        Effect.flatMap(
          wrap("runOnce")(dialect.record(valid)),
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
    Effect.flatMap(IdempotencyKey.validate(key), (valid) => wrap("isProcessed")(dialect.isProcessed(valid)))

  const deleteBatch = (o: ResolvedPurgeOptions) =>
    wrap("purge")(dialect.deleteBatch({ olderThanMillis: Duration.toMillis(o.olderThan), batchSize: o.batchSize }))

  const purge: IdempotencyStoreShape["purge"] = (purgeOptions) =>
    Effect.flatMap(
      resolvePurgeOptions(purgeOptions, retention),
      (o) =>
        purgeLoop(o, isolated(Effect.map(deleteBatch(o), Option.some))).pipe(
          Effect.map(Option.getOrElse(() => 0))
        )
    )

  // Each batch is one short transaction holding the purge lock, so a purger that finds it taken between two
  // batches stops there.
  const exclusiveBatch = (o: ResolvedPurgeOptions) =>
    isolated(transaction(
      "purge",
      Effect.mapError(
        dialect.withPurgeLock(deleteBatch(o)),
        (error) => isSqlError(error) ? toStoreError("purge.lock", error) : error
      )
    ))

  const purgeExclusive: IdempotencyStoreShape["purgeExclusive"] = (purgeOptions) =>
    Effect.flatMap(resolvePurgeOptions(purgeOptions, retention), (o) => purgeLoop(o, exclusiveBatch(o)))

  return { retention, setup: dialect.setup, runOnce, isProcessed, purge, purgeExclusive }
}

/**
 * A SQL store's layer with its options read from configuration (`config`), `options` giving the rest and the values
 * configuration does not set.
 *
 * @internal
 */
export const layerConfig = <O extends object, E, R>(
  make: (options: O) => Effect.Effect<IdempotencyStoreShape, E, R>,
  config: Config.Config<Partial<O>>,
  options: O
): Layer.Layer<IdempotencyStore, E | OutboxConfigError, R> =>
  Layer.effect(
    IdempotencyStore,
    Effect.flatMap(mapConfigError(config), (configured) => make({ ...options, ...configured }))
  )
