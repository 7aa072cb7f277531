/**
 * The RabbitMQ transport: AMQP 0-9-1 through `amqplib`, with publisher confirms and manual acks.
 *
 * Mapping of the `Transport` semantics onto a broker:
 *
 * | operation | on RabbitMQ |
 * |---|---|
 * | `send` | publish persistent, `mandatory`, on a confirm channel; succeeds only when the broker acks every message. A nack, a returned (unroutable) message, a closed channel or lost connection, or no confirm within `confirmTimeout` is a `TransportError` — the caller (the outbox worker, for a forwarder) retries, so nothing is lost; a failure after a partial publish can duplicate, never lose |
 * | `claim` | takes up to `batchSize` messages from a local buffer fed by `basic.consume` (manual acks, `prefetch` per consumer). When the buffer is empty and the broker reports ready messages, it waits up to `claimWait` for them to arrive; otherwise it returns at once, possibly with none |
 * | `ack` | `basic.ack` by delivery tag (the transport id is `<channel serial>.<delivery tag>`) |
 * | `retry` | publishes a copy with the new headers to a delay queue `<queue>.delay.<ms>` (`x-message-ttl` = the delay, dead-lettered back through the exchange with the queue's routing key, `x-expires` so unused ones vanish), waits for the confirm, then acks the original |
 * | `fail` | publishes a copy with the new headers to the failure transport's queue, confirm, then ack. A failure transport on another backend (the recommended PostgreSQL `failed`) is reached through `TransportRouter` |
 * | `release` | `basic.nack` with requeue |
 * | `keepalive`, `lease`, `nextDue` | nothing to do: the broker holds unacked messages until the channel closes, and delays live in the broker |
 * | `wakeups` | a hint per delivery into the consumer buffer. While nobody subscribes (no worker runs), the consumer is cancelled and its buffer handed back to the broker |
 * | `stats` | `ready` from `queue.declare` (passive); `inFlight` is what this process holds; `delayed` is not known (0) |
 * | `list`, `find`, `remove`, `move` | not supported — a broker cannot browse or delete by id: a `TransportError` says so |
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
import * as Amqp from "amqplib"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Queue from "effect/Queue"
import * as Redacted from "effect/Redacted"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import type { ReceivedMessage } from "../domain/Envelope.js"
import { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import * as Identifier from "../domain/Identifier.js"
import * as MessageId from "../domain/MessageId.js"
import { Transport, type TransportShape } from "../services/Transport.js"

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
   * How long a claim on an empty buffer waits for the messages the broker reports ready to arrive
   * (default 500 milliseconds). It returns as soon as one does.
   */
  readonly claimWait?: Duration.DurationInput
  /** The connection name shown in the management UI (default `effect-outbox`). */
  readonly connectionName?: string
}

/**
 * The transport plus broker-only operations.
 *
 * @since 0.1.0
 * @category models
 */
export interface AmqpTransportShape extends TransportShape {
  /** Deletes every ready message of a transport's queue (tests, demos); returns how many. */
  readonly purge: (transport: string) => Effect.Effect<number, TransportError | UnknownTransportError>
  /** The queue a transport consumes. */
  readonly queueOf: (transport: string) => Option.Option<string>
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
 * The default failure transport (the PostgreSQL transport's `failed`, through `TransportRouter`).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultFailureTransport = "failed"

/**
 * The AMQP header carrying the stored headers JSON (type and stamps).
 *
 * @since 0.1.0
 * @category constants
 */
export const headersHeader = "x-outbox-headers"

/**
 * The message `unsupported` operations fail with.
 *
 * @since 0.1.0
 * @category constants
 */
export const unsupportedMessage = "not supported by the AMQP transport: use a PostgreSQL failure transport"

/**
 * The delay a retry or a delayed send actually waits on the broker: rounded up to 100 ms below one second,
 * and up to two significant digits above (1 234 ms → 1 300 ms, 81 234 ms → 82 000 ms), so that retries with
 * jittered delays share a few delay queues instead of declaring one each. Never shorter than asked.
 *
 * @since 0.1.0
 * @category utils
 */
export const brokerDelay = (ms: number): number => {
  if (!(ms > 0)) return 0
  if (ms < 1000) return Math.ceil(ms / 100) * 100
  const step = 10 ** (Math.floor(Math.log10(ms)) - 1)
  return Math.ceil(ms / step) * step
}

/**
 * The name of the delay queue of a queue for a delay.
 *
 * @since 0.1.0
 * @category utils
 */
export const delayQueueName = (queue: string, ms: number): string => `${queue}.delay.${ms}`

interface Resolved {
  readonly name: string
  readonly queue: string
  readonly routingKey: string
  readonly prefetch: number
  readonly failureTransport: string
  readonly queueArguments: Readonly<Record<string, unknown>>
}

interface Pending {
  readonly messageId: string
  returned: string | undefined
}

interface Consumer {
  readonly serial: number
  readonly transport: Resolved
  readonly channel: Amqp.Channel
  tag: string | undefined
  closed: boolean
  buffer: Array<Amqp.ConsumeMessage>
  readonly held: Map<string, Amqp.ConsumeMessage>
  readonly waiters: Set<() => void>
}

interface Connection {
  readonly model: Amqp.ChannelModel
  readonly publisher: Amqp.ConfirmChannel
  readonly pending: Array<Pending>
  readonly consumers: Map<string, Consumer>
  admin: Promise<Amqp.Channel> | undefined
  closed: boolean
}

interface Publication {
  readonly exchange: string
  readonly routingKey: string
  readonly content: Buffer
  readonly properties: Amqp.Options.Publish
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** AMQP headers the broker sets on dead-lettering; a republished copy starts without them. */
const isBrokerHeader = (key: string) =>
  key === "x-death" || key.startsWith("x-first-death-") || key.startsWith("x-last-death-")

/**
 * Builds the transport in a scope: the connection is opened on first use and closed with the scope, after
 * the consumers are cancelled and their buffered messages handed back.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<AmqpTransportShape, OutboxConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const url = Redacted.isRedacted(options.url) ? Redacted.value(options.url) : options.url
    const display = redactUrl(url)
    const exchange = yield* Identifier.validateQueueName(options.exchange?.name ?? defaultExchange)
    const exchangeType = options.exchange?.type ?? "direct"
    const transports = yield* resolveTransports(options.transports ?? { [defaultTransport]: {} })
    const confirmTimeout = yield* positiveDuration("confirmTimeout", options.confirmTimeout ?? "30 seconds")
    const connectTimeoutMs = Duration.toMillis(
      yield* positiveDuration("connectTimeout", options.connectTimeout ?? "5 seconds")
    )
    const claimWait = Duration.decodeUnknown(options.claimWait ?? "500 millis")
    if (Option.isNone(claimWait) || !Duration.isFinite(claimWait.value)) {
      return yield* new OutboxConfigError({ message: "AMQP transport: claimWait must be a finite duration" })
    }
    const connectionName = options.connectionName ?? "effect-outbox"

    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)
    const warn = (message: string) => void runFork(Effect.logWarning(`outbox amqp: ${message}`))
    const hints = yield* PubSub.sliding<string>(64)
    const hint = (name: string) => void hints.unsafeOffer(name)

    let current: Connection | undefined
    let shuttingDown = false
    let serials = 0
    const connectLock = yield* Effect.makeSemaphore(1)
    const consumerLock = yield* Effect.makeSemaphore(1)
    const refs = new Map<string, number>()

    const lookup = (name: string): Effect.Effect<Resolved, UnknownTransportError> => {
      const found = transports.get(name)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(
        new UnknownTransportError({
          transport: name,
          message: `Unknown transport ${JSON.stringify(name)}; known: ${Array.from(transports.keys()).join(", ")}`
        })
      )
    }
    const lookupOrError = (name: string, operation: string): Effect.Effect<Resolved, TransportError> =>
      Effect.mapError(lookup(name), (e) => new TransportError({ transport: name, operation, message: e.message }))
    const error = (transport: string, operation: string, message: string, cause?: unknown) =>
      new TransportError({ transport, operation, message, ...(cause === undefined ? {} : { cause }) })

    const wakeAll = (consumer: Consumer) => {
      for (const waiter of Array.from(consumer.waiters)) {
        consumer.waiters.delete(waiter)
        waiter()
      }
    }

    const onClosed = (conn: Connection, reason: string, requested = false) => {
      if (conn.closed) return
      conn.closed = true
      if (current === conn) current = undefined
      if (!shuttingDown && !requested) warn(`${reason}; the next operation reconnects (unacked messages are back in their queues)`)
      for (const consumer of conn.consumers.values()) {
        consumer.closed = true
        consumer.tag = undefined
        consumer.buffer = []
        consumer.held.clear()
        wakeAll(consumer)
        hint(consumer.transport.name)
      }
    }

    const open = Effect.tryPromise({
      try: async () => {
        const model = await Amqp.connect(url, {
          timeout: connectTimeoutMs,
          clientProperties: { connection_name: connectionName }
        })
        model.on("error", (e: Error) => {
          if (!shuttingDown) warn(`connection error: ${e.message}`)
        })
        let publisher: Amqp.ConfirmChannel
        try {
          publisher = await model.createConfirmChannel()
        } catch (e) {
          await model.close().catch(() => undefined)
          throw e
        }
        const conn: Connection = { model, publisher, pending: [], consumers: new Map(), admin: undefined, closed: false }
        model.on("close", (e?: Error) =>
          onClosed(conn, `the connection to RabbitMQ was lost${e === undefined ? "" : ` (${e.message})`}`))
        model.on("blocked", (reason: string) => warn(`RabbitMQ blocks publishing (${reason}); sends wait for it`))
        publisher.on("error", (e: Error) => {
          if (!shuttingDown) warn(`publisher channel error: ${e.message}`)
        })
        // The confirm channel is the connection's lifeline: when it closes on its own, start afresh.
        // (Checked a moment later: a lost connection closes its channels first, then reports itself.)
        publisher.on("close", () =>
          queueMicrotask(() => {
            if (!conn.closed) {
              onClosed(conn, "the publisher channel was closed by the broker")
              model.close().catch(() => undefined)
            }
          }))
        // A returned (unroutable) mandatory message comes before its confirm: mark the oldest pending
        // publication of that message id, so its confirm reports the failure.
        publisher.on("return", (message: Amqp.Message) => {
          const id = String(message.properties.messageId ?? "")
          const entry = conn.pending.find((p) => p.messageId === id && p.returned === undefined)
          if (entry !== undefined) {
            entry.returned = `${message.fields.exchange === "" ? "(default exchange)" : message.fields.exchange}` +
              ` / ${message.fields.routingKey}: ${
                (message.fields as unknown as { replyText?: string }).replyText ?? "NO_ROUTE"
              }`
          }
        })
        return conn
      },
      catch: (e) =>
        error(
          "*",
          "connect",
          `Cannot connect to RabbitMQ at ${display}: ${describe(e)}`,
          e
        )
    })

    const connection = (transport: string, operation: string): Effect.Effect<Connection, TransportError> =>
      Effect.suspend(() => {
        if (current !== undefined && !current.closed) return Effect.succeed(current)
        return connectLock.withPermits(1)(Effect.suspend(() => {
          if (current !== undefined && !current.closed) return Effect.succeed(current)
          if (shuttingDown) return Effect.fail(error(transport, operation, "The AMQP transport is shut down"))
          return Effect.flatMap(Effect.uninterruptible(open), (conn) => {
            if (shuttingDown) {
              conn.closed = true
              return Effect.promise(() => conn.model.close().catch(() => undefined)).pipe(
                Effect.zipRight(Effect.fail(error(transport, operation, "The AMQP transport is shut down")))
              )
            }
            current = conn
            return Effect.succeed(conn)
          })
        }))
      }).pipe(
        Effect.mapError((e) => (e.transport === "*" ? error(transport, operation, e.message, e.cause) : e))
      )

    const adminChannel = (conn: Connection): Promise<Amqp.Channel> => {
      if (conn.admin !== undefined) return conn.admin
      const created: Promise<Amqp.Channel> = conn.model.createChannel().then((channel) => {
        channel.on("error", () => undefined)
        channel.on("close", () => {
          if (conn.admin === created) conn.admin = undefined
        })
        return channel
      })
      created.catch(() => {
        if (conn.admin === created) conn.admin = undefined
      })
      conn.admin = created
      return created
    }

    /** An RPC on the admin channel; a channel-closing error (404, 406) costs that channel only. */
    const withAdmin = <A>(
      transport: string,
      operation: string,
      f: (channel: Amqp.Channel) => Promise<A>
    ): Effect.Effect<A, TransportError> =>
      Effect.flatMap(connection(transport, operation), (conn) =>
        Effect.tryPromise({
          try: async () => f(await adminChannel(conn)),
          catch: (e) => error(transport, operation, describeBrokerError(e), e)
        }))

    /**
     * Publishes in order on the confirm channel and waits for every confirm. Fails at the first nack, return,
     * channel loss or timeout.
     */
    const publishAll = (
      conn: Connection,
      transport: string,
      operation: string,
      publications: ReadonlyArray<Publication>
    ): Effect.Effect<void, TransportError> =>
      publications.length === 0 ? Effect.void : Effect.async<void, TransportError>((resume) => {
        let remaining = publications.length
        let settled = false
        const done = (failure: TransportError | undefined) => {
          if (settled) return
          if (failure !== undefined) {
            settled = true
            resume(Effect.fail(failure))
          } else if (--remaining === 0) {
            settled = true
            resume(Effect.void)
          }
        }
        for (const p of publications) {
          const entry: Pending = { messageId: String(p.properties.messageId ?? ""), returned: undefined }
          conn.pending.push(entry)
          const forget = () => {
            const i = conn.pending.indexOf(entry)
            if (i >= 0) conn.pending.splice(i, 1)
          }
          try {
            conn.publisher.publish(
              p.exchange,
              p.routingKey,
              p.content,
              { ...p.properties, mandatory: true, persistent: true },
              (err: unknown) => {
                forget()
                if (err !== null && err !== undefined) {
                  const text = describe(err)
                  done(error(
                    transport,
                    operation,
                    text === "message nacked"
                      ? `RabbitMQ refused message ${entry.messageId} (nack): it is not stored`
                      : `No confirm for message ${entry.messageId}: ${text}`,
                    err
                  ))
                } else if (entry.returned !== undefined) {
                  done(error(
                    transport,
                    operation,
                    `Message ${entry.messageId} is unroutable (${entry.returned}): no queue is bound for it; ` +
                      `run setup-transports`
                  ))
                } else {
                  done(undefined)
                }
              }
            )
          } catch (e) {
            forget()
            done(error(transport, operation, `Cannot publish: ${describe(e)}`, e))
            break
          }
        }
      }).pipe(
        Effect.timeoutFail({
          duration: confirmTimeout,
          onTimeout: () =>
            error(transport, operation, `RabbitMQ did not confirm within ${Duration.format(confirmTimeout)}`)
        })
      )

    const declareDelayQueue = (transport: Resolved, ms: number, operation: string) =>
      withAdmin(transport.name, operation, (channel) =>
        channel.assertQueue(delayQueueName(transport.queue, ms), {
          durable: true,
          arguments: {
            "x-message-ttl": ms,
            // Unused delay queues go away; the margin outlives every message in it (each publish redeclares).
            "x-expires": ms + 300_000,
            "x-dead-letter-exchange": exchange,
            "x-dead-letter-routing-key": transport.routingKey
          }
        }))

    /** Where a message for a transport is published: the exchange now, or a delay queue that dead-letters there. */
    const route = (transport: Resolved, delayMs: number, operation: string) => {
      const ms = brokerDelay(delayMs)
      return ms === 0
        ? Effect.succeed({ exchange, routingKey: transport.routingKey })
        : Effect.as(declareDelayQueue(transport, ms, operation), {
          exchange: "",
          routingKey: delayQueueName(transport.queue, ms)
        })
    }

    const send: AmqpTransportShape["send"] = (name, messages) =>
      Effect.gen(function*() {
        if (messages.length === 0) return
        const transport = yield* lookup(name)
        const conn = yield* connection(name, "send")
        const publications: Array<Publication> = []
        for (const m of messages) {
          const target = yield* route(transport, m.delayMs, "send")
          publications.push({
            ...target,
            content: Buffer.from(m.body, "utf8"),
            properties: {
              messageId: m.messageId,
              type: m.type,
              contentType: "application/json",
              timestamp: Math.floor(Date.now() / 1000),
              appId: "effect-outbox",
              headers: { [headersHeader]: m.headers }
            }
          })
        }
        yield* publishAll(conn, name, "send", publications)
      })

    const startConsumer = (conn: Connection, transport: Resolved) =>
      consumerLock.withPermits(1)(Effect.suspend(() => {
        const existing = conn.consumers.get(transport.name)
        if (existing !== undefined && !existing.closed && existing.tag !== undefined) return Effect.succeed(existing)
        return Effect.tryPromise({
          try: async () => {
            let consumer = existing !== undefined && !existing.closed ? existing : undefined
            if (consumer === undefined) {
              const channel = await conn.model.createChannel()
              channel.on("error", (e: Error) => {
                if (!shuttingDown && !conn.closed) warn(`consumer channel of ${transport.name}: ${e.message}`)
              })
              await channel.prefetch(transport.prefetch)
              const created: Consumer = {
                serial: ++serials,
                transport,
                channel,
                tag: undefined,
                closed: false,
                buffer: [],
                held: new Map(),
                waiters: new Set()
              }
              channel.on("close", () => {
                created.closed = true
                created.tag = undefined
                created.buffer = []
                created.held.clear()
                if (conn.consumers.get(transport.name) === created) conn.consumers.delete(transport.name)
                wakeAll(created)
              })
              conn.consumers.set(transport.name, created)
              consumer = created
            }
            const self = consumer
            const ok = await self.channel.consume(transport.queue, (message) => {
              if (message === null) {
                // Cancelled by the broker (the queue was deleted): the next claim consumes again, or reports why not.
                self.tag = undefined
                wakeAll(self)
                return
              }
              if (self.closed) return
              self.buffer.push(message)
              wakeAll(self)
              hint(transport.name)
            }, { noAck: false })
            self.tag = ok.consumerTag
            return self
          },
          catch: (e) => error(transport.name, "claim", describeBrokerError(e), e)
        })
      }))

    const stopConsumer = (name: string, conn: Connection | undefined = current) =>
      consumerLock.withPermits(1)(Effect.suspend(() => {
        const consumer = conn?.consumers.get(name)
        if (consumer === undefined || consumer.closed || consumer.tag === undefined) return Effect.void
        const tag = consumer.tag
        return Effect.tryPromise(() => consumer.channel.cancel(tag)).pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              consumer.tag = undefined
              // Buffered, never claimed: back to the broker for other consumers.
              for (const message of consumer.buffer.splice(0)) consumer.channel.nack(message, false, true)
            })
          ),
          Effect.catchAll(() => Effect.void)
        )
      }))

    const awaitDelivery = (consumer: Consumer) =>
      Effect.async<void>((resume) => {
        if (consumer.buffer.length > 0 || consumer.closed) return resume(Effect.void)
        const waiter = () => resume(Effect.void)
        consumer.waiters.add(waiter)
        return Effect.sync(() => void consumer.waiters.delete(waiter))
      }).pipe(Effect.timeout(claimWait.value), Effect.ignore)

    const claim: AmqpTransportShape["claim"] = (name, batchSize) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name)
        const conn = yield* connection(name, "claim")
        const consumer = yield* startConsumer(conn, transport)
        if (consumer.buffer.length === 0 && consumer.held.size < transport.prefetch) {
          // Deliveries are pushed asynchronously: when the broker says messages are ready, give them a moment.
          const ready = yield* withAdmin(name, "claim", (channel) => channel.checkQueue(transport.queue))
          if (ready.messageCount > 0) yield* awaitDelivery(consumer)
        }
        if (consumer.closed) return []
        const taken = consumer.buffer.splice(0, Math.max(1, Math.floor(batchSize)))
        return taken.map((message) => {
          const id = `${consumer.serial}.${message.fields.deliveryTag}`
          consumer.held.set(id, message)
          return toReceived(name, id, message)
        })
      })

    /** The message a transport id names, when its channel still holds it (else it is back in the queue). */
    const held = (name: string, id: string): { consumer: Consumer; message: Amqp.ConsumeMessage } | undefined => {
      const consumer = current?.consumers.get(name)
      const message = consumer?.held.get(id)
      return consumer !== undefined && message !== undefined && !consumer.closed ? { consumer, message } : undefined
    }

    /** Acks or nacks held messages; a message whose channel is gone was requeued by the broker: nothing to do. */
    const settle = (name: string, ids: ReadonlyArray<string>, f: (channel: Amqp.Channel, m: Amqp.ConsumeMessage) => void) =>
      Effect.sync(() => {
        let stale = 0
        for (const id of ids) {
          const found = held(name, id)
          if (found === undefined) {
            stale++
            continue
          }
          found.consumer.held.delete(id)
          try {
            f(found.consumer.channel, found.message)
          } catch {
            stale++
          }
        }
        return stale
      }).pipe(
        Effect.tap((stale) =>
          stale > 0
            ? Effect.logDebug(`outbox amqp: ${stale} message(s) of ${name} were already back in the queue`)
            : Effect.void
        ),
        Effect.asVoid
      )

    const ack: AmqpTransportShape["ack"] = (name, ids) => settle(name, ids, (channel, m) => channel.ack(m))
    const release: AmqpTransportShape["release"] = (name, ids) =>
      settle(name, ids, (channel, m) => channel.nack(m, false, true)).pipe(
        Effect.tap(() => (ids.length > 0 ? Effect.sync(() => hint(name)) : Effect.void))
      )

    /** A copy of a received message with new outbox headers (broker dead-letter headers dropped). */
    const copyOf = (message: Amqp.ConsumeMessage, headers: string): { content: Buffer; properties: Amqp.Options.Publish } => {
      const p = message.properties
      const amqpHeaders: Record<string, unknown> = {}
      for (const [key, value] of Object.entries(p.headers ?? {})) {
        if (!isBrokerHeader(key)) amqpHeaders[key] = value
      }
      amqpHeaders[headersHeader] = headers
      const properties: Amqp.Options.Publish = { headers: amqpHeaders }
      if (p.messageId !== undefined) properties.messageId = String(p.messageId)
      if (p.type !== undefined) properties.type = String(p.type)
      if (p.contentType !== undefined) properties.contentType = String(p.contentType)
      if (p.contentEncoding !== undefined) properties.contentEncoding = String(p.contentEncoding)
      if (p.correlationId !== undefined) properties.correlationId = String(p.correlationId)
      if (p.replyTo !== undefined) properties.replyTo = String(p.replyTo)
      if (typeof p.timestamp === "number") properties.timestamp = p.timestamp
      if (p.appId !== undefined) properties.appId = String(p.appId)
      if (typeof p.priority === "number") properties.priority = p.priority
      return { content: message.content, properties }
    }

    const retry: AmqpTransportShape["retry"] = (name, id, { delay, headers }) =>
      Effect.gen(function*() {
        const transport = yield* lookupOrError(name, "retry")
        const found = held(name, id)
        if (found === undefined) return yield* Effect.logDebug(`outbox amqp: ${name} ${id} is already back in the queue`)
        const conn = yield* connection(name, "retry")
        const target = yield* route(transport, Duration.toMillis(delay), "retry")
        yield* publishAll(conn, name, "retry", [{ ...target, ...copyOf(found.message, headers) }])
        yield* ack(name, [id])
      })

    const fail: AmqpTransportShape["fail"] = (name, id, { headers }) =>
      Effect.gen(function*() {
        const transport = yield* lookupOrError(name, "fail")
        const failure = transports.get(transport.failureTransport)
        if (failure === undefined) {
          return yield* error(
            name,
            "fail",
            `The failure transport ${transport.failureTransport} of ${name} is not served by the AMQP transport: ` +
              `combine it with the backend that serves it (TransportRouter), or declare it under transports`
          )
        }
        const found = held(name, id)
        if (found === undefined) return yield* Effect.logDebug(`outbox amqp: ${name} ${id} is already back in the queue`)
        const conn = yield* connection(name, "fail")
        yield* publishAll(conn, name, "fail", [{ exchange, routingKey: failure.routingKey, ...copyOf(found.message, headers) }])
        yield* ack(name, [id])
      })

    const unsupported = (name: string, operation: string) =>
      Effect.fail(error(name, operation, `${operation} is ${unsupportedMessage}`))

    const stats: AmqpTransportShape["stats"] = (name) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name)
        const ready = yield* withAdmin(name, "stats", (channel) => channel.checkQueue(transport.queue))
        const failure = transports.get(transport.failureTransport)
        const failed = failure === undefined
          ? 0
          : (yield* withAdmin(name, "stats", (channel) => channel.checkQueue(failure.queue))).messageCount
        return {
          transport: name,
          queue: transport.queue,
          ready: ready.messageCount,
          delayed: 0,
          inFlight: current?.consumers.get(name)?.held.size ?? 0,
          failed,
          oldestReadyAgeMs: null
        }
      })

    const setup = Effect.gen(function*() {
      yield* withAdmin("*", "setup", async (channel) => {
        await channel.assertExchange(exchange, exchangeType, { durable: true })
        for (const t of transports.values()) {
          await channel.assertQueue(t.queue, { durable: true, arguments: { ...t.queueArguments } })
          await channel.bindQueue(t.queue, exchange, t.routingKey)
        }
      })
      return [] as ReadonlyArray<string>
    })

    const wakeups: AmqpTransportShape["wakeups"] = (names) =>
      Effect.gen(function*() {
        const own = Array.from(new Set(names.filter((name) => transports.has(name))))
        const subscription = yield* PubSub.subscribe(hints)
        // The consumers of these transports live while someone waits for them (a worker runs).
        yield* Effect.acquireRelease(
          Effect.sync(() => own.forEach((name) => refs.set(name, (refs.get(name) ?? 0) + 1))),
          () =>
            Effect.forEach(own, (name) => {
              const left = (refs.get(name) ?? 1) - 1
              refs.set(name, left)
              return left === 0 ? stopConsumer(name) : Effect.void
            }, { discard: true })
        )
        const signal = yield* Queue.sliding<void>(1)
        yield* Queue.take(subscription).pipe(
          Effect.flatMap((name) => (own.includes(name) ? Queue.offer(signal, undefined) : Effect.void)),
          Effect.forever,
          Effect.interruptible,
          Effect.forkScoped
        )
        const next = Effect.zipRight(Queue.take(signal), Queue.takeAll(signal), { concurrent: false })
        return (maxWait: Duration.Duration) => Effect.raceFirst(next, Effect.sleep(maxWait))
      })

    /**
     * Closes a connection cleanly: consumers cancelled, their buffers handed back, their channels closed (a
     * channel's close waits for the broker to process the acks written before it — closing the connection
     * alone could overtake them), then the connection.
     */
    const closeConnection = (conn: Connection) =>
      Effect.gen(function*() {
        for (const name of Array.from(conn.consumers.keys())) yield* stopConsumer(name, conn)
        yield* Effect.forEach(Array.from(conn.consumers.values()), (consumer) =>
          Effect.promise(() => consumer.channel.close().catch(() => undefined)), { discard: true, concurrency: "unbounded" })
        onClosed(conn, "disconnected on request", true)
        yield* Effect.promise(() => conn.model.close().catch(() => undefined))
      }).pipe(
        Effect.timeout("10 seconds"),
        Effect.catchAll(() =>
          Effect.sync(() => {
            // The broker does not answer: drop the socket, so nothing keeps the process alive.
            onClosed(conn, "disconnected on request", true)
            ;(conn.model.connection as { stream?: { destroy?: () => void } }).stream?.destroy?.()
          })
        )
      )

    const disconnect = Effect.suspend(() => (current === undefined ? Effect.void : closeConnection(current)))

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        shuttingDown = true
        return current === undefined ? Effect.void : closeConnection(current)
      })
    )

    const shape: AmqpTransportShape = {
      names: Array.from(transports.keys()),
      lease: () => Option.none(),
      failureTransport: (name) => Option.map(Option.fromNullable(transports.get(name)), (t) => t.failureTransport),
      setup,
      send,
      claim,
      ack,
      retry,
      fail,
      keepalive: () => Effect.void,
      release,
      list: (name) => Effect.zipRight(lookup(name), unsupported(name, "list")),
      find: (name) => Effect.zipRight(lookup(name), unsupported(name, "find")),
      remove: (name) => Effect.zipRight(lookup(name), unsupported(name, "remove")),
      move: (from) => Effect.zipRight(lookup(from), unsupported(from, "move")),
      nextDue: (name) => Effect.as(lookup(name), Option.none()),
      wakeups,
      stats,
      purge: (name) =>
        Effect.flatMap(lookup(name), (t) =>
          withAdmin(name, "purge", (channel) => channel.purgeQueue(t.queue)).pipe(Effect.map((r) => r.messageCount))),
      queueOf: (name) => Option.map(Option.fromNullable(transports.get(name)), (t) => t.queue),
      disconnect
    }
    return shape
  })

/**
 * The transport alone, as the `Transport` service (and `AmqpTransport` for its broker-only operations). Every
 * failure transport must then be one of its own transports: to keep broker-consumed failures in PostgreSQL,
 * combine `make` with `PgTransport.make` through `TransportRouter.layer` instead.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Transport | AmqpTransport, OutboxConfigError> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const transport = yield* make(options)
      for (const name of transport.names) {
        const failure = Option.getOrElse(transport.failureTransport(name), () => name)
        if (!transport.names.includes(failure)) {
          return yield* new OutboxConfigError({
            message: `AMQP transport ${name}: its failure transport ${failure} is not one of its transports; declare ` +
              `it, or combine with PgTransport through TransportRouter.layer to keep failures in PostgreSQL`
          })
        }
      }
      return Context.make(Transport, transport as TransportShape).pipe(Context.add(AmqpTransport, transport))
    })
  )

/**
 * `make` with the URL read from `AMQP_URL`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeConfig = (
  options: Omit<Options, "url"> = {}
): Effect.Effect<AmqpTransportShape, OutboxConfigError | ConfigError.ConfigError, Scope.Scope> =>
  Effect.flatMap(Config.redacted("AMQP_URL"), (url) => make({ ...options, url }))

/**
 * `layer` with the URL read from `AMQP_URL`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Omit<Options, "url"> = {}
): Layer.Layer<Transport | AmqpTransport, OutboxConfigError | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.redacted("AMQP_URL"), (url) => layer({ ...options, url })))

const positiveDuration = (name: string, input: Duration.DurationInput) => {
  const decoded = Duration.decodeUnknown(input)
  return Option.isSome(decoded) && Duration.toMillis(decoded.value) > 0 && Duration.isFinite(decoded.value)
    ? Effect.succeed(decoded.value)
    : Effect.fail(new OutboxConfigError({ message: `AMQP transport: ${name} must be a positive, finite duration` }))
}

const resolveTransports = (
  input: Readonly<Record<string, TransportOptions>>
): Effect.Effect<Map<string, Resolved>, OutboxConfigError> =>
  Effect.gen(function*() {
    const entries = Object.entries(input)
    if (entries.length === 0) {
      return yield* new OutboxConfigError({ message: "AMQP transport: at least one transport must be configured" })
    }
    const failureNames = new Set(entries.map(([, o]) => o.failureTransport ?? defaultFailureTransport))
    const resolved = new Map<string, Resolved>()
    const queues = new Map<string, string>()
    for (const [name, o] of entries) {
      yield* Identifier.validateQueueName(name)
      const queue = yield* Identifier.validateQueueName(o.queue ?? name)
      const routingKey = yield* Identifier.validateQueueName(o.routingKey ?? queue)
      const failureTransport = yield* Identifier.validateQueueName(
        o.failureTransport ?? (failureNames.has(name) ? name : defaultFailureTransport)
      )
      const prefetch = o.prefetch ?? 50
      if (!Number.isInteger(prefetch) || prefetch < 1 || prefetch > 65535) {
        return yield* new OutboxConfigError({ message: `AMQP transport ${name}: prefetch must be an integer in 1..65535` })
      }
      if (queue.startsWith("amq.")) {
        return yield* new OutboxConfigError({ message: `AMQP transport ${name}: queue names starting with amq. are reserved` })
      }
      const other = queues.get(queue)
      if (other !== undefined) {
        return yield* new OutboxConfigError({ message: `AMQP transports ${other} and ${name} use the same queue ${queue}` })
      }
      queues.set(queue, name)
      resolved.set(name, { name, queue, routingKey, prefetch, failureTransport, queueArguments: o.queueArguments ?? {} })
    }
    return resolved
  })

const toReceived = (transport: string, id: string, message: Amqp.ConsumeMessage): ReceivedMessage => {
  const p = message.properties
  const raw = p.headers?.[headersHeader]
  const headers = typeof raw === "string"
    ? raw
    : Buffer.isBuffer(raw)
    ? raw.toString("utf8")
    : JSON.stringify({ type: typeof p.type === "string" && p.type.length > 0 ? p.type : "<unknown>" })
  const decoded = Headers.decode(headers)
  const retries = Either.isRight(decoded) ? Headers.retryCount(decoded.right) : 0
  const now = new Date()
  return {
    id,
    transport,
    // A message from another producer without a UUID gets a fresh one (it cannot be deduplicated).
    messageId: typeof p.messageId === "string" && uuidPattern.test(p.messageId) ? p.messageId : MessageId.make(),
    body: message.content.toString("utf8"),
    headers,
    createdAt: typeof p.timestamp === "number" ? new Date(p.timestamp * 1000) : now,
    availableAt: now,
    deliveries: 1 + retries
  }
}

const redactUrl = (url: string): string => {
  try {
    const parsed = new URL(url)
    if (parsed.password !== "") parsed.password = "***"
    return parsed.toString()
  } catch {
    return "<invalid url>"
  }
}

const describe = (e: unknown): string =>
  e instanceof Error
    ? (e.message.length > 0 ? e.message : e.name) +
      ((e as { code?: unknown }).code !== undefined && !e.message.includes(String((e as { code?: unknown }).code))
        ? ` (${String((e as { code?: unknown }).code)})`
        : "")
    : String(e)

const describeBrokerError = (e: unknown): string => {
  const text = describe(e)
  return /NOT_FOUND|404/.test(text) ? `${text} — run setup-transports` : text
}
