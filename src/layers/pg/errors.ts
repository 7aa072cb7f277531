/**
 * SQL failures of the PostgreSQL layers as typed errors: missing storage (a table or the claim function that
 * `setup` creates) is recognised, so it is reported in one line instead of being retried forever.
 *
 * @internal
 */
import type { SqlError } from "@effect/sql/SqlError"
import type { StorageNotReadyError } from "../../domain/Errors.js"
import { storageNotReady as notReady } from "../internal/storageErrors.js"

/** SQLSTATEs of a missing table (42P01) or function (42883). */
const missing = new Set(["42P01", "42883"])

/** SQLSTATE of a privilege the role lacks (42501): retrying cannot help either. */
const denied = "42501"

const codeOf = (error: SqlError): unknown => (error.cause as { code?: unknown } | undefined)?.code

/**
 * Whether a SQL failure says the storage cannot be used as it is: it does not exist (yet), or the role lacks a
 * privilege on it. Neither is retried. @internal
 */
export const isStorageUnusable = (error: SqlError): boolean => {
  const code = codeOf(error)
  return typeof code === "string" && (missing.has(code) || code === denied)
}

/** The error of a table that is missing or not granted, with what to do about it. @internal */
export const storageNotReady = (table: string, error: SqlError): StorageNotReadyError =>
  notReady(table, error, { denied: codeOf(error) === denied, grantsSection: "Least privilege" })

export {
  /** @internal */
  transportError
} from "../internal/storageErrors.js"
