/**
 * Option resolution of the Kafka transport: the client's connection options (brokers, TLS, SASL) and each
 * configured transport's topics, consumer group and setup settings, validated.
 *
 * @internal
 */
import type { SASLOptions } from "@platformatic/kafka"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import type { ConnectionOptions as TlsOptions } from "node:tls"
import { OutboxConfigError } from "../../domain/Errors.js"
import * as Identifier from "../../domain/Identifier.js"
import { failureTransports, positiveDuration } from "../../internal/transports.js"
import type { Options, TransportOptions } from "./KafkaTransport.js"

/** What every client of the layer (producer, consumers, admin) is built with. @internal */
export interface ClientOptions {
  readonly clientId: string
  readonly bootstrapBrokers: Array<string>
  readonly connectTimeout: number
  readonly requestTimeout: number
  readonly timeout: number
  readonly retries: number
  readonly tls?: TlsOptions
  readonly sasl?: SASLOptions
}

/** A transport of the layer, its options resolved. @internal */
export interface ResolvedTransport {
  readonly name: string
  /** The topic its messages go to unless their type has one of its own. */
  readonly topic: string
  /** Message type → topic. */
  readonly topicOf: ReadonlyMap<string, string>
  /** Every topic it consumes: `topic` and the values of `topicOf`. */
  readonly topics: ReadonlyArray<string>
  readonly groupId: string
  readonly failureTransport: string
  readonly partitions: number
  readonly replicationFactor: number
  readonly minInsyncReplicas: number | undefined
}

/** Kafka's own rule for topic names. */
const validTopic = (name: string) => /^[A-Za-z0-9._-]{1,249}$/.test(name) && name !== "." && name !== ".."

const configError = (message: string) => new OutboxConfigError({ message: `Kafka transport: ${message}` })

const positiveInteger = (what: string, value: number | undefined, fallback: number, max = 1_000_000) =>
  Effect.suspend(() => {
    const n = value ?? fallback
    return Number.isInteger(n) && n >= 1 && n <= max
      ? Effect.succeed(n)
      : Effect.fail(configError(`${what} must be an integer in 1..${max}`))
  })

/**
 * The brokers of `brokers`: `host:port` entries, or one `kafka://` URL (`kafka://host:9092,host2:9092`, with
 * `user:password@` for SASL) whose query may say `sasl=plain|scram-sha-256|scram-sha-512` and `tls=true`.
 *
 * @internal
 */
export const parseBrokers = (
  input: string | ReadonlyArray<string>
): Effect.Effect<
  { readonly brokers: Array<string>; readonly sasl?: SASLOptions; readonly tls?: boolean },
  OutboxConfigError
> =>
  Effect.suspend(() => {
    const entries = typeof input === "string" ? [input] : [...input]
    if (entries.length === 1 && /^kafkas?:\/\//i.test(entries[0]!)) {
      const url = entries[0]!
      const match = /^(kafkas?):\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/?#]+)\/?(?:\?([^#]*))?$/i.exec(url)
      if (match === null) return Effect.fail(configError(`invalid broker URL (expected kafka://host:port[,host:port])`))
      const [, scheme, user, password, hosts, query] = match
      const params = new URLSearchParams(query ?? "")
      const mechanism = params.get("sasl")?.toUpperCase()
      const brokers = hosts!.split(",")
      const tls = scheme!.toLowerCase() === "kafkas" || params.get("tls") === "true"
      if (user !== undefined && user !== "") {
        const chosen = mechanism ?? "SCRAM-SHA-512"
        if (chosen !== "PLAIN" && chosen !== "SCRAM-SHA-256" && chosen !== "SCRAM-SHA-512") {
          return Effect.fail(configError(`unsupported SASL mechanism ${chosen} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)`))
        }
        return Effect.map(checkBrokers(brokers), () => ({
          brokers,
          sasl: {
            mechanism: chosen,
            username: decodeURIComponent(user),
            password: decodeURIComponent(password ?? "")
          },
          tls
        }))
      }
      return Effect.map(checkBrokers(brokers), () => ({ brokers, tls }))
    }
    return Effect.map(checkBrokers(entries), () => ({ brokers: entries }))
  })

const checkBrokers = (brokers: ReadonlyArray<string>) =>
  brokers.length > 0 && brokers.every((b) => /^[^\s:/]+:\d{1,5}$/.test(b))
    ? Effect.void
    : Effect.fail(configError(`brokers must be host:port entries, got ${JSON.stringify(brokers).slice(0, 200)}`))

/** The client options of the layer. @internal */
export const resolveClient = (options: Options): Effect.Effect<ClientOptions, OutboxConfigError> =>
  Effect.gen(function*() {
    const parsed = yield* parseBrokers(
      Redacted.isRedacted(options.brokers) ? Redacted.value(options.brokers) : options.brokers
    )
    const connectTimeout = yield* positiveDuration(
      "Kafka transport: connectTimeout",
      options.connectTimeout ?? "5 seconds"
    )
    const requestTimeout = yield* positiveDuration(
      "Kafka transport: requestTimeout",
      options.requestTimeout ?? "30 seconds"
    )
    const sasl = options.sasl !== undefined
      ? {
        mechanism: options.sasl.mechanism,
        username: options.sasl.username,
        password: Redacted.isRedacted(options.sasl.password)
          ? Redacted.value(options.sasl.password)
          : options.sasl.password
      }
      : parsed.sasl
    const tls = options.tls === true || (options.tls === undefined && parsed.tls === true)
      ? {}
      : typeof options.tls === "object"
      ? options.tls
      : undefined
    return {
      clientId: options.clientId ?? "effect-outbox",
      bootstrapBrokers: parsed.brokers,
      connectTimeout: Duration.toMillis(connectTimeout),
      requestTimeout: Duration.toMillis(requestTimeout),
      timeout: Duration.toMillis(requestTimeout),
      retries: 3,
      ...(tls !== undefined ? { tls } : {}),
      ...(sasl !== undefined ? { sasl } : {})
    }
  })

/**
 * Resolves the configured transports. Only they are the layer's: a failure transport that is not configured here
 * lives on another backend (through `TransportRouter`).
 *
 * @internal
 */
export const resolveTransports = (
  input: Readonly<Record<string, TransportOptions>>,
  defaults: { readonly groupId: string | undefined }
): Effect.Effect<Map<string, ResolvedTransport>, OutboxConfigError> =>
  Effect.gen(function*() {
    if (Object.keys(input).length === 0) return yield* configError("at least one transport must be configured")
    const resolved = new Map<string, ResolvedTransport>()
    const owners = new Map<string, string>()
    for (const [name, failure, o] of failureTransports(input)) {
      if (o === undefined) continue
      yield* Identifier.validateQueueName(name)
      const failureTransport = yield* Identifier.validateQueueName(failure)
      const topic = o.topic ?? name
      const topicOf = new Map(Object.entries(o.topicOf ?? {}))
      const topics = Array.from(new Set([topic, ...topicOf.values()]))
      for (const t of topics) {
        if (!validTopic(t)) {
          return yield* configError(
            `transport ${name}: invalid topic ${JSON.stringify(t).slice(0, 100)} (1-249 letters, digits, '.', '_', '-')`
          )
        }
        const other = owners.get(t)
        if (other !== undefined) return yield* configError(`transports ${other} and ${name} both use topic ${t}`)
        owners.set(t, name)
      }
      const groupId = o.groupId ??
        (defaults.groupId !== undefined ? `${defaults.groupId}.${name}` : `effect-outbox.${name}`)
      if (!/^[A-Za-z0-9._:-]{1,249}$/.test(groupId)) {
        return yield* configError(`transport ${name}: invalid consumer group ${JSON.stringify(groupId).slice(0, 100)}`)
      }
      const partitions = yield* positiveInteger(`transport ${name}: partitions`, o.partitions, 3, 10_000)
      const replicationFactor = o.replicationFactor === undefined
        ? -1
        : yield* positiveInteger(`transport ${name}: replicationFactor`, o.replicationFactor, 1, 32)
      const minInsyncReplicas = o.minInsyncReplicas === undefined
        ? undefined
        : yield* positiveInteger(`transport ${name}: minInsyncReplicas`, o.minInsyncReplicas, 1, 32)
      resolved.set(name, {
        name,
        topic,
        topicOf,
        topics,
        groupId,
        failureTransport,
        partitions,
        replicationFactor,
        minInsyncReplicas
      })
    }
    return resolved
  })
