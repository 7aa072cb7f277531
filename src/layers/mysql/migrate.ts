/**
 * The migrations of the MySQL dialect's tables. MySQL commits every DDL statement on its own, so `@effect/sql`'s
 * `Migrator` (which records a migration before running it, in a transaction DDL cannot roll back) could record one
 * that then failed. Here a migration is recorded after its statements succeeded, each statement is idempotent
 * (a conditional step looks in `information_schema` first, which works on MySQL and MariaDB alike), and concurrent
 * setups take turns under a named lock on one connection: a failed setup is finished by the next one.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import { describeError } from "../../internal/describeError.js"
import { lockName, nameOf, quote, schemaOf } from "./sql/identifiers.js"

/**
 * One statement of a migration: run always, or only when `unless` (a query with its parameters) finds no row.
 *
 * @internal
 */
export type Step = string | {
  readonly unless: readonly [text: string, params: ReadonlyArray<unknown>]
  readonly run: string
}

/** A migration: its id, its name and its statements, frozen. @internal */
export interface Migration {
  readonly id: number
  readonly name: string
  readonly steps: ReadonlyArray<Step>
}

/** A step that adds a column to a table unless it has it. @internal */
export const addColumn = (table: string, column: string, definition: string): Step => ({
  unless: columnExists(table, column),
  run: `ALTER TABLE ${quote(table)} ADD COLUMN ${quote(column)} ${definition}`
})

/** A step that adds an index to a table unless it has one of that name. @internal */
export const addIndex = (table: string, index: string, definition: string): Step => ({
  unless: [
    `SELECT 1 FROM information_schema.STATISTICS
     WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND INDEX_NAME = ?`,
    [schemaOf(table), nameOf(table), index]
  ],
  run: `CREATE INDEX ${quote(index)} ON ${quote(table)} ${definition}`
})

/** The query that finds a column of a table. @internal */
export const columnExists = (table: string, column: string): readonly [string, ReadonlyArray<unknown>] => [
  `SELECT 1 FROM information_schema.COLUMNS
   WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
  [schemaOf(table), nameOf(table), column]
]

/** How long a setup waits for another one to finish (seconds). */
const lockWaitSeconds = 60

const rowsOf = (result: unknown): ReadonlyArray<unknown> => Array.isArray(result) ? result : []

/**
 * Applies the migrations not yet recorded in `migrationsTable` and returns the ones it applied, as `<id>_<name>`.
 * Failures become `onError(detail, cause)`.
 *
 * @internal
 */
export const runMigrations = <E>(options: {
  readonly sql: SqlClient.SqlClient
  readonly migrationsTable: string
  readonly migrations: ReadonlyArray<Migration>
  readonly onError: (detail: string, cause: unknown) => E
}): Effect.Effect<ReadonlyArray<string>, E> => {
  const { migrationsTable } = options
  const lock = lockName("setup", migrationsTable)
  const run = (connection: Connection) =>
    Effect.gen(function*() {
      const exec = (text: string, params: ReadonlyArray<unknown> = []) => connection.executeRaw(text, params)
      yield* exec(`CREATE TABLE IF NOT EXISTS ${quote(migrationsTable)} (
        migration_id INTEGER UNSIGNED NOT NULL,
        created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
        name VARCHAR(255) NOT NULL,
        PRIMARY KEY (migration_id)
      ) ENGINE = InnoDB`)
      const done = new Set(
        rowsOf(yield* exec(`SELECT migration_id FROM ${quote(migrationsTable)}`)).map((row) =>
          Number((row as { migration_id: unknown }).migration_id)
        )
      )
      const applied: Array<string> = []
      for (const migration of options.migrations) {
        if (done.has(migration.id)) continue
        for (const step of migration.steps) {
          if (typeof step === "string") {
            yield* exec(step)
          } else if (rowsOf(yield* exec(step.unless[0], step.unless[1])).length === 0) {
            yield* exec(step.run)
          }
        }
        yield* exec(`INSERT INTO ${quote(migrationsTable)} (migration_id, name) VALUES (?, ?)`, [
          migration.id,
          migration.name
        ])
        applied.push(`${migration.id}_${migration.name}`)
      }
      return applied
    })

  const locked = (connection: Connection) =>
    Effect.acquireUseRelease(
      Effect.flatMap(connection.executeRaw("SELECT GET_LOCK(?, ?) AS locked", [lock, lockWaitSeconds]), (result) => {
        const locked = (rowsOf(result)[0] as { locked?: unknown } | undefined)?.locked
        return Number(locked) === 1 ? Effect.void : Effect.fail(new SetupLockTimeout())
      }),
      () => run(connection),
      () => Effect.ignore(connection.executeRaw("SELECT RELEASE_LOCK(?)", [lock]))
    )

  return Effect.scoped(Effect.flatMap(options.sql.reserve, locked)).pipe(
    Effect.mapError((error: SqlError | SetupLockTimeout) =>
      options.onError(
        error instanceof SetupLockTimeout
          ? `another setup held the lock ${lock} for ${lockWaitSeconds} s`
          : describeError(error),
        error
      )
    )
  )
}

class SetupLockTimeout {
  readonly _tag = "SetupLockTimeout"
}
