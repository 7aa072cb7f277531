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
import * as PubSub from "effect/PubSub"
import * as Queue from "effect/Queue"
import type { ReceivedMessage, StoredMessage } from "../domain/Envelope.js"
import type { OutboxConfigError } from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import * as Identifier from "../domain/Identifier.js"
import { defaultRedeliverTimeout } from "../domain/Routing.js"
import { compareIds } from "../internal/compareIds.js"
import { headerFilter } from "../internal/listFilter.js"
import {
  checkKnown,
  failureTransports,
  positiveDuration,
  rowCapabilities,
  unknownTransport
} from "../internal/transports.js"
import { type Capabilities, Transport } from "../services/Transport.js"
import { TransportAdmin, type TransportBackend } from "../services/TransportAdmin.js"

interface Row {
  readonly id: string
  readonly messageId: string
  readonly body: string
  readonly headers: string
  readonly queueName: string
  readonly createdAt: number
  readonly availableAt: number
  readonly deliveredAt: number | null
  readonly deliveries: number
  /** The deliveries charged to the message (see `Transport.start`). */
  readonly crashes: number
  /** The lease: 0 a first delivery, 1 a redelivery (the previous lease ended with no outcome), 2 one started. */
  readonly leaseState: 0 | 1 | 2
  readonly orderingKey: string | null
  /** In a failure transport: the transport whose key this message blocks (until it is retried or removed). */
  readonly blocks: string | null
}

/**
 * Options: the transports and their leases (same defaults as the PostgreSQL transport).
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly transports?: Readonly<
    Record<string, {
      readonly redeliverTimeout?: Duration.DurationInput
      readonly failureTransport?: string
      /**
       * What an ordering key does once one of its messages went to the failure transport: `block` (the default)
       * holds the key's later messages until that message is retried or removed; `skip` goes on with them.
       */
      readonly keyAfterFailure?: "block" | "skip"
    }>
  >
}

/**
 * The in-memory transport plus inspection for assertions.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryTransportShape extends TransportBackend {
  /** Every stored message, in `(availableAt, id)` order (`transport` is its queue's transport). */
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
    const config = new Map<string, { leaseMs: number; failureTransport: string; blocksKeys: boolean }>()
    for (const [name, failureTransport, o] of failureTransports(options.transports ?? { outbox: {} })) {
      yield* Identifier.validateQueueName(name)
      yield* Identifier.validateQueueName(failureTransport)
      const lease = yield* positiveDuration(
        `Transport ${name}: redeliverTimeout`,
        o?.redeliverTimeout ?? defaultRedeliverTimeout
      )
      config.set(name, {
        leaseMs: Duration.toMillis(lease),
        failureTransport,
        blocksKeys: o?.keyAfterFailure !== "skip"
      })
    }
    const rows = new Map<string, Row>()
    const hints = yield* PubSub.sliding<string>(64)
    const hint = (queue: string) => void hints.unsafeOffer(queue)
    let sequence = 0n

    const lookup = (name: string) => {
      const found = config.get(name)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(unknownTransport(name, config.keys()))
    }
    const ordered = () => Array.from(rows.values()).sort(byAvailability)
    const toStored = (row: Row): StoredMessage => ({
      id: row.id,
      transport: row.queueName,
      messageId: row.messageId,
      body: row.body,
      headers: row.headers,
      createdAt: new Date(row.createdAt),
      availableAt: new Date(row.availableAt),
      deliveredAt: row.deliveredAt === null ? null : new Date(row.deliveredAt),
      deliveries: row.deliveries,
      ...(row.orderingKey === null ? {} : { orderingKey: row.orderingKey }),
      ...(row.blocks === null ? {} : { blocksKey: true })
    })

    /** Milliseconds until the next message of a queue may become claimable (unclaimed: its availability; claimed: its lease's end). */
    const nextDue = (name: string, leaseMs: number, now: number): Option.Option<Duration.Duration> => {
      let due: number | undefined
      for (const row of rows.values()) {
        if (row.queueName !== name) continue
        const at = row.deliveredAt === null ? row.availableAt : row.deliveredAt + leaseMs
        if (due === undefined || at < due) due = at
      }
      return due === undefined ? Option.none() : Option.some(Duration.millis(Math.max(0, due - now)))
    }

    /** Per ordering key of a transport: its head (the earliest sent message still in it), and the keys blocked. */
    const keysOf = (name: string) => {
      const heads = new Map<string, string>()
      const blocked = new Set<string>()
      for (const row of rows.values()) {
        if (row.orderingKey === null) continue
        if (row.queueName === name) {
          const head = heads.get(row.orderingKey)
          if (head === undefined || compareIds(row.id, head) < 0) heads.set(row.orderingKey, row.id)
        } else if (row.blocks === name) blocked.add(row.orderingKey)
      }
      return { blocked, heads }
    }

    const claim = (name: string, batchSize: number, acks: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const { leaseMs } = yield* lookup(name)
        for (const id of acks) if (rows.get(id)?.queueName === name) rows.delete(id)
        const now = yield* Clock.currentTimeMillis
        const limit = Math.max(1, Math.floor(batchSize))
        const claimed: Array<ReceivedMessage> = []
        const { blocked, heads } = keysOf(name)
        for (const row of ordered()) {
          if (claimed.length >= limit) break
          if (row.queueName !== name || row.availableAt > now) continue
          if (row.deliveredAt !== null && row.deliveredAt >= now - leaseMs) continue
          // A key's message only as its head (the earliest sent still here), and not while a failure blocks it.
          if (row.orderingKey !== null && (heads.get(row.orderingKey) !== row.id || blocked.has(row.orderingKey))) {
            continue
          }
          // As PostgreSQL's claim: a lease that ended with no outcome after its handler started alone is a crash.
          const redelivered = row.deliveredAt !== null
          const next: Row = {
            ...row,
            deliveredAt: now,
            deliveries: row.deliveries + 1,
            crashes: redelivered && row.leaseState === 2 ? row.crashes + 1 : row.crashes,
            leaseState: redelivered ? 1 : 0
          }
          rows.set(row.id, next)
          claimed.push({
            id: next.id,
            transport: name,
            messageId: next.messageId,
            body: next.body,
            headers: next.headers,
            createdAt: new Date(next.createdAt),
            availableAt: new Date(next.availableAt),
            deliveries: next.deliveries,
            crashes: next.crashes,
            redelivered,
            ...(next.orderingKey === null ? {} : { orderingKey: next.orderingKey })
          })
        }
        return { messages: claimed, nextDue: claimed.length > 0 ? Option.none() : nextDue(name, leaseMs, now) }
      })

    /** Applies `f` to the rows of `ids` that belong to the transport's queue. */
    const updateIn = (name: string, ids: ReadonlyArray<string>, f: (row: Row) => Row) =>
      Effect.map(lookup(name), () => {
        for (const id of ids) {
          const row = rows.get(id)
          if (row !== undefined && row.queueName === name) rows.set(id, f(row))
        }
      })

    const transport: MemoryTransportShape = {
      names: Array.from(config.keys()),
      capabilities: (name) => (config.has(name) ? Option.some(capabilities) : Option.none()),
      failureTransport: (name) => Option.map(Option.fromNullable(config.get(name)), (c) => c.failureTransport),
      lease: (name) => Option.map(Option.fromNullable(config.get(name)), (c) => Duration.millis(c.leaseMs)),
      setup: Effect.succeed([]),
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
              deliveries: 0,
              crashes: 0,
              leaseState: 0,
              orderingKey: m.orderingKey ?? null,
              blocks: null
            })
          }
          if (messages.length > 0) hint(name)
        }),
      open: (names) =>
        Effect.gen(function*() {
          yield* checkKnown(names, config)
          const queues = new Set(names)
          const subscription = yield* PubSub.subscribe(hints)
          const signal = yield* Queue.sliding<void>(1)
          yield* Queue.take(subscription).pipe(
            Effect.flatMap((queue) => (queues.has(queue) ? Queue.offer(signal, undefined) : Effect.void)),
            Effect.forever,
            Effect.forkScoped
          )
          const next = Effect.zipRight(Queue.take(signal), Queue.takeAll(signal))
          return {
            transports: names,
            claim: (name, batchSize, acks) =>
              queues.has(name) ? claim(name, batchSize, acks) : Effect.fail(unknownTransport(name, names)),
            wait: (maxWait) => Effect.raceFirst(next, Effect.sleep(maxWait))
          }
        }),
      ack: (name, ids) =>
        Effect.map(lookup(name), () => {
          for (const id of ids) if (rows.get(id)?.queueName === name) rows.delete(id)
        }),
      retry: (message, { delay, headers }) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          updateIn(message.transport, [message.id], (row) => ({
            ...row,
            availableAt: now + Duration.toMillis(delay),
            deliveredAt: null,
            headers: Headers.encode(headers)
          }))),
      fail: (message, headers) =>
        Effect.gen(function*() {
          const { blocksKeys, failureTransport } = yield* lookup(message.transport)
          const now = yield* Clock.currentTimeMillis
          yield* updateIn(message.transport, [message.id], (row) => ({
            ...row,
            queueName: failureTransport,
            availableAt: now,
            deliveredAt: null,
            headers: Headers.encode(headers),
            blocks: blocksKeys && row.orderingKey !== null ? message.transport : null
          }))
          if (!blocksKeys) hint(message.transport)
        }),
      start: (message) =>
        Effect.gen(function*() {
          const { leaseMs } = yield* lookup(message.transport)
          const now = yield* Clock.currentTimeMillis
          const row = rows.get(message.id)
          if (
            row === undefined || row.queueName !== message.transport || row.leaseState !== 1 ||
            row.deliveredAt === null || row.deliveredAt < now - leaseMs
          ) return false
          rows.set(row.id, { ...row, leaseState: 2 })
          return true
        }),
      keepalive: (name, ids) =>
        Effect.flatMap(
          Clock.currentTimeMillis,
          (now) => updateIn(name, ids, (row) => row.deliveredAt === null ? row : { ...row, deliveredAt: now })
        ),
      release: (name, ids) =>
        Effect.zipRight(
          updateIn(name, ids, (row) =>
            row.deliveredAt === null
              ? row
              : { ...row, deliveredAt: null, deliveries: Math.max(0, row.deliveries - 1) }),
          Effect.sync(() => {
            if (ids.length > 0) hint(name)
          })
        ),
      list: (name, options) =>
        Effect.map(lookup(name), () => {
          const matches = headerFilter(options)
          const { after } = options
          // Ids are decimal: an `after` that is no id lists nothing, as on PostgreSQL.
          if (after !== undefined && !/^\d+$/.test(after)) return []
          return Array.from(rows.values())
            .filter((row) =>
              row.queueName === name && (after === undefined || compareIds(row.id, after) > 0) &&
              (matches === undefined || matches(row.headers))
            )
            .sort(byId)
            .slice(0, Math.max(0, Math.floor(options.max)))
            .map(toStored)
        }),
      find: (name, id) =>
        Effect.map(
          lookup(name),
          () => Option.map(Option.filter(Option.fromNullable(rows.get(id)), (row) => row.queueName === name), toStored)
        ),
      remove: (name, ids) =>
        Effect.map(lookup(name), () => {
          let removed = 0
          for (const id of ids) {
            if (rows.get(id)?.queueName === name) {
              rows.delete(id)
              removed++
            }
          }
          return removed
        }),
      move: (from, id, { headers, to }) =>
        Effect.gen(function*() {
          yield* lookup(from)
          yield* lookup(to)
          const row = rows.get(id)
          if (row === undefined || row.queueName !== from) return false
          const now = yield* Clock.currentTimeMillis
          rows.set(id, {
            ...row,
            queueName: to,
            availableAt: now,
            deliveredAt: null,
            deliveries: 0,
            crashes: 0,
            leaseState: 0,
            headers: Headers.encode(headers),
            blocks: null
          })
          hint(to)
          return true
        }),
      stats: (name) =>
        Effect.gen(function*() {
          const { failureTransport, leaseMs } = yield* lookup(name)
          const now = yield* Clock.currentTimeMillis
          let ready = 0
          let delayed = 0
          let inFlight = 0
          let failed = 0
          let oldest: number | null = null
          const blockedKeys = new Set<string>()
          for (const row of rows.values()) {
            if (row.queueName === failureTransport) failed++
            if (row.blocks === name && row.orderingKey !== null) blockedKeys.add(row.orderingKey)
            if (row.queueName !== name) continue
            const leased = row.deliveredAt !== null && row.deliveredAt >= now - leaseMs
            if (leased) inFlight++
            else if (row.availableAt > now) delayed++
            else {
              ready++
              oldest = oldest === null ? row.availableAt : Math.min(oldest, row.availableAt)
            }
          }
          return {
            transport: name,
            queue: name,
            ready,
            delayed,
            inFlight,
            failed,
            oldestReadyAgeMs: oldest === null ? null : now - oldest,
            blockedKeys: blockedKeys.size
          }
        }),
      messages: Effect.sync(() => ordered().map(toStored)),
      messagesOf: (name) => Effect.sync(() => ordered().filter((row) => row.queueName === name).map(toStored))
    }
    return transport
  })

/**
 * A layer providing `Transport`, `TransportAdmin` and `MemoryTransport` (for inspection).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<Transport | TransportAdmin | MemoryTransport, OutboxConfigError> =>
  Layer.effectContext(
    Effect.map(
      make(options),
      (t) => Context.make(Transport, t).pipe(Context.add(TransportAdmin, t), Context.add(MemoryTransport, t))
    )
  )

/** A row store's capabilities, ordering keys included. */
const capabilities: Capabilities = { ...rowCapabilities, orderingKeys: true }

const byId = (a: Row, b: Row): number => compareIds(a.id, b.id)

const byAvailability = (a: Row, b: Row): number => {
  const d = a.availableAt - b.availableAt
  return d !== 0 ? d : byId(a, b)
}
