/**
 * Option resolution of the RabbitMQ transport: each configured transport's queue, routing key, prefetch and
 * failure transport, validated.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import { OutboxConfigError } from "../../domain/Errors.js"
import * as Identifier from "../../domain/Identifier.js"
import { failureTransports } from "../../internal/transports.js"
import type { TransportOptions } from "./AmqpTransport.js"

/**
 * A transport of the broker, its options resolved.
 *
 * @internal
 */
export interface ResolvedTransport {
  readonly name: string
  readonly queue: string
  readonly routingKey: string
  readonly prefetch: number
  readonly failureTransport: string
  readonly queueArguments: Readonly<Record<string, unknown>>
}

/**
 * Resolves the configured transports. Only they are the broker's: a failure transport that is not configured
 * here lives on another backend (through `TransportRouter`).
 *
 * @internal
 */
export const resolveTransports = (
  input: Readonly<Record<string, TransportOptions>>
): Effect.Effect<Map<string, ResolvedTransport>, OutboxConfigError> =>
  Effect.gen(function*() {
    if (Object.keys(input).length === 0) {
      return yield* new OutboxConfigError({ message: "AMQP transport: at least one transport must be configured" })
    }
    const resolved = new Map<string, ResolvedTransport>()
    const queues = new Map<string, string>()
    for (const [name, failure, o] of failureTransports(input)) {
      if (o === undefined) continue
      yield* Identifier.validateQueueName(name)
      const queue = yield* Identifier.validateQueueName(o.queue ?? name)
      const routingKey = yield* Identifier.validateQueueName(o.routingKey ?? queue)
      const failureTransport = yield* Identifier.validateQueueName(failure)
      const prefetch = o.prefetch ?? 50
      if (!Number.isInteger(prefetch) || prefetch < 1 || prefetch > 65535) {
        return yield* new OutboxConfigError({
          message: `AMQP transport ${name}: prefetch must be an integer in 1..65535`
        })
      }
      if (queue.startsWith("amq.")) {
        return yield* new OutboxConfigError({
          message: `AMQP transport ${name}: queue names starting with amq. are reserved`
        })
      }
      const other = queues.get(queue)
      if (other !== undefined) {
        return yield* new OutboxConfigError({
          message: `AMQP transports ${other} and ${name} use the same queue ${queue}`
        })
      }
      queues.set(queue, name)
      resolved.set(name, {
        name,
        queue,
        routingKey,
        prefetch,
        failureTransport,
        queueArguments: o.queueArguments ?? {}
      })
    }
    return resolved
  })
