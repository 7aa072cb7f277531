/**
 * The connection of the RabbitMQ transport: opened on first use, reused while it lives, re-opened by the next
 * operation after a loss, and closed cleanly with the layer's scope. It carries the confirm channel (the
 * connection's lifeline) and an admin channel for declarations and queue checks.
 *
 * @internal
 */
import * as Amqp from "amqplib"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { TransportError } from "../../domain/Errors.js"
import { brokerErrorText, errorText, redactUrl, transportError } from "./codec.js"
import { attach, type Publisher } from "./publisher.js"

/**
 * One AMQP connection and what belongs to it.
 *
 * @internal
 */
export interface Connection {
  readonly model: Amqp.ChannelModel
  readonly publisher: Publisher
  admin: Promise<Amqp.Channel> | undefined
  closed: boolean
}

/**
 * Whether the transport's scope is closing: losses are then expected, and nothing reconnects.
 *
 * @internal
 */
export interface Lifecycle {
  shuttingDown: boolean
}

/**
 * What the connection needs from the rest of the transport.
 *
 * @internal
 */
export interface ConnectionOptions {
  readonly url: string
  readonly connectTimeout: Duration.Duration
  readonly connectionName: string
  readonly lifecycle: Lifecycle
  readonly warn: (message: string) => void
  /** Called once when a connection is gone, lost or closed: its channels, and their unacked messages, with it. */
  readonly onClosed: (conn: Connection) => void
  /** Runs before a requested close (consumers cancelled, their channels closed). */
  readonly beforeClose: (conn: Connection) => Effect.Effect<void>
}

/**
 * The connection manager.
 *
 * @internal
 */
export interface Connections {
  /** The open connection, if any. */
  readonly current: () => Connection | undefined
  /** The open connection, or a new one. */
  readonly get: (transport: string, operation: string) => Effect.Effect<Connection, TransportError>
  /** An RPC on the admin channel; a channel-closing error (404, 406) costs that channel only. */
  readonly withAdmin: <A>(
    transport: string,
    operation: string,
    f: (channel: Amqp.Channel) => Promise<A>
  ) => Effect.Effect<A, TransportError>
  /** Closes the connection (its unacked messages go back to their queues); the next operation reconnects. */
  readonly disconnect: Effect.Effect<void>
}

/**
 * The connection manager, closing its connection with the scope.
 *
 * @internal
 */
export const make = (options: ConnectionOptions): Effect.Effect<Connections, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { connectionName, lifecycle, url, warn } = options
    const display = redactUrl(url)
    const connectTimeoutMs = Duration.toMillis(options.connectTimeout)
    const connectLock = yield* Effect.makeSemaphore(1)
    let current: Connection | undefined

    const onClosed = (conn: Connection, reason: string, requested = false) => {
      if (conn.closed) return
      conn.closed = true
      if (current === conn) current = undefined
      if (!lifecycle.shuttingDown && !requested) {
        warn(`${reason}; the next operation reconnects (unacked messages are back in their queues)`)
      }
      options.onClosed(conn)
    }

    const open = (transport: string, operation: string) =>
      Effect.tryPromise({
        try: async () => {
          const model = await Amqp.connect(url, {
            timeout: connectTimeoutMs,
            clientProperties: { connection_name: connectionName }
          })
          model.on("error", (e: Error) => {
            if (!lifecycle.shuttingDown) warn(`connection error: ${e.message}`)
          })
          let channel: Amqp.ConfirmChannel
          try {
            channel = await model.createConfirmChannel()
          } catch (e) {
            await model.close().catch(() => undefined)
            throw e
          }
          const conn: Connection = { model, publisher: attach(channel), admin: undefined, closed: false }
          model.on("close", (e?: Error) =>
            onClosed(conn, `the connection to RabbitMQ was lost${e === undefined ? "" : ` (${e.message})`}`))
          model.on("blocked", (reason: string) =>
            warn(`RabbitMQ blocks publishing (${reason}); sends wait for it`))
          channel.on("error", (e: Error) => {
            if (!lifecycle.shuttingDown) {
              warn(`publisher channel error: ${e.message}`)
            }
          })
          // The confirm channel is the connection's lifeline: when it closes on its own, start afresh.
          // (Checked a moment later: a lost connection closes its channels first, then reports itself.)
          channel.on("close", () =>
            queueMicrotask(() => {
              if (!conn.closed) {
                onClosed(conn, "the publisher channel was closed by the broker")
                model.close().catch(() =>
                  undefined
                )
              }
            }))
          return conn
        },
        catch: (e) =>
          transportError(transport, operation, `Cannot connect to RabbitMQ at ${display}: ${errorText(e)}`, e)
      })

    const shutDown = (transport: string, operation: string) =>
      transportError(transport, operation, "The AMQP transport is shut down")

    const get = (transport: string, operation: string): Effect.Effect<Connection, TransportError> =>
      Effect.suspend(() => {
        if (current !== undefined && !current.closed) return Effect.succeed(current)
        return connectLock.withPermits(1)(Effect.suspend(() => {
          if (current !== undefined && !current.closed) return Effect.succeed(current)
          if (lifecycle.shuttingDown) return Effect.fail(shutDown(transport, operation))
          return Effect.flatMap(Effect.uninterruptible(open(transport, operation)), (conn) => {
            if (lifecycle.shuttingDown) {
              conn.closed = true
              return Effect.promise(() => conn.model.close().catch(() => undefined)).pipe(
                Effect.zipRight(Effect.fail(shutDown(transport, operation)))
              )
            }
            current = conn
            return Effect.succeed(conn)
          })
        }))
      })

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

    const withAdmin: Connections["withAdmin"] = (transport, operation, f) =>
      Effect.flatMap(get(transport, operation), (conn) =>
        Effect.tryPromise({
          try: async () => f(await adminChannel(conn)),
          catch: (e) => transportError(transport, operation, brokerErrorText(e), e)
        }))

    /**
     * Closes a connection cleanly: first what `beforeClose` does (a consumer channel's close waits for the
     * broker to process the acks written before it — closing the connection alone could overtake them), then
     * the connection. A broker that does not answer gets its socket dropped, so nothing keeps the process alive.
     */
    const close = (conn: Connection) =>
      Effect.gen(function*() {
        yield* options.beforeClose(conn)
        onClosed(conn, "disconnected on request", true)
        yield* Effect.promise(() => conn.model.close().catch(() => undefined))
      }).pipe(
        Effect.timeout("10 seconds"),
        Effect.catchAll(() =>
          Effect.sync(() => {
            onClosed(conn, "disconnected on request", true)
            ;(conn.model.connection as { stream?: { destroy?: () => void } }).stream?.destroy?.()
          })
        )
      )

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        lifecycle.shuttingDown = true
        return current === undefined ? Effect.void : close(current)
      })
    )

    return {
      current: () => current,
      get,
      withAdmin,
      disconnect: Effect.suspend(() => (current === undefined ? Effect.void : close(current)))
    }
  })
