/**
 * The consumers of the RabbitMQ transport: one `basic.consume` per transport (manual acks, `prefetch`), on a
 * channel of its own, feeding a local buffer that claims take from. A consumer lives while a worker session
 * holds its transport; without one it is cancelled and its buffer handed back to the broker. Claimed messages
 * are held until they are settled (acked or nacked) on the channel that delivered them.
 *
 * @internal
 */
import type * as Amqp from "amqplib"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as PubSub from "effect/PubSub"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import type { TransportError } from "../../domain/Errors.js"
import { brokerErrorText, toReceived, transportError } from "./codec.js"
import type { Connection, Lifecycle } from "./connection.js"

/**
 * What a consumer needs to know of its transport.
 *
 * @internal
 */
export interface ConsumedTransport {
  readonly name: string
  readonly queue: string
  readonly prefetch: number
}

/**
 * One transport's consumer on one connection.
 *
 * @internal
 */
export interface Consumer {
  /** Part of every transport id it hands out: ids of a consumer that is gone never match a newer one's. */
  readonly serial: number
  readonly conn: Connection
  readonly transport: ConsumedTransport
  readonly channel: Amqp.Channel
  /** The consumer tag while `basic.consume` runs; `undefined` once cancelled. */
  tag: string | undefined
  closed: boolean
  /** Delivered, not claimed yet. */
  buffer: Array<Amqp.ConsumeMessage>
  /** Claimed, not settled yet, by transport id. */
  readonly held: Map<string, Amqp.ConsumeMessage>
  /** Deliveries still to come of the messages that were ready when consumption started. */
  expected: number
  /** Called on every delivery, cancel and close; each removes itself when done. */
  readonly waiters: Set<() => void>
}

/**
 * The consumers of a transport instance.
 *
 * @internal
 */
export interface Consumers {
  /**
   * Claims up to `batchSize` messages of a transport on a connection, starting its consumer when needed. When
   * the buffer holds fewer and the broker reports more ready (a check on the consumer's own channel, so that
   * its earlier acks and nacks are counted), it waits for them: until the batch or the reported messages are
   * in, deliveries pause, or `claimWait` passes.
   */
  readonly claim: (
    conn: Connection,
    transport: ConsumedTransport,
    batchSize: number
  ) => Effect.Effect<ReadonlyArray<ReceivedMessage>, TransportError>
  /** The message a transport id names, while its channel still holds it (else it is back in the queue). */
  readonly held: (name: string, id: string) => { consumer: Consumer; message: Amqp.ConsumeMessage } | undefined
  /** How many messages of a transport this process holds. */
  readonly heldCount: (name: string) => number
  /** Acks or nacks held messages; a message whose channel is gone was requeued by the broker: nothing to do. */
  readonly settle: (
    name: string,
    ids: ReadonlyArray<string>,
    f: (channel: Amqp.Channel, message: Amqp.ConsumeMessage) => void
  ) => Effect.Effect<void>
  /** A wake-up hint for the sessions waiting on a transport. */
  readonly hint: (name: string) => void
  /**
   * Holds the consumers of these transports for the scope's life, and returns a wait for their hints (a
   * delivery, a release, a lost connection). The last holder's release cancels a consumer.
   */
  readonly hold: (
    names: ReadonlyArray<string>
  ) => Effect.Effect<(maxWait: Duration.Duration) => Effect.Effect<void>, never, Scope.Scope>
  /** Forgets the consumers of a connection that is gone (its broker requeued their messages). */
  readonly reset: (conn: Connection) => void
  /** Cancels the consumers of a connection and closes their channels, before the connection is closed. */
  readonly closeAll: (conn: Connection) => Effect.Effect<void>
}

/** How long a claim waiting for reported messages waits after the last delivery before it takes what is in. */
const deliveryPauseMs = 50

/**
 * The consumers, with their wake-up hints.
 *
 * @internal
 */
export const make = (options: {
  readonly claimWait: Duration.Duration
  readonly lifecycle: Lifecycle
  readonly warn: (message: string) => void
}): Effect.Effect<Consumers> =>
  Effect.gen(function*() {
    const { claimWait, lifecycle, warn } = options
    const hints = yield* PubSub.sliding<string>(64)
    const hint = (name: string) => void hints.unsafeOffer(name)
    const lock = yield* Effect.makeSemaphore(1)
    const consumers = new Map<string, Consumer>()
    const refs = new Map<string, number>()
    let serials = 0

    const claimWaitMs = Duration.toMillis(claimWait)

    const wakeAll = (consumer: Consumer) => {
      for (const waiter of Array.from(consumer.waiters)) waiter()
    }

    /** A consumer whose channel or connection is gone: nothing of it can be settled any more. */
    const retire = (consumer: Consumer) => {
      consumer.closed = true
      consumer.tag = undefined
      consumer.buffer = []
      consumer.held.clear()
      consumer.expected = 0
      if (consumers.get(consumer.transport.name) === consumer) consumers.delete(consumer.transport.name)
      wakeAll(consumer)
    }

    const create = async (conn: Connection, transport: ConsumedTransport): Promise<Consumer> => {
      const channel = await conn.model.createChannel()
      channel.on("error", (e: Error) => {
        if (!lifecycle.shuttingDown && !conn.closed) warn(`consumer channel of ${transport.name}: ${e.message}`)
      })
      await channel.prefetch(transport.prefetch)
      const consumer: Consumer = {
        serial: ++serials,
        conn,
        transport,
        channel,
        tag: undefined,
        closed: false,
        buffer: [],
        held: new Map(),
        expected: 0,
        waiters: new Set()
      }
      channel.on("close", () => retire(consumer))
      consumers.set(transport.name, consumer)
      return consumer
    }

    const consume = async (consumer: Consumer): Promise<void> => {
      const ok = await consumer.channel.consume(consumer.transport.queue, (message) => {
        if (message === null) {
          // Cancelled by the broker (the queue was deleted): the next claim consumes again, or reports why not.
          consumer.tag = undefined
          consumer.expected = 0
          wakeAll(consumer)
          return
        }
        if (consumer.closed) return
        consumer.buffer.push(message)
        if (consumer.expected > 0) consumer.expected--
        wakeAll(consumer)
        hint(consumer.transport.name)
      }, { noAck: false })
      consumer.tag = ok.consumerTag
    }

    const failed = (transport: ConsumedTransport) => (e: unknown) =>
      transportError(transport.name, "claim", brokerErrorText(e), e)

    /** The transport's consumer on this connection, its channel open (consuming or not). */
    const channelFor = (conn: Connection, transport: ConsumedTransport) =>
      lock.withPermits(1)(Effect.suspend(() => {
        const existing = consumers.get(transport.name)
        if (existing !== undefined && existing.conn === conn && !existing.closed) return Effect.succeed(existing)
        return Effect.tryPromise({ try: () => create(conn, transport), catch: failed(transport) })
      }))

    /** Starts `basic.consume` unless it runs; `expected` deliveries are then on their way. */
    const startConsuming = (consumer: Consumer, expected: number) =>
      lock.withPermits(1)(Effect.suspend(() => {
        if (consumer.closed || consumer.tag !== undefined) return Effect.void
        consumer.expected = expected
        return Effect.tryPromise({ try: () => consume(consumer), catch: failed(consumer.transport) })
      }))

    /** Ready messages of the queue, asked on the consumer's channel (after its own acks and nacks). */
    const readyCount = (consumer: Consumer) =>
      Effect.tryPromise({
        try: () => consumer.channel.checkQueue(consumer.transport.queue),
        catch: failed(consumer.transport)
      }).pipe(Effect.map((ok) => ok.messageCount))

    /**
     * Takes up to `batchSize` once the buffer holds `target` (or the consumer is gone), when deliveries pause,
     * or after `claimWait`. The take happens in the callback that decides it, so that concurrent claims never
     * count the same buffered messages.
     */
    const takeWhen = (consumer: Consumer, target: number, batchSize: number) =>
      Effect.async<ReadonlyArray<ReceivedMessage>>((resume) => {
        const enough = () => consumer.closed || consumer.buffer.length >= target
        if (enough()) return resume(Effect.succeed(take(consumer, batchSize)))
        let pause: ReturnType<typeof setTimeout> | undefined
        const cleanup = () => {
          consumer.waiters.delete(waiter)
          clearTimeout(pause)
          clearTimeout(deadline)
        }
        const finish = () => {
          cleanup()
          resume(Effect.succeed(take(consumer, batchSize)))
        }
        const paused = () => {
          clearTimeout(pause)
          pause = setTimeout(finish, deliveryPauseMs)
        }
        const waiter = () => (enough() ? finish() : paused())
        const deadline = setTimeout(finish, claimWaitMs)
        consumer.waiters.add(waiter)
        if (consumer.buffer.length > 0) paused()
        return Effect.sync(cleanup)
      })

    const claim: Consumers["claim"] = (conn, transport, batchSize) =>
      Effect.gen(function*() {
        const consumer = yield* channelFor(conn, transport)
        const want = Math.max(1, Math.floor(batchSize))
        const room = () => Math.max(0, transport.prefetch - consumer.held.size - consumer.buffer.length)
        const ready = consumer.buffer.length < want && room() > 0 ? yield* readyCount(consumer) : 0
        yield* startConsuming(consumer, Math.min(ready, room()))
        const coming = Math.max(consumer.expected, Math.min(ready, room()))
        return yield* takeWhen(consumer, Math.min(want, consumer.buffer.length + coming), want)
      })

    const stop = (consumer: Consumer) =>
      lock.withPermits(1)(Effect.suspend(() => {
        const tag = consumer.tag
        if (consumer.closed || tag === undefined) return Effect.void
        return Effect.tryPromise(() => consumer.channel.cancel(tag)).pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              consumer.tag = undefined
              consumer.expected = 0
              // Buffered, never claimed: back to the broker for other consumers.
              for (const message of consumer.buffer.splice(0)) consumer.channel.nack(message, false, true)
            })
          ),
          Effect.ignore
        )
      }))

    const stopByName = (name: string) =>
      Effect.suspend(() => {
        const consumer = consumers.get(name)
        return consumer === undefined ? Effect.void : stop(consumer)
      })

    const take = (consumer: Consumer, batchSize: number): ReadonlyArray<ReceivedMessage> => {
      if (consumer.closed) return []
      const taken = consumer.buffer.splice(0, Math.max(1, Math.floor(batchSize)))
      return taken.map((message) => {
        const id = `${consumer.serial}.${message.fields.deliveryTag}`
        consumer.held.set(id, message)
        return toReceived(consumer.transport.name, id, message)
      })
    }

    const held: Consumers["held"] = (name, id) => {
      const consumer = consumers.get(name)
      const message = consumer?.held.get(id)
      return consumer !== undefined && message !== undefined && !consumer.closed && !consumer.conn.closed
        ? { consumer, message }
        : undefined
    }

    const settle: Consumers["settle"] = (name, ids, f) =>
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
        Effect.flatMap((stale) =>
          stale > 0
            ? Effect.logDebug(`outbox amqp: ${stale} message(s) of ${name} were already back in the queue`)
            : Effect.void
        )
      )

    const hold: Consumers["hold"] = (names) =>
      Effect.gen(function*() {
        const own = Array.from(new Set(names))
        const subscription = yield* PubSub.subscribe(hints)
        yield* Effect.acquireRelease(
          Effect.sync(() => own.forEach((name) => refs.set(name, (refs.get(name) ?? 0) + 1))),
          () =>
            Effect.forEach(own, (name) => {
              const left = (refs.get(name) ?? 1) - 1
              refs.set(name, left)
              return left === 0 ? stopByName(name) : Effect.void
            }, { discard: true })
        )
        const signal = yield* Queue.sliding<void>(1)
        yield* Queue.take(subscription).pipe(
          Effect.flatMap((name) => (own.includes(name) ? Queue.offer(signal, undefined) : Effect.void)),
          Effect.forever,
          Effect.interruptible,
          Effect.forkScoped
        )
        const next = Effect.zipRight(Queue.take(signal), Queue.takeAll(signal))
        return (maxWait: Duration.Duration) => Effect.raceFirst(next, Effect.sleep(maxWait))
      })

    const reset: Consumers["reset"] = (conn) => {
      for (const consumer of Array.from(consumers.values())) {
        if (consumer.conn !== conn) continue
        retire(consumer)
        hint(consumer.transport.name)
      }
    }

    const closeAll: Consumers["closeAll"] = (conn) =>
      Effect.gen(function*() {
        const own = Array.from(consumers.values()).filter((consumer) => consumer.conn === conn)
        for (const consumer of own) yield* stop(consumer)
        yield* Effect.forEach(
          own,
          (consumer) => Effect.promise(() => consumer.channel.close().catch(() => undefined)),
          { discard: true, concurrency: "unbounded" }
        )
      })

    return {
      claim,
      held,
      heldCount: (name) => consumers.get(name)?.held.size ?? 0,
      settle,
      hint,
      hold,
      reset,
      closeAll
    }
  })
