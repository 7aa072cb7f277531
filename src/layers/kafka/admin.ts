/**
 * The operator side of the Kafka transport: `setup` creates the topics, `stats` reads the consumer groups' lag;
 * browsing a topic by id is not something Kafka does.
 *
 * @internal
 */
import { Admin } from "@platformatic/kafka"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { PartitionLag } from "../../domain/Envelope.js"
import type { TransportError, UnknownTransportError } from "../../domain/Errors.js"
import type { TransportAdminShape } from "../../services/TransportAdmin.js"
import { errorText, transportError, unsupportedMessage } from "./codec.js"
import type { ClientOptions, ResolvedTransport } from "./options.js"

/** The operator operations of a transport layer. @internal */
export const make = (options: {
  readonly client: ClientOptions
  readonly transports: ReadonlyMap<string, ResolvedTransport>
  readonly lookup: (name: string) => Effect.Effect<ResolvedTransport, UnknownTransportError>
  readonly counts: (name: string) => { readonly inFlight: number; readonly delayed: number }
}): Effect.Effect<TransportAdminShape, never, Scope.Scope> =>
  Effect.gen(function*() {
    let admin: Admin | undefined
    const get = () => admin ??= new Admin({ ...options.client, clientId: `${options.client.clientId}-admin` })
    yield* Effect.addFinalizer(() =>
      admin === undefined ? Effect.void : Effect.promise(() => admin!.close().catch(() => undefined))
    )
    const call = <A>(transport: string, operation: string, f: (admin: Admin) => Promise<A>) =>
      Effect.tryPromise({
        try: () => f(get()),
        catch: (error) => transportError(transport, operation, errorText(error), error)
      })

    /** Creates each transport's topics that do not exist yet; returns what it created. */
    const setup: TransportAdminShape["setup"] = Effect.gen(function*() {
      const created: Array<string> = []
      for (const transport of options.transports.values()) {
        const existing = new Set(yield* call(transport.name, "setup", (a) => a.listTopics()))
        for (const topic of transport.topics) {
          if (existing.has(topic)) continue
          const made = yield* call(transport.name, "setup", (a) =>
            a.createTopics({
              topics: [topic],
              partitions: transport.partitions,
              replicas: transport.replicationFactor,
              configs: transport.minInsyncReplicas === undefined
                ? []
                : [{ name: "min.insync.replicas", value: String(transport.minInsyncReplicas) }]
            }).then(
              () => true,
              (error: unknown) => {
                // Another setup created it meanwhile, or the listing did not show it yet.
                if (/TOPIC_ALREADY_EXISTS|already exists/i.test(errorText(error))) return false
                throw error
              }
            ))
          if (made) {
            created.push(
              `kafka topic ${topic} (${transport.partitions} partition${transport.partitions === 1 ? "" : "s"})`
            )
          }
        }
      }
      return created
    })

    /** The group's committed offset and the end offset of every partition of the transport's topics. */
    const lagOf = (transport: ResolvedTransport): Effect.Effect<ReadonlyArray<PartitionLag>, TransportError> =>
      call(transport.name, "stats", async (a) => {
        const metadata = await a.metadata({ topics: [...transport.topics] })
        const partitionsOf = (topic: string) =>
          Array.from({ length: metadata.topics.get(topic)?.partitionsCount ?? 0 }, (_, i) => i)
        const ends = await a.listOffsets({
          topics: transport.topics.map((name) => ({
            name,
            partitions: partitionsOf(name).map((partitionIndex) => ({ partitionIndex, timestamp: -1n }))
          }))
        })
        const groups = await a.listConsumerGroupOffsets({
          groups: [{
            groupId: transport.groupId,
            topics: transport.topics.map((name) => ({ name, partitionIndexes: partitionsOf(name) }))
          }]
        })
        const committed = new Map<string, bigint>()
        for (const topic of groups[0]?.topics ?? []) {
          for (const p of topic.partitions) committed.set(`${topic.name}:${p.partitionIndex}`, p.committedOffset)
        }
        const lags: Array<PartitionLag> = []
        for (const topic of ends) {
          for (const p of topic.partitions) {
            const done = committed.get(`${topic.name}:${p.partitionIndex}`)
            const known = done !== undefined && done >= 0n ? done : null
            const end = Number(p.offset)
            lags.push({
              topic: topic.name,
              partition: p.partitionIndex,
              committed: known === null ? null : Number(known),
              end,
              lag: Math.max(0, end - (known === null ? 0 : Number(known)))
            })
          }
        }
        return lags.sort((x, y) => x.topic.localeCompare(y.topic) || x.partition - y.partition)
      })

    const stats: TransportAdminShape["stats"] = (name) =>
      Effect.gen(function*() {
        const transport = yield* options.lookup(name)
        const partitions = yield* lagOf(transport)
        const lag = partitions.reduce((sum, p) => sum + p.lag, 0)
        const { delayed, inFlight } = options.counts(name)
        const failure = options.transports.get(transport.failureTransport)
        const failed = failure === undefined || failure === transport
          ? 0
          : (yield* lagOf(failure)).reduce((sum, p) => sum + p.lag, 0)
        return {
          transport: name,
          queue: transport.topics.join(","),
          ready: Math.max(0, lag - inFlight - delayed),
          delayed,
          inFlight,
          failed,
          oldestReadyAgeMs: null,
          blockedKeys: 0,
          partitions
        }
      })

    const unsupported = (operation: string) => (transport: string) =>
      Effect.flatMap(
        options.lookup(transport),
        () => Effect.fail(transportError(transport, operation, `${operation} is ${unsupportedMessage}`))
      )

    return {
      setup,
      stats,
      list: (transport) => unsupported("list")(transport),
      find: (transport) => Effect.as(unsupported("find")(transport), Option.none()),
      remove: (transport) => Effect.as(unsupported("remove")(transport), 0),
      move: (from) => Effect.as(unsupported("move")(from), false)
    }
  })
