/**
 * The statements of index compaction: the indexes of a transport table's tables, their rows, and their rebuild.
 * Each runs on the compactor's own connection, outside any transaction (`REINDEX CONCURRENTLY` refuses one).
 *
 * @internal
 */
import type * as SqlConnection from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Effect from "effect/Effect"
import { quote } from "./identifiers.js"

type Rows<A> = Effect.Effect<ReadonlyArray<A>, SqlError>

/** `"schema"."name"` of a catalog name, which may hold any character, a dot included. */
const qualified = (schema: string, name: string): string =>
  [schema, name].map((part) => `"${part.replace(/"/g, "\"\"")}"`).join(".")

/** An index of one of the tables, as the catalog has it. @internal */
export interface IndexRow {
  readonly table_name: string
  readonly index_name: string
  readonly schema_name: string
  readonly bytes: number
  readonly valid: boolean
}

/** The statements, on one connection. @internal */
export const make = (connection: SqlConnection.Connection) => {
  const run = <A>(text: string, params: ReadonlyArray<unknown> = []): Rows<A> =>
    connection.execute(text, params, undefined) as Rows<A>
  return {
    /** A session lock: one compactor per table at a time (a second one's `REINDEX` would only wait, then redo it). */
    tryLock: (name: string) =>
      run<{ readonly locked: boolean }>("SELECT pg_try_advisory_lock(hashtext($1)) AS locked", [name]),
    unlock: (name: string) => run("SELECT pg_advisory_unlock(hashtext($1))", [name]),
    /** The indexes of the tables that exist (names as `schema.name` or `name`, unquoted). */
    indexes: (tables: ReadonlyArray<string>) =>
      run<IndexRow>(
        `SELECT c.relname AS table_name, i.relname AS index_name, n.nspname AS schema_name,
           pg_relation_size(i.oid)::float8 AS bytes, x.indisvalid AS valid
         FROM pg_index x
         JOIN pg_class c ON c.oid = x.indrelid
         JOIN pg_class i ON i.oid = x.indexrelid
         JOIN pg_namespace n ON n.oid = i.relnamespace
         WHERE x.indrelid IN (SELECT to_regclass(name) FROM unnest($1::text[]) AS name)
         ORDER BY c.relname, i.relname`,
        [tables.map(quote)]
      ),
    /** The table's rows, counted up to `limit`: no more is read than the question needs. */
    rowsUpTo: (schema: string, table: string, limit: number) =>
      run<{ readonly n: number }>(
        `SELECT count(*)::float8 AS n FROM (SELECT 1 FROM ${qualified(schema, table)} LIMIT $1) AS r`,
        [limit]
      ),
    reindex: (schema: string, index: string) => run(`REINDEX INDEX CONCURRENTLY ${qualified(schema, index)}`),
    size: (schema: string, index: string) =>
      run<{ readonly bytes: number }>("SELECT pg_relation_size(to_regclass($1))::float8 AS bytes", [
        qualified(schema, index)
      ]),
    drop: (schema: string, index: string) => run(`DROP INDEX CONCURRENTLY IF EXISTS ${qualified(schema, index)}`)
  }
}
