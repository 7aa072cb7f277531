/**
 * Idempotent consumers: run a handler's side effect at most once per message and consumer.
 *
 * Delivery is at-least-once: a message comes back after a crash, a lease expiry, a retry or a manual
 * requeue. An idempotent consumer records `(message id, consumer)` in the same database transaction as
 * its side effect, so the side effect and the record commit — or roll back — together, and a second
 * delivery finds the record and skips the side effect.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { Envelope } from "../domain/Envelope.js"
import type { OutboxConfigError, StorageNotReadyError, TransportError } from "../domain/Errors.js"
import * as IdempotencyKey from "../domain/IdempotencyKey.js"
import type { Tagged } from "../domain/Message.js"

/**
 * The default retention of processed-message records: 30 days.
 *
 * A record must outlive every way the same message can come back, or the duplicate it should stop
 * runs again. The horizons, shortest first:
 * - a lease expiry or a crash before the ack: one `redeliverTimeout` (30 seconds by default);
 * - automatic retries: 1 + 3 + 9 + 27 + 81 s ≈ 2 minutes with the default strategy, but hours with a
 *   larger `maxRetries` (each delay is capped at 1 hour, so 8 retries already reach ≈ 3 hours);
 * - the failure queue: messages stay there until an operator retries them, after an investigation, a
 *   weekend or a release — days, sometimes weeks later.
 *
 * 30 days covers a monthly operations cycle with margin and sits above the 7 days of NServiceBus (the
 * longest default among peers; MassTransit keeps 30 minutes, Wolverine 5). The cost is storage:
 * about messages per second × retention seconds rows of ~60 bytes plus index entries (10 messages/s
 * for 30 days ≈ 26 million rows, a few GB). Lower it for high volumes when the failure queue is
 * worked daily; `PgIdempotencyStore`'s `messagesTable` option additionally keeps the records of
 * messages still stored in the transport table (in the failure queue, for example), however old.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultRetention: Duration.Duration = Duration.days(30)

/**
 * Rows deleted per purge batch by default. Each batch is one short transaction.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultPurgeBatchSize = 1000

/**
 * Options of a purge.
 *
 * @since 0.1.0
 * @category models
 */
export interface PurgeOptions {
  /** Delete the records processed longer ago than this (default: the store's retention). */
  readonly olderThan?: Duration.DurationInput
  /** Records deleted per batch, each batch its own short transaction (default 1000). */
  readonly batchSize?: number
  /** Stop after this many batches even if old records remain (default: until none is left). */
  readonly maxBatches?: number
  /** Called after every batch (every `DELETE` statement) with the number of records it deleted. */
  readonly onBatch?: (deleted: number) => Effect.Effect<void>
}

/**
 * How a store's own storage fails: `TransportError` when the database does (connection lost, a failed
 * statement or COMMIT), `StorageNotReadyError` when its table does not exist yet (run its `setup`).
 *
 * @since 0.1.0
 * @category errors
 */
export type StoreError = TransportError | StorageNotReadyError

/**
 * @since 0.1.0
 * @category models
 */
export interface IdempotencyStoreShape {
  /** How long processed records are kept by default (what `purge` uses without `olderThan`). */
  readonly retention: Duration.Duration
  /**
   * Creates or migrates the storage; idempotent, and safe to run from several processes at once. Returns
   * the migrations it applied (`<id>_<name>`). While a store's storage does not exist, its other
   * operations fail with `StorageNotReadyError`.
   */
  readonly setup: Effect.Effect<ReadonlyArray<string>, TransportError>
  /**
   * Runs `effect` unless this key was already processed: `Some(result)` when it ran, `None` when it
   * was skipped as a duplicate.
   *
   * On PostgreSQL the record is inserted (`ON CONFLICT DO NOTHING`) in one transaction with the
   * effect, on the same connection: a new transaction, or a savepoint of the caller's. When the
   * effect fails, dies or is interrupted, the transaction rolls back with the record, so a retry runs
   * it again. A concurrent `runOnce` of the same key waits for that transaction, then skips (commit)
   * or runs (rollback). The effect's own statements join the transaction only when they use the same
   * database through `SqlClient`; other side effects (HTTP calls, e-mails) can still run twice.
   */
  readonly runOnce: <A, E, R>(
    key: IdempotencyKey.IdempotencyKey,
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<
    Option.Option<A>,
    E | StoreError | IdempotencyKey.InvalidIdempotencyKeyError,
    R
  >
  /** Whether a committed record exists for this key. */
  readonly isProcessed: (
    key: IdempotencyKey.IdempotencyKey
  ) => Effect.Effect<boolean, StoreError | IdempotencyKey.InvalidIdempotencyKeyError>
  /**
   * Deletes the records processed longer ago than `olderThan`, in bounded batches, until fewer than
   * a batch remain (or `maxBatches`). Returns the number of records deleted. It never joins the
   * caller's transaction. Several purges may run at once; use `purgeExclusive` from periodic jobs.
   */
  readonly purge: (options?: PurgeOptions) => Effect.Effect<number, StoreError | OutboxConfigError>
  /**
   * `purge` under a lock shared by every process of the store: `None` when another purger holds it,
   * otherwise `Some(deleted)`. No two purge batches ever run at once; a purger that finds the lock
   * taken between two of its batches stops there and leaves the rest to the holder.
   */
  readonly purgeExclusive: (
    options?: PurgeOptions
  ) => Effect.Effect<Option.Option<number>, StoreError | OutboxConfigError>
}

/**
 * The idempotency store service. Build one with `PgIdempotencyStore.layer` (or
 * `MemoryIdempotencyStore.layer` in unit tests).
 *
 * @since 0.1.0
 * @category tags
 */
export class IdempotencyStore
  extends Context.Tag("effect-outbox/IdempotencyStore")<IdempotencyStore, IdempotencyStoreShape>()
{}

/**
 * Runs `effect` at most once for the key, with the store in context. See `IdempotencyStoreShape.runOnce`.
 *
 * @since 0.1.0
 * @category combinators
 */
export const runOnce = <A, E, R>(
  key: IdempotencyKey.IdempotencyKey,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<
  Option.Option<A>,
  E | StoreError | IdempotencyKey.InvalidIdempotencyKeyError,
  R | IdempotencyStore
> => Effect.flatMap(IdempotencyStore, (store) => store.runOnce(key, effect))

/**
 * Runs `effect` at most once for a message (its envelope or its id) and a consumer name. The key is
 * the message's stable `messageId`, never the transport's row id.
 *
 * @example
 * ```ts
 * Handlers.handler(OrderPaid, (paid, envelope) =>
 *   IdempotencyStore.once(envelope, "invoices", Invoices.issue(paid.orderId)))
 * ```
 *
 * @since 0.1.0
 * @category combinators
 */
export const once = <A, E, R>(
  message: IdempotencyKey.MessageRef,
  consumer: string,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<
  Option.Option<A>,
  E | StoreError | IdempotencyKey.InvalidIdempotencyKeyError,
  R | IdempotencyStore
> => runOnce(IdempotencyKey.make(message, consumer), effect)

/**
 * Makes a whole handler idempotent for a consumer name: the handler runs at most once per message id
 * (skipped deliveries succeed, so the message is acked). Like `Handlers.handler`, it takes any effect — a
 * conditional of several, any success value — and infers their error and requirement types.
 *
 * @example
 * ```ts
 * Handlers.handler(OrderPaid, IdempotencyStore.idempotent("invoices")((paid, envelope) =>
 *   Invoices.issue(paid.orderId, envelope.messageId)), { name: "invoices" })
 * ```
 *
 * @since 0.1.0
 * @category combinators
 */
export const idempotent = (consumer: string) =>
<A extends Tagged, Eff extends Effect.Effect<any, any, any>>(
  handle: (message: A, envelope: Envelope<A>) => Eff
) =>
(
  message: A,
  envelope: Envelope<A>
): Effect.Effect<
  void,
  Effect.Effect.Error<Eff> | StoreError | IdempotencyKey.InvalidIdempotencyKeyError,
  Effect.Effect.Context<Eff> | IdempotencyStore
> => Effect.asVoid(once(envelope, consumer, Effect.suspend(() => handle(message, envelope))))

/**
 * Creates or migrates the store's storage, with the store in context. See `IdempotencyStoreShape.setup`.
 *
 * @since 0.1.0
 * @category accessors
 */
export const setup: Effect.Effect<ReadonlyArray<string>, TransportError, IdempotencyStore> = Effect.flatMap(
  IdempotencyStore,
  (store) => store.setup
)

/**
 * Whether a committed record exists for the key, with the store in context.
 *
 * @since 0.1.0
 * @category accessors
 */
export const isProcessed = (
  key: IdempotencyKey.IdempotencyKey
): Effect.Effect<boolean, StoreError | IdempotencyKey.InvalidIdempotencyKeyError, IdempotencyStore> =>
  Effect.flatMap(IdempotencyStore, (store) => store.isProcessed(key))

/**
 * Purges old records, with the store in context.
 *
 * @since 0.1.0
 * @category accessors
 */
export const purge = (
  options?: PurgeOptions
): Effect.Effect<number, StoreError | OutboxConfigError, IdempotencyStore> =>
  Effect.flatMap(IdempotencyStore, (store) => store.purge(options))

/**
 * Purges old records under the purge lock, with the store in context.
 *
 * @since 0.1.0
 * @category accessors
 */
export const purgeExclusive = (
  options?: PurgeOptions
): Effect.Effect<Option.Option<number>, StoreError | OutboxConfigError, IdempotencyStore> =>
  Effect.flatMap(IdempotencyStore, (store) => store.purgeExclusive(options))
