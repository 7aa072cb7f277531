/**
 * Delays on the broker: a delayed send or a retry is published to a delay queue `<queue>.delay.<ms>` whose
 * messages expire after the delay (`x-message-ttl`) and are dead-lettered back through the exchange with the
 * transport's routing key. Unused delay queues go away (`x-expires`).
 *
 * @internal
 */
import type * as Amqp from "amqplib"
import * as Effect from "effect/Effect"
import type { TransportError } from "../../domain/Errors.js"

/**
 * The delay a retry or a delayed send actually waits on the broker: rounded up to 100 ms below one second,
 * and up to two significant digits above (1 234 ms → 1 300 ms, 81 234 ms → 82 000 ms), so that retries with
 * jittered delays share a few delay queues instead of declaring one each. Never shorter than asked.
 *
 * @internal
 */
export const brokerDelay = (ms: number): number => {
  if (!(ms > 0)) return 0
  if (ms < 1000) return Math.ceil(ms / 100) * 100
  const step = 10 ** (Math.floor(Math.log10(ms)) - 1)
  return Math.ceil(ms / step) * step
}

/**
 * The name of a queue's delay queue for a delay.
 *
 * @internal
 */
export const delayQueueName = (queue: string, ms: number): string => `${queue}.delay.${ms}`

/**
 * What routing needs to know of a transport.
 *
 * @internal
 */
export interface RoutedTransport {
  readonly name: string
  readonly queue: string
  readonly routingKey: string
}

/**
 * Where a message is published.
 *
 * @internal
 */
export interface Target {
  readonly exchange: string
  readonly routingKey: string
}

/**
 * Routing of a transport instance: `route(transport, delayMs, operation)` is the exchange with the transport's
 * routing key when there is no delay, else the delay queue (declared first: each publish re-declares it, which
 * also renews its expiry).
 *
 * @internal
 */
export const makeRoute = (options: {
  readonly exchange: string
  readonly withAdmin: <A>(
    transport: string,
    operation: string,
    f: (channel: Amqp.Channel) => Promise<A>
  ) => Effect.Effect<A, TransportError>
}) => {
  const { exchange, withAdmin } = options

  const declare = (transport: RoutedTransport, ms: number, operation: string) =>
    withAdmin(transport.name, operation, (channel) =>
      channel.assertQueue(delayQueueName(transport.queue, ms), {
        durable: true,
        arguments: {
          "x-message-ttl": ms,
          // The margin outlives every message in it.
          "x-expires": ms + 300_000,
          "x-dead-letter-exchange": exchange,
          "x-dead-letter-routing-key": transport.routingKey
        }
      }))

  return (transport: RoutedTransport, delayMs: number, operation: string): Effect.Effect<Target, TransportError> => {
    const ms = brokerDelay(delayMs)
    return ms === 0
      ? Effect.succeed({ exchange, routingKey: transport.routingKey })
      : Effect.as(declare(transport, ms, operation), { exchange: "", routingKey: delayQueueName(transport.queue, ms) })
  }
}
