/**
 * SQL failures of the MySQL layers as typed errors: a missing table and a privilege the user lacks are told
 * apart from an outage (they are reported in one line instead of being retried forever).
 *
 * @internal
 */
import type { SqlError } from "@effect/sql/SqlError"
import { StorageNotReadyError } from "../../domain/Errors.js"
import { storageNotReady as notReady } from "../internal/storageErrors.js"

/** `ER_NO_SUCH_TABLE`. */
const noSuchTable = 1146

/** `ER_BAD_FIELD_ERROR`: a column a later migration adds is missing — the table is older than this version. */
const noSuchColumn = 1054

/** Privileges the user lacks: on a table, a column, a routine, a database. */
const denied = new Set([1142, 1143, 1370, 1044])

/**
 * `ER_BINLOG_STMT_MODE_AND_ROW_ENGINE`: the binary log is in STATEMENT format, in which InnoDB cannot log the
 * claim's READ COMMITTED writes. A setting of the server, not an outage: retrying cannot help.
 */
const statementBinlog = 1665

/** The server's error number of a failure (`mysql2`'s `errno`). @internal */
export const errnoOf = (error: SqlError): number | undefined => {
  const errno = (error.cause as { errno?: unknown } | undefined)?.errno
  return typeof errno === "number" ? errno : undefined
}

/**
 * The table a failure says does not exist, as the server names it (`db.table`), or `undefined` for any other
 * failure. @internal
 */
export const missingTable = (error: SqlError): string | undefined => {
  if (errnoOf(error) !== noSuchTable) return undefined
  const message = (error.cause as { message?: unknown } | undefined)?.message
  return (typeof message === "string" ? /Table '([^']+)' doesn't exist/.exec(message)?.[1] : undefined) ?? ""
}

/** Whether the failure names `table` (qualified or not) as the missing table. @internal */
export const isTableNamed = (named: string, table: string): boolean => named === table || named.endsWith(`.${table}`)

/** Whether the storage cannot be used as it is: missing, or not granted. Neither is retried. @internal */
export const isStorageUnusable = (error: SqlError): boolean => {
  const errno = errnoOf(error)
  return errno !== undefined &&
    (errno === noSuchTable || errno === noSuchColumn || errno === statementBinlog || denied.has(errno))
}

/** The error of a table that is missing or not granted, with what to do about it. @internal */
export const storageNotReady = (table: string, error: SqlError): StorageNotReadyError =>
  errnoOf(error) === statementBinlog
    ? new StorageNotReadyError({
      storage: table,
      message: `The outbox table ${table} cannot be claimed on this server: its binary log is in STATEMENT format, ` +
        "in which InnoDB cannot log the claim's READ COMMITTED writes; set binlog_format to ROW (or MIXED) — see the " +
        `README's "MySQL and MariaDB" section`
    })
    : notReady(table, error, { denied: denied.has(errnoOf(error) ?? 0), grantsSection: "MySQL and MariaDB" })

export {
  /** @internal */
  transportError
} from "../internal/storageErrors.js"
