/**
 * Identifiers of the MySQL dialect, for statements kept as text (migrations, the claim). Table names reach here
 * validated (`Identifier.validateTableName`: letters, digits and `_`), so quoting only guards reserved words.
 *
 * @internal
 */
import { createHash } from "node:crypto"

/** `db.name` → `` `db`.`name` ``, as `@effect/sql-mysql2` quotes identifiers. @internal */
export const quote = (name: string): string =>
  name.split(".").map((part) => `\`${part.replace(/`/g, "``")}\``).join(".")

/** The table's own name, without its database. @internal */
export const nameOf = (table: string): string => table.includes(".") ? table.split(".")[1]! : table

/** The table's database, or `null`: the connection's. @internal */
export const schemaOf = (table: string): string | null => table.includes(".") ? table.split(".")[0]! : null

/**
 * The name of a named lock (`GET_LOCK`) of a table: what it guards and a hash of the table — MySQL limits lock
 * names to 64 characters, and tables may be qualified with their database.
 *
 * @internal
 */
export const lockName = (purpose: string, table: string): string =>
  `effect-outbox:${purpose}:${createHash("sha1").update(table).digest("hex").slice(0, 32)}`

/** An index name of a table: its name cut to fit MySQL's 64 characters with the suffix. @internal */
export const indexName = (table: string, suffix: string): string =>
  `${nameOf(table).slice(0, 64 - suffix.length)}${suffix}`
