/**
 * The Kafka transport's producer against the test run's broker: a send that succeeds has its records in the topic,
 * whatever failed beside it. The client's idempotent producer numbers each partition's records and the broker drops a
 * batch whose numbers it has seen (answering with the first batch's offset, as a success): two batches numbered
 * alike — sent side by side, or after a send whose outcome the client never learnt — lose the second one silently.
 */
import { describe, expect, it } from "@effect/vitest"
import { Admin, Consumer } from "@platformatic/kafka"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { OutgoingMessage } from "../src/domain/Envelope.js"
import * as Headers from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as KafkaTransport from "../src/layers/kafka/KafkaTransport.js"
import { kafkaBootstrap, uniqueName } from "./support/kafka-transport.js"

const message = (orderId: number): OutgoingMessage => ({
  messageId: MessageId.make(),
  type: "OrderPaid",
  body: JSON.stringify({ _tag: "OrderPaid", orderId, amount: 1 }),
  headers: Headers.encode(new Headers.Headers({ type: "OrderPaid" })),
  delayMs: 0,
  orderingKey: "k"
})

/** The `id` headers of a topic's records up to its end, in offset order. */
const idsOf = (topic: string) =>
  Effect.promise(async () => {
    const consumer = new Consumer({
      clientId: "reader",
      groupId: uniqueName("reader"),
      bootstrapBrokers: [kafkaBootstrap()]
    })
    try {
      const end = Number((await consumer.listOffsets({ topics: [topic] })).get(topic)![0]!)
      const ids = new Map<bigint, string>()
      if (end === 0) return []
      const stream = await consumer.consume({ topics: [topic], mode: "earliest", autocommit: false, maxWaitTime: 200 })
      await new Promise<void>((resolve) =>
        stream.on("data", (m) => {
          for (const [name, value] of m.headers) if (name.toString() === "id") ids.set(m.offset, value.toString())
          if (ids.size >= end) resolve()
        })
      )
      await stream.close().catch(() => undefined)
      return [...ids].sort(([a], [b]) => Number(a - b)).map(([, id]) => id)
    } finally {
      await consumer.close().catch(() => undefined)
    }
  })

describe("Kafka producer", () => {
  it.live(
    "sends queued behind a group that failed are each in the topic once they succeed",
    () =>
      Effect.gen(function*() {
        const prefix = uniqueName("producer")
        const topic = `${prefix}.orders`
        yield* Effect.promise(async () => {
          const admin = new Admin({ clientId: "setup", bootstrapBrokers: [kafkaBootstrap()] })
          await admin.createTopics({ topics: [topic], partitions: 1, replicas: 1 })
          await admin.close()
        })
        const transport = yield* KafkaTransport.make({
          brokers: kafkaBootstrap(),
          transports: {
            kafka: { topic, failureTransport: "kafka" },
            // Never set up: its topic does not exist.
            ghost: { topic: `${prefix}.ghost`, failureTransport: "ghost" }
          }
        })
        const [m1, m2, m3, m4] = [message(1), message(2), message(3), message(4)]
        // m1 goes out alone; m2, m3 and m4 wait for it and go out together, which the missing topic refuses; each
        // is then sent again on its own.
        const results = yield* Effect.all([
          Effect.either(transport.send("kafka", [m1])),
          Effect.either(transport.send("kafka", [m2])),
          Effect.either(transport.send("kafka", [m3])),
          Effect.either(transport.send("ghost", [m4]))
        ], { concurrency: "unbounded" })
        expect(results.map(Either.isRight)).toEqual([true, true, true, false])
        const ids = yield* idsOf(topic)
        expect(ids).toEqual([m1.messageId, m2.messageId, m3.messageId])
      }).pipe(Effect.scoped),
    60_000
  )
})
