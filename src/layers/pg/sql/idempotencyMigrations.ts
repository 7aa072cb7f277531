/**
 * The migrations of the PostgreSQL idempotency table, as frozen text.
 *
 * Each entry holds its own SQL literally and shares no builder with the statements or with any other
 * migration: a migration that has shipped must mean the same on every fresh install, whatever later
 * versions change. Only the table name (and the index name derived from it inside the entry) is
 * interpolated, as an identifier. A change to the schema is a new entry with the next id; never edit an
 * entry that has shipped.
 *
 * @since 0.1.0
 * @internal
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"

/**
 * The migrations for a (validated) table name, in order; each is idempotent on its own.
 *
 * @since 0.1.0
 * @category migrations
 * @internal
 */
export const migrations = (table: string): Migrator.Loader =>
  Migrator.fromRecord({
    "1_create_idempotency": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      // 63 bytes is PostgreSQL's identifier limit; the name is cut, never the suffix.
      const processedAtIndex = `${table.replace(/\./g, "_").slice(0, 63 - 17)}_processed_at_idx`
      yield* sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
        message_id uuid NOT NULL,
        consumer varchar(190) NOT NULL,
        processed_at timestamptz(3) NOT NULL DEFAULT now(),
        PRIMARY KEY (message_id, consumer)
      )`
      yield* sql`CREATE INDEX IF NOT EXISTS ${sql(processedAtIndex)} ON ${sql(table)} (processed_at)`
    })
  })
