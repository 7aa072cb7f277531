/**
 * The RabbitMQ transport: AMQP 0-9-1 through `amqplib`, with publisher confirms and manual acks.
 *
 * Mapping of the `Transport` and `TransportAdmin` operations onto a broker:
 *
 * | operation | on RabbitMQ |
 * |---|---|
 * | `send` | publish persistent, `mandatory`, on a confirm channel; succeeds only when the broker acks every message. A nack, a returned (unroutable) message, a closed channel or lost connection, or no confirm within `confirmTimeout` is a `TransportError` — the caller (the outbox worker, for a forwarder) retries, so nothing is lost; a failure after a partial publish can duplicate, never lose |
 * | `open` | a session holding each of its transports' consumer (`basic.consume`, manual acks, `prefetch` per consumer) and waiting for hints. When the last session of a transport closes (no worker runs), its consumer is cancelled and its buffer handed back to the broker |
 * | `Session.claim` | `basic.ack` of the acks first, then up to `batchSize` messages from the consumer's local buffer. When the buffer holds fewer and the broker reports more ready, it waits for them — until they are in, deliveries pause, or `claimWait` passes; otherwise it returns at once, possibly with none. `nextDue` is always `None`: delays live in the broker |
 * | `Session.wait` | a hint per delivery into the buffer, per release and per lost connection |
 * | `ack` | `basic.ack` by delivery tag (the transport id is `<consumer serial>.<delivery tag>`) |
 * | `retry` | publishes a copy with the new headers to a delay queue `<queue>.delay.<ms>` (`x-message-ttl` = the delay, dead-lettered back through the exchange with the queue's routing key, `x-expires` so unused ones vanish), waits for the confirm, then acks the original |
 * | `fail` | publishes a copy with the new headers to the failure transport's queue, confirm, then ack. A failure transport on another backend (the recommended PostgreSQL `failed`) is reached through `TransportRouter` |
 * | `release` | `basic.nack` with requeue |
 * | `keepalive`, `lease` | nothing to do: the broker holds unacked messages until their channel closes |
 * | `capabilities` | no leases, no browsing, deliveries not counted, ids not stable (every redelivery and every retry or fail copy has a new one), acks not carried by the claim |
 * | `setup` | declares the exchange, each transport's durable queue (with its `queueArguments`) and its binding |
 * | `stats` | `ready` from `queue.declare` (passive); `inFlight` is what this process holds; `delayed` is not known (0) |
 * | `list`, `find`, `remove`, `move` | a `TransportError`: a broker cannot browse a queue or take a message out by id |
 *
 * Messages: the AMQP `messageId` is the outbox's UUIDv7, `type` the message tag, `contentType` is
 * `application/json`, `deliveryMode` 2 (persistent), `timestamp` the publish time, and the stored headers
 * JSON (type and stamps: redeliveries, handledBy, …) travels in the AMQP header `x-outbox-headers`, so a
 * message retried on the broker keeps its history. The body is the same JSON text as in PostgreSQL.
 *
 * The connection and its channels are opened on first use and re-opened on the next operation after a loss;
 * a lost connection fails the sends waiting for confirms with a `TransportError` and hands every unacked
 * message back to the broker (settling such a message later is a no-op: it is delivered again, so the
 * delivery is at-least-once). Deliveries are counted from the headers' retry history (1 + retries): AMQP
 * 0-9-1 cannot tell a crashed consumer's redelivery from a requeue, so the worker's poison-message detection
 * does not apply; use a quorum queue's `x-delivery-limit` (`queueArguments`) for that.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import { OutboxConfigError, type TransportError, type UnknownTransportError } from "../../domain/Errors.js"
import * as Identifier from "../../domain/Identifier.js"
import { mapConfigError } from "../../internal/configError.js"
import {
  checkKnown,
  checkOwnFailureTransports,
  noCapabilities,
  positiveDuration,
  unknownTransport
} from "../../internal/transports.js"
import { type Capabilities, Transport, type TransportShape } from "../../services/Transport.js"
import { TransportAdmin, type TransportBackend } from "../../services/TransportAdmin.js"
import * as Admin from "./admin.js"
import { copyOf, headersHeader as headersHeaderName, toPublication, transportError } from "./codec.js"
import * as Connection from "./connection.js"
import * as Consumer from "./consumer.js"
import { makeRoute, type Target } from "./delays.js"
import { type ResolvedTransport, resolveTransports } from "./options.js"
import { type Publication, publishAll } from "./publisher.js"

/**
 * Options of one named transport (one queue on the broker).
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportOptions {
  /** The queue it consumes and its messages land in (default: the transport name). */
  readonly queue?: string
  /** The routing key its messages are published with and its queue is bound with (default: the queue name). */
  readonly routingKey?: string
  /** How many unacked messages the broker delivers ahead to one consumer (default 50). */
  readonly prefetch?: number
  /**
   * The transport its failed messages go to (default `failed`). When it is one of this layer's transports it is
   * a broker queue; otherwise it must be served by another backend combined with `TransportRouter` — the
   * recommended setup for broker-consumed messages is the PostgreSQL `failed` transport, where operators can
   * list, show, retry and remove them (a broker cannot browse a queue by id).
   */
  readonly failureTransport?: string
  /**
   * Extra arguments for the queue declaration (`setup`), for example
   * `{ "x-queue-type": "quorum", "x-delivery-limit": 20 }`. They must match an existing queue's.
   */
  readonly queueArguments?: Readonly<Record<string, unknown>>
}

/**
 * Options of the RabbitMQ transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The broker URL, e.g. `amqp://guest:guest@127.0.0.1:5672` (add `?heartbeat=10` to detect dead peers sooner). */
  readonly url: string | Redacted.Redacted<string>
  /** The exchange messages are published to (default: a durable `direct` exchange named `effect-outbox`). */
  readonly exchange?: {
    readonly name?: string
    readonly type?: "direct" | "topic"
  }
  /** Named transports (default: `amqp`). */
  readonly transports?: Readonly<Record<string, TransportOptions>>
  /** How long `send`, `retry` and `fail` wait for the broker's confirm before failing (default 30 seconds). */
  readonly confirmTimeout?: Duration.DurationInput
  /** How long opening the connection may take (default 5 seconds). */
  readonly connectTimeout?: Duration.DurationInput
  /**
   * How long a claim waits at most for the messages the broker reports ready to arrive (default 500
   * milliseconds). It returns as soon as they are in, or deliveries pause.
   */
  readonly claimWait?: Duration.DurationInput
  /** The connection name shown in the management UI (default `effect-outbox`). */
  readonly connectionName?: string
}

/**
 * The backend plus broker-only operations.
 *
 * @since 0.1.0
 * @category models
 */
export interface AmqpTransportShape extends TransportBackend {
  /** Deletes every ready message of a transport's queue (tests, demos); returns how many. */
  readonly purge: (transport: string) => Effect.Effect<number, TransportError | UnknownTransportError>
  /** Closes the connection (its unacked messages go back to the queue); the next operation reconnects. */
  readonly disconnect: Effect.Effect<void>
}

/**
 * Tag of the RabbitMQ transport, for its broker-only operations.
 *
 * @since 0.1.0
 * @category tags
 */
export class AmqpTransport extends Context.Tag("effect-outbox/AmqpTransport")<AmqpTransport, AmqpTransportShape>() {}

/**
 * The default exchange name.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultExchange = "effect-outbox"

/**
 * The default transport name of the broker.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTransport = "amqp"

/**
 * The AMQP header carrying the stored headers JSON (type and stamps), for producers that publish to a
 * transport's queue themselves.
 *
 * @since 0.1.0
 * @category constants
 */
export const headersHeader: string = headersHeaderName

/**
 * What the broker does for each of its transports.
 *
 * @since 0.1.0
 * @category constants
 */
export const capabilities: Capabilities = noCapabilities

/**
 * Builds the transport in a scope: the connection is opened on first use and closed with the scope, after
 * the consumers are cancelled and their buffered messages handed back.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<AmqpTransportShape, OutboxConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const exchange = yield* Identifier.validateQueueName(options.exchange?.name ?? defaultExchange)
    const transports = yield* resolveTransports(options.transports ?? { [defaultTransport]: {} })
    const confirmTimeout = yield* positiveDuration(
      "AMQP transport: confirmTimeout",
      options.confirmTimeout ?? "30 seconds"
    )
    const connectTimeout = yield* positiveDuration(
      "AMQP transport: connectTimeout",
      options.connectTimeout ?? "5 seconds"
    )
    const claimWait = Duration.decodeUnknown(options.claimWait ?? "500 millis")
    if (Option.isNone(claimWait) || !Duration.isFinite(claimWait.value)) {
      return yield* new OutboxConfigError({ message: "AMQP transport: claimWait must be a finite duration" })
    }

    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const warn = (message: string) => void runFork(Effect.logWarning(`outbox amqp: ${message}`))
    const lifecycle: Connection.Lifecycle = { shuttingDown: false }
    const consumers = yield* Consumer.make({ claimWait: claimWait.value, lifecycle, warn })
    const connections = yield* Connection.make({
      url: Redacted.isRedacted(options.url) ? Redacted.value(options.url) : options.url,
      connectTimeout,
      connectionName: options.connectionName ?? "effect-outbox",
      lifecycle,
      warn,
      onClosed: consumers.reset,
      beforeClose: consumers.closeAll
    })
    const route = makeRoute({ exchange, withAdmin: connections.withAdmin })

    const lookup = (name: string): Effect.Effect<ResolvedTransport, UnknownTransportError> => {
      const found = transports.get(name)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(unknownTransport(name, transports.keys()))
    }
    const publish = (name: string, operation: string, publications: ReadonlyArray<Publication>) =>
      Effect.flatMap(
        connections.get(name, operation),
        (conn) => publishAll(conn.publisher, { transport: name, operation, confirmTimeout }, publications)
      )
    const settleAck = (name: string, ids: ReadonlyArray<string>) =>
      consumers.settle(name, ids, (channel, m) => channel.ack(m))
    const alreadyBack = (name: string, id: string) =>
      Effect.logDebug(`outbox amqp: ${name} ${id} is already back in the queue`)

    const send: TransportShape["send"] = (name, messages) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name)
        if (messages.length === 0) return
        const targets = new Map<number, Target>()
        const publications: Array<Publication> = []
        for (const m of messages) {
          const target = targets.get(m.delayMs) ?? (yield* route(transport, m.delayMs, "send"))
          targets.set(m.delayMs, target)
          publications.push({ ...target, ...toPublication(m) })
        }
        yield* publish(name, "send", publications)
      })

    const claim = (transport: ResolvedTransport, batchSize: number, acks: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        if (acks.length > 0) yield* settleAck(transport.name, acks)
        const conn = yield* connections.get(transport.name, "claim")
        const messages = yield* consumers.claim(conn, transport, batchSize)
        return { messages, nextDue: Option.none<Duration.Duration>() }
      })

    const open: TransportShape["open"] = (names) =>
      Effect.gen(function*() {
        yield* checkKnown(names, transports)
        const own = Array.from(new Set(names))
        const wait = yield* consumers.hold(own)
        return {
          transports: own,
          claim: (name, batchSize, acks) =>
            own.includes(name)
              ? claim(transports.get(name)!, batchSize, acks)
              : Effect.fail(unknownTransport(name, own)),
          wait
        }
      })

    const retry: TransportShape["retry"] = (message, { delay, headers }) =>
      Effect.gen(function*() {
        const transport = yield* lookup(message.transport)
        const found = consumers.held(transport.name, message.id)
        if (found === undefined) return yield* alreadyBack(transport.name, message.id)
        const target = yield* route(transport, Duration.toMillis(delay), "retry")
        yield* publish(transport.name, "retry", [{ ...target, ...copyOf(found.message, headers) }])
        yield* settleAck(transport.name, [message.id])
      })

    const fail: TransportShape["fail"] = (message, headers) =>
      Effect.gen(function*() {
        const transport = yield* lookup(message.transport)
        const failure = transports.get(transport.failureTransport)
        if (failure === undefined) {
          return yield* transportError(
            transport.name,
            "fail",
            `The failure transport ${transport.failureTransport} of ${transport.name} is not served by the AMQP ` +
              `transport: combine it with the backend that serves it (TransportRouter), or declare it under transports`
          )
        }
        const found = consumers.held(transport.name, message.id)
        if (found === undefined) return yield* alreadyBack(transport.name, message.id)
        yield* publish(transport.name, "fail", [{
          exchange,
          routingKey: failure.routingKey,
          ...copyOf(found.message, headers)
        }])
        yield* settleAck(transport.name, [message.id])
      })

    const admin = Admin.make({
      exchange,
      exchangeType: options.exchange?.type ?? "direct",
      transports,
      lookup,
      withAdmin: connections.withAdmin,
      inFlight: consumers.heldCount
    })

    return {
      names: Array.from(transports.keys()),
      capabilities: (name) => (transports.has(name) ? Option.some(capabilities) : Option.none()),
      lease: () => Option.none(),
      failureTransport: (name) => Option.map(Option.fromNullable(transports.get(name)), (t) => t.failureTransport),
      send,
      open,
      ack: (name, ids) => Effect.flatMap(lookup(name), () => settleAck(name, ids)),
      retry,
      fail,
      keepalive: (name) => Effect.asVoid(lookup(name)),
      // Deliveries are not counted here (see the module's doc): no message is reported `redelivered`.
      start: (message) => Effect.as(lookup(message.transport), true),
      release: (name, ids) =>
        Effect.flatMap(
          lookup(name),
          () =>
            consumers.settle(name, ids, (channel, m) => channel.nack(m, false, true)).pipe(
              Effect.tap(() => (ids.length > 0 ? Effect.sync(() => consumers.hint(name)) : Effect.void))
            )
        ),
      ...admin,
      disconnect: connections.disconnect
    } satisfies AmqpTransportShape
  })

/**
 * The transport alone, as the `Transport` and `TransportAdmin` services (and `AmqpTransport` for its broker-only
 * operations). Every failure transport must then be one of its own transports: to keep broker-consumed failures
 * in PostgreSQL, combine `make` with `PgTransport.make` through `TransportRouter.layer` instead.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Transport | TransportAdmin | AmqpTransport, OutboxConfigError> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const transport = yield* make(options)
      yield* checkOwnFailureTransports("AMQP", transport)
      return Context.make(Transport, transport).pipe(
        Context.add(TransportAdmin, transport),
        Context.add(AmqpTransport, transport)
      )
    })
  )

/**
 * `make` with its options read from `Config`, e.g. `makeConfig({ url: Config.redacted("AMQP_URL") })`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeConfig = (
  config: Config.Config.Wrap<Options>
): Effect.Effect<AmqpTransportShape, OutboxConfigError, Scope.Scope> =>
  Effect.flatMap(mapConfigError(Config.unwrap(config)), make)

/**
 * `layer` with its options read from `Config`, e.g. `layerConfig({ url: Config.redacted("AMQP_URL") })`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Config.Wrap<Options>
): Layer.Layer<Transport | TransportAdmin | AmqpTransport, OutboxConfigError> =>
  Layer.unwrapEffect(Effect.map(mapConfigError(Config.unwrap(config)), layer))
