/**
 * The operator side of the RabbitMQ transport: declarations, counts and purges on the admin channel. A broker
 * cannot browse a queue or take a message out by id, so `list`, `find`, `remove` and `move` fail with a
 * `TransportError` that says so (the transports' `browsing` capability is false).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { TransportError, UnknownTransportError } from "../../domain/Errors.js"
import type { TransportAdminShape } from "../../services/TransportAdmin.js"
import { transportError, unsupportedMessage } from "./codec.js"
import type { Connections } from "./connection.js"

/**
 * What the operator side needs to know of a transport.
 *
 * @internal
 */
export interface AdministeredTransport {
  readonly name: string
  readonly queue: string
  readonly routingKey: string
  readonly failureTransport: string
  readonly queueArguments: Readonly<Record<string, unknown>>
}

/**
 * The operator operations, plus `purge` (tests, demos).
 *
 * @internal
 */
export const make = (options: {
  readonly exchange: string
  readonly exchangeType: "direct" | "topic"
  readonly transports: ReadonlyMap<string, AdministeredTransport>
  readonly lookup: (name: string) => Effect.Effect<AdministeredTransport, UnknownTransportError>
  readonly withAdmin: Connections["withAdmin"]
  /** How many messages of a transport this process holds. */
  readonly inFlight: (name: string) => number
}): TransportAdminShape & {
  readonly purge: (transport: string) => Effect.Effect<number, TransportError | UnknownTransportError>
} => {
  const { exchange, exchangeType, inFlight, lookup, transports, withAdmin } = options

  const unsupported = (name: string, operation: string) =>
    Effect.fail(transportError(name, operation, `${operation} is ${unsupportedMessage}`))

  const depth = (name: string, operation: string, queue: string) =>
    Effect.map(withAdmin(name, operation, (channel) => channel.checkQueue(queue)), (ok) => ok.messageCount)

  const stats: TransportAdminShape["stats"] = (name) =>
    Effect.gen(function*() {
      const transport = yield* lookup(name)
      const ready = yield* depth(name, "stats", transport.queue)
      const failure = transports.get(transport.failureTransport)
      return {
        transport: name,
        queue: transport.queue,
        ready,
        delayed: 0,
        inFlight: inFlight(name),
        failed: failure === undefined ? 0 : yield* depth(name, "stats", failure.queue),
        oldestReadyAgeMs: null,
        blockedKeys: 0
      }
    })

  const setup: TransportAdminShape["setup"] = Effect.as(
    withAdmin("*", "setup", async (channel) => {
      await channel.assertExchange(exchange, exchangeType, { durable: true })
      for (const t of transports.values()) {
        await channel.assertQueue(t.queue, { durable: true, arguments: { ...t.queueArguments } })
        await channel.bindQueue(t.queue, exchange, t.routingKey)
      }
    }),
    [] as ReadonlyArray<string>
  )

  return {
    setup,
    stats,
    list: (name) => Effect.zipRight(lookup(name), unsupported(name, "list")),
    find: (name) => Effect.zipRight(lookup(name), unsupported(name, "find")),
    remove: (name) => Effect.zipRight(lookup(name), unsupported(name, "remove")),
    move: (from, _id, { to }) => Effect.zipRight(Effect.zipRight(lookup(from), lookup(to)), unsupported(from, "move")),
    purge: (name) =>
      Effect.flatMap(
        lookup(name),
        (t) =>
          withAdmin(name, "purge", (channel) => channel.purgeQueue(t.queue)).pipe(Effect.map((r) => r.messageCount))
      )
  }
}
