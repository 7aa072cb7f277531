/**
 * A table transport's options resolved (PostgreSQL's, MySQL's): each transport's queue, lease, failure transport and what a
 * failure does to its ordering keys, validated (names, a queue used by one transport only).
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { OutboxConfigError } from "../../domain/Errors.js"
import * as Identifier from "../../domain/Identifier.js"
import { defaultRedeliverTimeout } from "../../domain/Routing.js"
import { failureTransports, positiveDuration } from "../../internal/transports.js"
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
