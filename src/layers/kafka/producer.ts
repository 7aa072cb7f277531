/**
 * The Kafka transport's producer: idempotent, `acks=all`, Java-compatible partitions, and group commit — sends
 * that arrive while a produce request is in flight go out together in the next one (one request per partition
 * leader), so forwarders running side by side do not pay a broker round trip per message, and a lone send pays
 * no linger.
 *
 * @internal
 */
import { ProduceAcks, Producer } from "@platformatic/kafka"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { StorageNotReadyError, TransportError } from "../../domain/Errors.js"
import { failure, type Record } from "./codec.js"
import type { ClientOptions } from "./options.js"
import { makePartitioner } from "./partitioner.js"

/** Where the broker wrote a partition's share of a produce request: its first offset. @internal */
export interface Written {
  readonly topic: string
  readonly partition: number
  readonly offset: bigint
}

/** One caller's records, with what to call when the broker acknowledged them (or refused them). */
interface Pending {
  readonly records: ReadonlyArray<Record>
  readonly done: (error: unknown, written: ReadonlyArray<Written>) => void
}

/** The producer of a transport layer. @internal */
export interface KafkaProducer {
  /**
   * Produces records and succeeds once the broker acknowledged every one of them (all in-sync replicas), with where
   * they were written. Records without a key go to one partition together (Java's sticky partitioning), so they keep
   * their order. `transport` and `operation` name the failure.
   */
  readonly produce: (
    transport: string,
    operation: string,
    records: ReadonlyArray<Record>
  ) => Effect.Effect<ReadonlyArray<Written>, TransportError | StorageNotReadyError>
}

/**
 * Builds the producer; it connects on first use and closes with the scope.
 *
 * @internal
 */
export const make = (client: ClientOptions): Effect.Effect<KafkaProducer, never, Scope.Scope> =>
  Effect.gen(function*() {
    let producer: Producer<Buffer, Buffer, Buffer, Buffer> | undefined
    const get = () =>
      producer ??= new Producer({
        ...client,
        clientId: `${client.clientId}-producer`,
        idempotent: true,
        acks: ProduceAcks.ALL,
        partitioner: makePartitioner(),
        autocreateTopics: false
      })
    yield* Effect.addFinalizer(() =>
      producer === undefined ? Effect.void : Effect.promise(() => producer!.close().catch(() => undefined))
    )

    let queue: Array<Pending> = []
    let inFlight = false

    /** Sends what waits in one request; a refused group is sent again caller by caller, so one bad record fails its own caller only. */
    const flush = () => {
      if (inFlight || queue.length === 0) return
      const batch = queue
      queue = []
      inFlight = true
      const settle = () => {
        inFlight = false
        flush()
      }
      get().send({ messages: batch.flatMap((p) => p.records as Array<Record>) }).then(
        (result) => {
          for (const p of batch) p.done(undefined, result.offsets ?? [])
          settle()
        },
        (error: unknown) => {
          if (batch.length === 1) {
            batch[0]!.done(error, [])
            return settle()
          }
          // One caller after the other: concurrent sends of the idempotent producer break its sequence numbers
          // (OUT_OF_ORDER_SEQUENCE_NUMBER), which would fail every caller of the group, not only the bad one.
          batch.reduce(
            (previous, p) =>
              previous.then(() =>
                get().send({ messages: p.records as Array<Record> }).then(
                  (result) => p.done(undefined, result.offsets ?? []),
                  (e: unknown) => p.done(e, [])
                )
              ),
            Promise.resolve()
          ).finally(settle)
        }
      )
    }

    /** The partition of the next caller's records without a key (the client takes it modulo the count). */
    let sticky = 0
    const produce: KafkaProducer["produce"] = (transport, operation, records) =>
      records.length === 0
        ? Effect.succeed([])
        : Effect.async<ReadonlyArray<Written>, TransportError | StorageNotReadyError>((resume) => {
          sticky = (sticky + 1) & 0x7fffffff
          const placed = records.map((
            r
          ) => (r.key === undefined && r.partition === undefined ? { ...r, partition: sticky } : r))
          queue.push({
            records: placed,
            done: (error, written) =>
              resume(
                error === undefined
                  ? Effect.succeed(written)
                  : Effect.fail(failure(transport, operation, Array.from(new Set(records.map((r) => r.topic))), error))
              )
          })
          flush()
        })

    return { produce }
  })
