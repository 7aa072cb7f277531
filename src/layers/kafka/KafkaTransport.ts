/**
 * The Kafka transport: Apache Kafka through `@platformatic/kafka` (pure JavaScript), with an idempotent producer
 * (`acks=all`) and consumer groups whose offsets are committed only after each record's outcome is durable.
 *
 * Mapping of the `Transport` and `TransportAdmin` operations onto Kafka:
 *
 * | operation | on Kafka |
 * |---|---|
 * | `send` | produces to the transport's topic (or its message type's, `topicOf`); succeeds only when every in-sync replica has the records. Record key = the ordering key, so a key's messages keep their order in one partition — the partition Java clients pick for the key (murmur2). Sends that arrive while a produce request is in flight go out together in the next one. A missing topic is a `StorageNotReadyError`; any other failure a `TransportError` (the caller retries: duplicates, never loss) |
 * | `open` | a session holding the transport's consumer-group member (one per transport and process, group `<groupId>.<transport>`), which fetches from the group's committed offsets. When the last session closes, the member commits and leaves the group |
 * | `Session.claim` | settles the acks, commits the offsets that moved, then hands out up to `batchSize` fetched records: a record only when no earlier record of its key in its partition is unsettled |
 * | `Session.wait` | a hint per fetched record and per release |
 * | `ack` | marks records done; a partition's committed offset moves to its first record not done |
 * | `retry` | the record stays in place, ready again after the delay with the new headers, holding its key (held in memory: a new owner of the partition reads it again, its retry count reset) |
 * | `fail` | produces a copy with the new headers to the failure transport's topic, then acks. A failure transport on another backend (the recommended PostgreSQL `failed`) is reached through `TransportRouter` |
 * | `release` | the record is ready again at once |
 * | `keepalive`, `lease`, `start` | nothing to do: a partition's records belong to its member until a rebalance |
 * | `capabilities` | ordering keys (per key and partition); no leases, no browsing, deliveries not counted, ids not stable |
 * | `setup` | creates the topics that do not exist (`partitions`, `replicationFactor`, `min.insync.replicas`) |
 * | `stats` | the group's lag per partition (`partitions`); `ready` is the lag less what this process holds |
 * | `list`, `find`, `remove`, `move` | a `TransportError`: a topic cannot be browsed or have a record taken out |
 *
 * Records: value = the message body, headers `id` (the message's UUIDv7 — the header Debezium's Outbox Event Router
 * writes, so consumers of either dedupe the same way), `type`, `traceparent`/`tracestate`, the message's custom
 * headers, and `x-outbox-headers` (the stored headers JSON, so a copy keeps its history). Records of other
 * producers are read too: their type from the `type` header, their id from `id` (else one derived from the record's
 * topic, partition and offset, the same at every redelivery).
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import type { ConnectionOptions as TlsOptions } from "node:tls"
import { OutboxConfigError, type UnknownTransportError } from "../../domain/Errors.js"
import { mapConfigError } from "../../internal/configError.js"
import { checkKnown, checkOwnFailureTransports, positiveDuration, unknownTransport } from "../../internal/transports.js"
import { type Capabilities, Transport, type TransportShape } from "../../services/Transport.js"
import { TransportAdmin, type TransportBackend } from "../../services/TransportAdmin.js"
import * as Admin from "./admin.js"
import { copyOf, toRecord, transportError } from "./codec.js"
import * as Consumers from "./consumer.js"
import { resolveClient, type ResolvedTransport, resolveTransports } from "./options.js"
import * as Producer from "./producer.js"

export {
  /**
   * The partition Java clients pick for a key among a topic's partitions (murmur2): where this transport puts the
   * messages of an ordering key.
   *
   * @since 0.1.0
   * @category partitioning
   */
  partitionOf
} from "./partitioner.js"

/**
 * Options of one named transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportOptions {
  /** The topic its messages go to and it consumes (default: the transport name). */
  readonly topic?: string
  /** Topics of their own for some message types (type → topic); the transport consumes them too. */
  readonly topicOf?: Readonly<Record<string, string>>
  /** Its consumer group (default `<groupId>.<transport>`). */
  readonly groupId?: string
  /**
   * The transport its failed messages go to (default `failed`). When it is one of this layer's transports it is a
   * topic; otherwise it must be served by another backend combined with `TransportRouter` — the recommended setup,
   * with PostgreSQL's `failed`, where operators list, show, retry and remove them.
   */
  readonly failureTransport?: string
  /** Partitions of the topics `setup` creates (default 3). */
  readonly partitions?: number
  /** Replication factor of the topics `setup` creates (default: the broker's `default.replication.factor`). */
  readonly replicationFactor?: number
  /** `min.insync.replicas` of the topics `setup` creates (default: the broker's). */
  readonly minInsyncReplicas?: number
}

/**
 * Options of the Kafka transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * The bootstrap brokers: `host:port` entries, or a URL `kafka://[user:password@]host:port[,host:port]` whose
   * query may name `sasl=plain|scram-sha-256|scram-sha-512` (default SCRAM-SHA-512 when a user is given) and
   * `tls=true` (`kafkas://` also turns TLS on).
   */
  readonly brokers: string | ReadonlyArray<string> | Redacted.Redacted<string>
  /** The client id the broker sees (default `effect-outbox`; each client adds its role). */
  readonly clientId?: string
  /** The prefix of the transports' consumer groups (default `effect-outbox`: groups `effect-outbox.<transport>`). */
  readonly groupId?: string
  /** SASL authentication (overrides the URL's). */
  readonly sasl?: {
    readonly mechanism: "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"
    readonly username: string
    readonly password: string | Redacted.Redacted<string>
  }
  /** TLS: `true` for the system's CAs, or Node's TLS options (CA, client certificate). */
  readonly tls?: boolean | TlsOptions
  /** Named transports (default: `kafka`). */
  readonly transports?: Readonly<Record<string, TransportOptions>>
  /** How long opening a connection may take (default 5 seconds). */
  readonly connectTimeout?: Duration.DurationInput
  /** How long a request (a produce waiting for its acks among them) may take (default 30 seconds). */
  readonly requestTimeout?: Duration.DurationInput
  /** The consumer group session timeout: a member silent this long is taken out of its group (default 10 seconds). */
  readonly sessionTimeout?: Duration.DurationInput
  /**
   * Unsettled records a consumer holds before it stops fetching (default 1000); it also stops at four times as many
   * held behind a partition's commit point (a record waiting for its retry).
   */
  readonly maxBuffered?: number
  /**
   * How long a claim waits at most for records known to exist (at the group's join, or sent by this process) to
   * arrive (default 500 milliseconds). It returns as soon as one is ready.
   */
  readonly claimWait?: Duration.DurationInput
}

/**
 * The backend plus Kafka-only operations.
 *
 * @since 0.1.0
 * @category models
 */
export interface KafkaTransportShape extends TransportBackend {
  /** The topics of a transport (its own, then those of `topicOf`). */
  readonly topics: (transport: string) => Effect.Effect<ReadonlyArray<string>, UnknownTransportError>
}

/**
 * Tag of the Kafka transport, for its Kafka-only operations.
 *
 * @since 0.1.0
 * @category tags
 */
export class KafkaTransport
  extends Context.Tag("effect-outbox/KafkaTransport")<KafkaTransport, KafkaTransportShape>()
{}

/**
 * The default transport name.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTransport = "kafka"

/**
 * What the transport does for each of its transports: a key's records are handed out one at a time, in order.
 *
 * @since 0.1.0
 * @category constants
 */
export const capabilities: Capabilities = {
  leases: false,
  browsing: false,
  countsDeliveries: false,
  stableIds: false,
  ackWithClaim: false,
  orderingKeys: true
}

/**
 * Builds the transport in a scope: its clients connect on first use and close with the scope, after the
 * consumers committed what is done and left their groups.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<KafkaTransportShape, OutboxConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const client = yield* resolveClient(options)
    const transports = yield* resolveTransports(options.transports ?? { [defaultTransport]: {} }, {
      groupId: options.groupId
    })
    const sessionTimeout = yield* positiveDuration(
      "Kafka transport: sessionTimeout",
      options.sessionTimeout ?? "10 seconds"
    )
    const maxBuffered = options.maxBuffered ?? 1000
    if (!Number.isInteger(maxBuffered) || maxBuffered < 1) {
      return yield* new OutboxConfigError({ message: "Kafka transport: maxBuffered must be a positive integer" })
    }
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const warn = (message: string) => void runFork(Effect.logWarning(`outbox kafka: ${message}`))
    const producer = yield* Producer.make(client)
    const claimWait = yield* positiveDuration("Kafka transport: claimWait", options.claimWait ?? "500 millis")
    const consumers = yield* Consumers.make({
      client,
      maxBuffered,
      claimWait: Duration.toMillis(claimWait),
      sessionTimeout: Duration.toMillis(sessionTimeout),
      warn
    })

    const lookup = (name: string): Effect.Effect<ResolvedTransport, UnknownTransportError> => {
      const found = transports.get(name)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(unknownTransport(name, transports.keys()))
    }
    const gone = (name: string, id: string) =>
      Effect.logDebug(`outbox kafka: ${name} ${id} is no longer held here (its partition moved)`)

    const send: TransportShape["send"] = (name, messages) =>
      Effect.flatMap(lookup(name), (transport) => {
        const now = Date.now()
        return producer.produce(
          name,
          "send",
          messages.map((m) => toRecord(transport.topicOf.get(m.type) ?? transport.topic, m, now))
        ).pipe(Effect.map((written) => consumers.produced(name, written)))
      })

    const open: TransportShape["open"] = (names) =>
      Effect.gen(function*() {
        yield* checkKnown(names, transports)
        const own = Array.from(new Set(names))
        const wait = yield* consumers.hold(own.map((name) => transports.get(name)!))
        return {
          transports: own,
          claim: (name, batchSize, acks) =>
            own.includes(name)
              ? consumers.claim(transports.get(name)!, batchSize, acks)
              : Effect.fail(unknownTransport(name, own)),
          wait
        }
      })

    const retry: TransportShape["retry"] = (message, { delay, headers }) =>
      Effect.flatMap(lookup(message.transport), (transport) =>
        Effect.flatMap(
          consumers.retry(transport.name, message.id, delay, headers),
          (held) => (held ? Effect.void : gone(transport.name, message.id))
        ))

    const fail: TransportShape["fail"] = (message, headers) =>
      Effect.gen(function*() {
        const transport = yield* lookup(message.transport)
        const failure = transports.get(transport.failureTransport)
        if (failure === undefined) {
          return yield* transportError(
            transport.name,
            "fail",
            `The failure transport ${transport.failureTransport} of ${transport.name} is not served by the Kafka ` +
              `transport: combine it with the backend that serves it (TransportRouter), or declare it under transports`
          )
        }
        const record = consumers.held(transport.name, message.id)
        if (record === undefined) return yield* gone(transport.name, message.id)
        const written = yield* producer.produce(transport.name, "fail", [copyOf(failure.topic, record, headers)]).pipe(
          Effect.catchTag("StorageNotReadyError", (e) => transportError(transport.name, "fail", e.message))
        )
        consumers.produced(failure.name, written)
        yield* consumers.settle(transport.name, [message.id])
      })

    const admin = yield* Admin.make({ client, transports, lookup, counts: consumers.counts })

    return {
      names: Array.from(transports.keys()),
      capabilities: (name) => (transports.has(name) ? Option.some(capabilities) : Option.none()),
      lease: () => Option.none(),
      failureTransport: (name) => Option.map(Option.fromNullable(transports.get(name)), (t) => t.failureTransport),
      send,
      open,
      ack: (name, ids) => Effect.flatMap(lookup(name), () => consumers.settle(name, ids)),
      retry,
      fail,
      keepalive: (name) => Effect.asVoid(lookup(name)),
      start: (message) => Effect.as(lookup(message.transport), true),
      release: (name, ids) => Effect.flatMap(lookup(name), () => consumers.release(name, ids)),
      ...admin,
      topics: (name) => Effect.map(lookup(name), (t) => t.topics)
    } satisfies KafkaTransportShape
  })

/**
 * The transport alone, as the `Transport` and `TransportAdmin` services (and `KafkaTransport`). Every failure
 * transport must then be one of its own transports: to keep failures in PostgreSQL, combine `make` with
 * `PgTransport.make` through `TransportRouter.layer` instead.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options
): Layer.Layer<Transport | TransportAdmin | KafkaTransport, OutboxConfigError> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const transport = yield* make(options)
      yield* checkOwnFailureTransports("Kafka", transport)
      return Context.make(Transport, transport).pipe(
        Context.add(TransportAdmin, transport),
        Context.add(KafkaTransport, transport)
      )
    })
  )

/**
 * `make` with its options read from `Config`, e.g. `makeConfig({ brokers: Config.redacted("KAFKA_URL") })`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeConfig = (
  config: Config.Config.Wrap<Options>
): Effect.Effect<KafkaTransportShape, OutboxConfigError, Scope.Scope> =>
  Effect.flatMap(mapConfigError(Config.unwrap(config)), make)

/**
 * `layer` with its options read from `Config`, e.g. `layerConfig({ brokers: Config.redacted("KAFKA_URL") })`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Config.Wrap<Options>
): Layer.Layer<Transport | TransportAdmin | KafkaTransport, OutboxConfigError> =>
  Layer.unwrapEffect(Effect.map(mapConfigError(Config.unwrap(config)), layer))
