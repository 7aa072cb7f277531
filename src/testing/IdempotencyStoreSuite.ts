/**
 * The conformance suite of `IdempotencyStore`: the contract every store shares, as `@effect/vitest`
 * tests that any implementation can run against itself, the in-memory and PostgreSQL stores included.
 *
 * @example
 * ```ts
 * // test/my-store.test.ts
 * import { exerciseIdempotencyStore } from "effect-outbox/testing"
 *
 * exerciseIdempotencyStore("my store", {
 *   make: (options) => MyStore.make(options),
 *   age: (store, by) => MyStore.backdate(store, by),
 *   count: (store) => MyStore.count(store),
 *   awaitWaiting: () => MyStore.awaitLockWaiter,
 *   holdPurgeLock: (store) => MyStore.lockAsAnotherPurger(store)
 * })
 * ```
 *
 * @since 0.1.0
 */
import { layer } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type { IdempotencyStoreShape } from "../services/IdempotencyStore.js"
import * as Keys from "./idempotency/keys.js"
import * as Purges from "./idempotency/purges.js"
import * as Runs from "./idempotency/runs.js"

/**
 * How the suite makes, inspects and drives one kind of store. `S` is what `make` returns (a store plus
 * whatever the other members need to find its storage again, such as its table name), `R` what `layer`
 * provides. A member's failure fails the test that called it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Backend<S extends IdempotencyStoreShape, R = never> {
  /**
   * What the stores need, built once for the whole suite and shared by its tests: a database for a
   * store over SQL. Omit it when the members need nothing from the context.
   */
  readonly layer?: Layer.Layer<R, unknown>
  /**
   * A new store, set up and empty, that sees no record of any other test (its own table, for example).
   * Fails with an `OutboxConfigError` when `retention` is not a positive duration.
   */
  readonly make: (options: { readonly retention?: Duration.DurationInput }) => Effect.Effect<S, unknown, R>
  /**
   * Makes every record the store holds `by` older, as if it had been recorded that much earlier: a
   * store that reads the `Clock` advances `TestClock`, one that reads the database's `now()` moves its
   * timestamps back.
   */
  readonly age: (store: S, by: Duration.Duration) => Effect.Effect<void, unknown, R>
  /** How many records the store holds. */
  readonly count: (store: S) => Effect.Effect<number, unknown, R>
  /**
   * Returns once a `runOnce`, forked while another `runOnce` of the same key is running, waits behind
   * it (PostgreSQL: a backend waits on a lock); it must not return before that.
   */
  readonly awaitWaiting: (store: S) => Effect.Effect<void, unknown, R>
  /** Takes the store's purge lock as another purger, another process, would; released with the scope. */
  readonly holdPurgeLock: (store: S) => Effect.Effect<void, unknown, R | Scope.Scope>
  /**
   * The capability to join a caller's transaction: runs `self` inside one, so that the records of the
   * store's operations in `self` commit or roll back with it (PostgreSQL: `sql.withTransaction`). Omit it
   * for a store without transactions; the tests of the capability are then skipped.
   */
  readonly transaction?: <A, E, R2>(self: Effect.Effect<A, E, R2>) => Effect.Effect<A, unknown, R | R2>
}

/**
 * Registers the conformance tests of an `IdempotencyStore` under `describe(name)`: one run per
 * (message id, consumer), failures, defects and interruptions recording nothing, concurrent runs of a key
 * waiting for each other, batched and windowed purges, `purgeExclusive`, key and option validation, and,
 * when the backend has the capability, records joining the caller's transaction. The tests run under
 * `TestClock`, which the suite's tests share (through `layer`): they only ever move time forward and
 * compare relative ages.
 *
 * @since 0.1.0
 * @category conformance
 */
export const exerciseIdempotencyStore = <S extends IdempotencyStoreShape, R = never>(
  name: string,
  backend: Backend<S, R>
): void => {
  // Without a layer the members need nothing from the context (R is never).
  const services = backend.layer ?? (Layer.empty as unknown as Layer.Layer<R>)
  const { age, count } = backend
  const make = (options: { readonly retention?: Duration.DurationInput } = {}) => backend.make(options)

  layer(services)(name, (it) => {
    const context = { it, backend, make, age, count }
    Runs.register(context)
    Purges.register(context)
    Keys.register(context)
  })
}
