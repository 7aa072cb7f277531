/**
 * An in-memory transport for users' unit tests, with the semantics of the PostgreSQL one.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { ReceivedMessage } from "../domain/Envelope.js"
import { OutboxConfigError, UnknownTransportError } from "../domain/Errors.js"
import * as Identifier from "../domain/Identifier.js"
import { Transport, type TransportShape } from "../services/Transport.js"
import { defaultFailureTransport, defaultRedeliverTimeout } from "./PgTransport.js"

/**
 * A stored message, as the in-memory transport keeps it. Times are `Clock` milliseconds, so
 * `TestClock` drives delays and leases.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoredMessage {
  readonly id: string
  readonly messageId: string
  readonly body: string
  readonly headers: string
  readonly queueName: string
  readonly createdAt: number
  readonly availableAt: number
  readonly deliveredAt: number | null
  readonly deliveries: number
}

/**
 * Options: the transports and their leases (same defaults as the PostgreSQL transport).
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly transports?: Readonly<
    Record<string, { readonly redeliverTimeout?: Duration.DurationInput; readonly failureTransport?: string }>
  >
}

/**
 * The in-memory transport plus inspection for assertions.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryTransportShape extends TransportShape {
  /** Every stored message, in `(availableAt, id)` order. */
  readonly messages: Effect.Effect<ReadonlyArray<StoredMessage>>
  /** The stored messages of one transport's queue. */
  readonly messagesOf: (transport: string) => Effect.Effect<ReadonlyArray<StoredMessage>>
}

/**
 * Tag of the in-memory transport, for inspection in tests.
 *
 * @since 0.1.0
 * @category tags
 */
export class MemoryTransport
  extends Context.Tag("effect-outbox/MemoryTransport")<MemoryTransport, MemoryTransportShape>()
{}

/**
 * Builds the in-memory transport. Sends are not transactional (there is no database); everything else
 * behaves as the PostgreSQL transport does.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<MemoryTransportShape, OutboxConfigError> =>
  Effect.gen(function*() {
    const config = new Map<string, { leaseMs: number; failureQueue: string }>()
    const input = options.transports ?? { outbox: {} }
    for (const [name, o] of Object.entries(input)) {
      yield* Identifier.validateQueueName(name)
      const failure = o.failureTransport ?? defaultFailureTransport
      yield* Identifier.validateQueueName(failure)
      const lease = Duration.decodeUnknown(o.redeliverTimeout ?? defaultRedeliverTimeout)
      if (Option.isNone(lease) || !(Duration.toMillis(lease.value) > 0) || !Duration.isFinite(lease.value)) {
        return yield* new OutboxConfigError({ message: `Transport ${name}: redeliverTimeout must be positive and finite` })
      }
      config.set(name, { leaseMs: Duration.toMillis(lease.value), failureQueue: failure === name ? name : failure })
    }
    for (const { failureQueue } of Array.from(config.values())) {
      if (!config.has(failureQueue)) {
        config.set(failureQueue, { leaseMs: Duration.toMillis(defaultRedeliverTimeout), failureQueue })
      }
    }
    const rows = new Map<string, StoredMessage>()
    let sequence = 0n

    const lookup = (name: string) => {
      const found = config.get(name)
      return found !== undefined
        ? Effect.succeed(found)
        : Effect.fail(new UnknownTransportError({ transport: name, message: `Unknown transport ${JSON.stringify(name)}` }))
    }
    const ordered = () => Array.from(rows.values()).sort(byAvailability)
    const update = (id: string, f: (row: StoredMessage) => StoredMessage) => {
      const row = rows.get(id)
      if (row !== undefined) rows.set(id, f(row))
    }

    const transport: MemoryTransportShape = {
      names: Array.from(config.keys()),
      lease: (name) => Option.map(Option.fromNullable(config.get(name)), (c) => Duration.millis(c.leaseMs)),
      setup: Effect.void,
      send: (name, messages) =>
        Effect.gen(function*() {
          yield* lookup(name)
          const now = yield* Clock.currentTimeMillis
          for (const m of messages) {
            sequence += 1n
            const id = sequence.toString()
            rows.set(id, {
              id,
              messageId: m.messageId,
              body: m.body,
              headers: m.headers,
              queueName: name,
              createdAt: now,
              availableAt: now + m.delayMs,
              deliveredAt: null,
              deliveries: 0
            })
          }
        }),
      claim: (name, batchSize) =>
        Effect.gen(function*() {
          const { leaseMs } = yield* lookup(name)
          const now = yield* Clock.currentTimeMillis
          const limit = Math.max(1, Math.floor(batchSize))
          const claimed: Array<ReceivedMessage> = []
          for (const row of ordered()) {
            if (claimed.length >= limit) break
            if (row.queueName !== name || row.availableAt > now) continue
            if (row.deliveredAt !== null && row.deliveredAt >= now - leaseMs) continue
            const next = { ...row, deliveredAt: now, deliveries: row.deliveries + 1 }
            rows.set(row.id, next)
            claimed.push({
              id: next.id,
              transport: name,
              messageId: next.messageId,
              body: next.body,
              headers: next.headers,
              createdAt: new Date(next.createdAt),
              availableAt: new Date(next.availableAt),
              deliveries: next.deliveries
            })
          }
          return claimed
        }),
      ack: (_name, ids) => Effect.sync(() => ids.forEach((id) => rows.delete(id))),
      retry: (_name, id, { delay, headers }) =>
        Effect.map(Clock.currentTimeMillis, (now) =>
          update(id, (row) => ({ ...row, availableAt: now + Duration.toMillis(delay), deliveredAt: null, headers }))),
      fail: (name, id, { headers }) =>
        Effect.gen(function*() {
          const { failureQueue } = yield* Effect.orDie(lookup(name))
          const now = yield* Clock.currentTimeMillis
          update(id, (row) => ({ ...row, queueName: failureQueue, availableAt: now, deliveredAt: null, headers }))
        }),
      keepalive: (_name, ids) =>
        Effect.map(Clock.currentTimeMillis, (now) =>
          ids.forEach((id) => update(id, (row) => row.deliveredAt === null ? row : { ...row, deliveredAt: now }))),
      release: (_name, ids) =>
        Effect.sync(() => ids.forEach((id) => update(id, (row) => ({ ...row, deliveredAt: null })))),
      messages: Effect.sync(ordered),
      messagesOf: (name) => Effect.sync(() => ordered().filter((row) => row.queueName === name))
    }
    return transport
  })

/**
 * A layer providing both `Transport` and `MemoryTransport` (for inspection).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<Transport | MemoryTransport, OutboxConfigError> =>
  Layer.effectContext(
    Effect.map(make(options), (t) => Context.make(Transport, t).pipe(Context.add(MemoryTransport, t)))
  )

const byAvailability = (a: StoredMessage, b: StoredMessage): number => {
  const d = a.availableAt - b.availableAt
  if (d !== 0) return d
  const x = BigInt(a.id)
  const y = BigInt(b.id)
  return x < y ? -1 : x > y ? 1 : 0
}
