/**
 * The error every SQL transport reports for a table it cannot use — missing, or not granted — with what to do about
 * it, in one line. The dialect says which case it is and where its grants are documented.
 *
 * @internal
 */
import type { SqlError } from "@effect/sql/SqlError"
import { StorageNotReadyError, TransportError } from "../../domain/Errors.js"
import { describeError, wordsOf } from "../../internal/describeError.js"

/** @internal */
export const storageNotReady = (
  table: string,
  error: SqlError,
  options: { readonly denied: boolean; readonly grantsSection: string }
): StorageNotReadyError =>
  new StorageNotReadyError({
    storage: table,
    message: options.denied
      ? `The outbox table ${table} is not usable by this role (${serverWords(error)}): grant what the README's ` +
        `"${options.grantsSection}" section lists for a worker or a producer`
      : `The outbox table ${table} is not set up (${serverWords(error)}): run \`outbox setup-transports\` ` +
        `(or TransportAdmin.setup) once before starting producers and workers; if the messages are in another ` +
        `table, name it with --table or $OUTBOX_TABLE (the transport's \`table\` option)`
  })

/** What the server said (`relation "x" does not exist`), without the client's "Failed to execute statement". */
const serverWords = (error: SqlError): string => {
  const words = typeof error.cause === "object" && error.cause !== null ? wordsOf(error.cause) : ""
  return words.length > 0 ? words : describeError(error)
}

/** A failed statement of a transport as its `TransportError`. @internal */
export const transportError = (transport: string, operation: string, error: SqlError): TransportError =>
  new TransportError({ transport, operation, message: describeError(error), cause: error })
