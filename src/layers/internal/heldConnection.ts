/**
 * One pooled connection held across many statements, for the worker's hot path (its claims). A statement
 * through `@effect/sql`'s template runs a span, a scope and a pool checkout each time; on a held connection with
 * precompiled text it is a plain `execute` (see BENCHMARKS.md, "the worker's hot path"). The connection carries
 * an `application_name` while held, so operators (and tests) can tell it in `pg_stat_activity`, and gets the
 * pool's default back when released.
 *
 * One statement at a time: while one is in flight, another caller (a worker's claims never overlap, but a
 * fiber it forked might) runs on the pool instead — so interrupting a statement cancels that one and no other,
 * and nobody waits behind it. A failed statement gives the connection back and is tried once more on a fresh
 * one: a backend killed while idle costs one retry, not a worker error.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"

/** @internal */
export interface HeldConnection {
  /**
   * Runs `text` with `params` on the held connection (taken from the pool on first use), or what `busy` returns
   * when a statement is already in flight on it.
   */
  readonly execute: <A extends object>(
    text: string,
    params: ReadonlyArray<unknown>,
    busy: () => Effect.Effect<ReadonlyArray<A>, SqlError>
  ) => Effect.Effect<ReadonlyArray<A>, SqlError>
  /** Gives the connection back to the pool (the next `execute` takes one again). */
  readonly release: Effect.Effect<void>
}

interface Held {
  readonly connection: Connection
  readonly scope: Scope.CloseableScope
}

/** @internal */
export const make = (sql: SqlClient.SqlClient, applicationName: string): HeldConnection => {
  let held: Held | undefined
  let inFlight = false
  const done = Effect.sync(() => {
    inFlight = false
  })

  const drop = (h: Held) =>
    Effect.suspend(() => {
      if (held === h) held = undefined
      return h.connection.execute("RESET application_name", [], undefined).pipe(
        Effect.ignore,
        Effect.zipRight(Scope.close(h.scope, Exit.void))
      )
    })

  const acquire = Effect.flatMap(Scope.make(), (scope) =>
    sql.reserve.pipe(
      Scope.extend(scope),
      Effect.tap((connection) =>
        connection.execute("SELECT set_config('application_name', $1, false)", [applicationName], undefined)
      ),
      Effect.map((connection): Held => (held = { connection, scope })),
      Effect.onError(() => Scope.close(scope, Exit.void))
    ))

  const onFresh = (text: string, params: ReadonlyArray<unknown>) =>
    Effect.flatMap(acquire, (h) => Effect.tapError(h.connection.execute(text, params, undefined), () => drop(h)))

  const execute = <A extends object>(
    text: string,
    params: ReadonlyArray<unknown>,
    busy: () => Effect.Effect<ReadonlyArray<A>, SqlError>
  ): Effect.Effect<ReadonlyArray<A>, SqlError> =>
    Effect.suspend(() => {
      if (inFlight) return busy()
      inFlight = true
      const h = held
      const run = h === undefined
        ? onFresh(text, params)
        : Effect.catchAll(h.connection.execute(text, params, undefined), () =>
          Effect.zipRight(drop(h), onFresh(text, params)))
      return Effect.onExit(run, () =>
        done) as Effect.Effect<ReadonlyArray<A>, SqlError>
    })

  const release = Effect.suspend(() => held === undefined ? Effect.void : drop(held))

  return { execute, release }
}
