/**
 * The header filters of `TransportAdmin.list`, as one predicate on the stored headers text: every backend matches
 * them the same way.
 *
 * @internal
 */
import * as Either from "effect/Either"
import * as Headers from "../domain/Headers.js"
import type { ListOptions } from "../services/TransportAdmin.js"

/**
 * The predicate of `options`' header filters, or `undefined` when it has none (every row matches). Headers are text
 * that may be corrupt: they are decoded here, and headers that cannot be decoded match no filter.
 *
 * @internal
 */
export const headerFilter = (options: ListOptions): ((headers: string) => boolean) | undefined => {
  const { errorTag, originalTransport, type } = options
  if (type === undefined && errorTag === undefined && originalTransport === undefined) return undefined
  return (raw) => {
    const decoded = Headers.decode(raw)
    if (Either.isLeft(decoded)) return false
    const headers = decoded.right
    return (type === undefined || headers.type === type) &&
      (errorTag === undefined || headers.errorDetails?.tag === errorTag) &&
      (originalTransport === undefined || headers.originalTransport === originalTransport)
  }
}
