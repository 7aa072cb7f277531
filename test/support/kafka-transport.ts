/**
 * Kafka transports for the tests, on the test run's broker (support/kafka.ts, started by the global setup):
 * topics and consumer groups named uniquely per test, created by the transport's own `setup`.
 */
import * as Effect from "effect/Effect"
import { inject } from "vitest"
import * as KafkaTransport from "../../src/layers/kafka/KafkaTransport.js"

/** The bootstrap address of the test run's broker. */
export const kafkaBootstrap = (): string => inject("kafkaBootstrap")

/** The SCRAM listener of the test run's broker and its user (`null` for a broker of `KAFKA_BOOTSTRAP` without one). */
export const kafkaScram = () => inject("kafkaScram")

/**
 * The REST URL of the test run's Kafka Connect worker (support/connect.ts). The global setup starts the worker only
 * for a run holding a file that mentions this function's name.
 */
export const kafkaConnectUrl = (): string => inject("kafkaConnectUrl")

let names = 0

/** A unique prefix for one test's topics and groups (parallel files and runs share the broker). */
export const uniqueName = (prefix = "t") =>
  `${prefix}-${process.pid}-${++names}-${Math.random().toString(36).slice(2, 7)}`

/**
 * A Kafka transport whose transports' topics are `<prefix>.<name>`, set up (topics created), and closed with the
 * scope.
 */
export const freshTransport = (
  transports: Readonly<Record<string, KafkaTransport.TransportOptions>>,
  options: Partial<KafkaTransport.Options> = {}
) =>
  Effect.gen(function*() {
    const prefix = uniqueName("kt")
    const named: Record<string, KafkaTransport.TransportOptions> = {}
    for (const [name, o] of Object.entries(transports)) named[name] = { topic: `${prefix}.${name}`, ...o }
    const transport = yield* KafkaTransport.make({
      brokers: kafkaBootstrap(),
      groupId: prefix,
      sessionTimeout: "6 seconds",
      ...options,
      transports: named
    })
    yield* transport.setup
    return { transport, prefix }
  })
