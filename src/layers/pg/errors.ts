/**
 * SQL failures of the PostgreSQL layers as typed errors: missing storage (a table or the claim function that
 * `setup` creates) is recognised, so it is reported in one line instead of being retried forever.
 *
 * @internal
 */
import type { SqlError } from "@effect/sql/SqlError"
import { StorageNotReadyError, TransportError } from "../../domain/Errors.js"
import { describeError } from "../../internal/describeError.js"

/** SQLSTATEs of a missing table (42P01) or function (42883). */
const missing = new Set(["42P01", "42883"])

/** Whether a SQL failure says the storage does not exist (yet). @internal */
export const isStorageMissing = (error: SqlError): boolean => {
  const code = (error.cause as { code?: unknown } | undefined)?.code
  return typeof code === "string" && missing.has(code)
}

/** The error of a missing table, with what to do about it. @internal */
export const storageNotReady = (table: string, error: SqlError): StorageNotReadyError =>
  new StorageNotReadyError({
    storage: table,
    message: `The outbox table ${table} is not set up (${describeError(error)}): run \`outbox setup-transports\` ` +
      `(or TransportAdmin.setup) once before starting producers and workers`
  })

/** @internal */
export const transportError = (transport: string, operation: string, error: SqlError): TransportError =>
  new TransportError({ transport, operation, message: describeError(error), cause: error })
