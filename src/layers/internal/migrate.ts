/**
 * Runs a store's own migrations and turns every way they can go wrong into one typed error.
 *
 * @since 0.1.0
 * @internal
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"

/**
 * Applies the migrations of `loader` not yet recorded in the migrations table `table` and returns the
 * ones it applied, as `<id>_<name>`. Concurrent runs serialise on the migrations table; a second run
 * applies nothing.
 *
 * `sql` runs both the migrator and the migrations: pass the store's client without name transforms, or
 * the migrator's own bookkeeping columns would be renamed under it. A failing migration is a defect in
 * `@effect/sql` (the whole run rolls back); here it becomes a failure, as does every `SqlError` and
 * `MigrationError`, built by `onError` from one readable line (the error and its causes, joined) and the
 * original error. Interruption stays interruption.
 *
 * @since 0.1.0
 * @category migrations
 * @internal
 */
export const runMigrations = <E, R = never>(options: {
  readonly sql: SqlClient.SqlClient
  readonly loader: Migrator.Loader<R>
  readonly table: string
  readonly onError: (detail: string, cause: unknown) => E
}): Effect.Effect<ReadonlyArray<string>, E, R> =>
  Migrator.make({})({ loader: options.loader, table: options.table }).pipe(
    Effect.provideService(SqlClient.SqlClient, options.sql),
    Effect.catchAllDefect(Effect.fail),
    Effect.mapError((error) => options.onError(describeChain(error), error)),
    Effect.map((applied) => applied.map(([id, name]) => `${id}_${name}`))
  )

/**
 * The messages of an error and of its causes, deduplicated and joined on one line:
 * `Migration "1_create" failed: Failed to execute statement: permission denied for schema public`.
 * (A `MigrationError` wraps a `SqlError`, which wraps the driver's error: the useful text is two causes deep.)
 */
const describeChain = (error: unknown): string => {
  const parts: Array<string> = []
  let current: unknown = error
  for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const message = (current as { readonly message?: unknown }).message
    if (typeof message === "string" && message.trim() !== "" && !parts.includes(message.trim())) {
      parts.push(message.trim())
    }
    current = (current as { readonly cause?: unknown }).cause
  }
  const line = parts.length > 0 ? parts.join(": ") : String(error)
  return line.replace(/\s+/g, " ")
}
