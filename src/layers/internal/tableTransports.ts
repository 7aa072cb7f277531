/**
 * What the table transports (PostgreSQL's, MySQL's) share: their options resolved — each transport's queue, lease,
 * failure transport and what a failure does to its ordering keys, validated (names, a queue used by one transport
 * only) — their row ids, and `list` over keyset pages.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { StoredMessage } from "../../domain/Envelope.js"
import { OutboxConfigError } from "../../domain/Errors.js"
import * as Identifier from "../../domain/Identifier.js"
import { defaultRedeliverTimeout } from "../../domain/Routing.js"
import { headerFilter } from "../../internal/listFilter.js"
import { failureTransports, positiveDuration } from "../../internal/transports.js"
import type { ListOptions } from "../../services/TransportAdmin.js"
import type { TransportOptions } from "../PgTransport.js"

/** One transport of the table, resolved. @internal */
export interface ResolvedTransport {
  readonly name: string
  readonly queueName: string
  readonly redeliverTimeoutMs: number
  readonly failureTransport: string
  /** A message in the failure transport holds its ordering key (`keyAfterFailure: "block"`). */
  readonly blocksKeys: boolean
}

/** Resolves the transports of the options; fails with `OutboxConfigError` on a bad name or a shared queue. @internal */
export const resolveTransports = (
  input: Readonly<Record<string, TransportOptions>>
): Effect.Effect<Map<string, ResolvedTransport>, OutboxConfigError> =>
  Effect.gen(function*() {
    if (Object.keys(input).length === 0) {
      return yield* new OutboxConfigError({ message: "At least one transport must be configured" })
    }
    const resolved = new Map<string, ResolvedTransport>()
    for (const [name, failureTransport, o] of failureTransports(input)) {
      yield* Identifier.validateQueueName(name)
      const queueName = yield* Identifier.validateQueueName(o?.queueName ?? name)
      const lease = yield* positiveDuration(
        `Transport ${name}: redeliverTimeout`,
        o?.redeliverTimeout ?? defaultRedeliverTimeout
      )
      resolved.set(name, {
        name,
        queueName,
        redeliverTimeoutMs: Duration.toMillis(lease),
        failureTransport,
        blocksKeys: o?.keyAfterFailure !== "skip"
      })
    }
    const queues = new Map<string, string>()
    for (const t of resolved.values()) {
      const other = queues.get(t.queueName)
      if (other !== undefined) {
        return yield* new OutboxConfigError({
          message: `Transports ${other} and ${t.name} use the same queue ${t.queueName}`
        })
      }
      queues.set(t.queueName, t.name)
    }
    return resolved
  })

/** Transport ids of a table are positive bigints: anything else (a longer number too) names no row. @internal */
export const isRowId = (id: string): boolean => /^\d{1,19}$/.test(id) && (id.length < 19 || id <= "9223372036854775807")

/** How many rows a filtered `list` reads per page. */
const filterPage = 1000

/**
 * `TransportAdmin.list` over a table's keyset pages (`page(after, size)`: the queue's rows with an id above `after`,
 * by id). Headers are text that may be corrupt, so the filters are matched here, page by page, not in SQL. An
 * `after` that is no row id lists nothing.
 *
 * @internal
 */
export const listRows = <Row extends { readonly id: string; readonly headers: string }, E>(
  options: ListOptions,
  page: (after: string, size: number) => Effect.Effect<ReadonlyArray<Row>, E>,
  toStored: (row: Row) => StoredMessage
): Effect.Effect<ReadonlyArray<StoredMessage>, E> =>
  Effect.gen(function*() {
    const limit = Math.max(0, Math.floor(options.max))
    if (options.after !== undefined && !isRowId(options.after)) return []
    let after = options.after ?? "0"
    const matches = headerFilter(options)
    if (matches === undefined) return limit === 0 ? [] : (yield* page(after, limit)).map(toStored)
    const found: Array<StoredMessage> = []
    while (found.length < limit) {
      const rows = yield* page(after, filterPage)
      for (const row of rows) {
        if (found.length < limit && matches(row.headers)) found.push(toStored(row))
      }
      if (rows.length < filterPage) break
      after = rows[rows.length - 1]!.id
    }
    return found
  })
