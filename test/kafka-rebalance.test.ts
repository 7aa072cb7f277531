/**
 * The Kafka transport's consumer across a rebalance, against the test run's broker: a member hands out only records
 * of the partitions it owns. Records of a partition it has lost can still reach it afterwards (fetched before the
 * rebalance and buffered while its stream was paused, or a fetch answered after it); handed out, they would be
 * handled beside the partition's new owner, out of their key's order, and their offsets committed past records
 * nobody handled.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import type { OutgoingMessage, ReceivedMessage } from "../src/domain/Envelope.js"
import * as Headers from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as KafkaTransport from "../src/layers/kafka/KafkaTransport.js"
import { kafkaBootstrap, uniqueName } from "./support/kafka-transport.js"

const message = (orderId: number, orderingKey: string): OutgoingMessage => ({
  messageId: MessageId.make(),
  type: "OrderPaid",
  body: JSON.stringify({ _tag: "OrderPaid", orderId, amount: 1 }),
  headers: Headers.encode(new Headers.Headers({ type: "OrderPaid" })),
  delayMs: 0,
  orderingKey
})

/** The partition of a claimed record: its id is `<topic>:<partition>:<offset>`. */
const partitionOf = (m: ReceivedMessage) => Number(m.id.split(":").at(-2))

describe("Kafka consumer rebalance", () => {
  it.live(
    "records of a partition lost in a rebalance, buffered while the stream was paused, are not handed out",
    () =>
      Effect.gen(function*() {
        const prefix = uniqueName("rebalance")
        const options: KafkaTransport.Options = {
          brokers: kafkaBootstrap(),
          groupId: prefix,
          sessionTimeout: "3 seconds",
          // The stream pauses after two records: the rest of its first fetch waits in its buffer.
          maxBuffered: 2,
          transports: { kafka: { topic: `${prefix}.orders`, partitions: 2, failureTransport: "kafka" } }
        }
        const a = yield* KafkaTransport.make(options)
        yield* a.setup
        // 40 keys over both partitions, 3 records each.
        const keys = Array.from({ length: 40 }, (_, i) => `key-${i}`)
        yield* a.send(
          "kafka",
          keys.flatMap((key, i) => [message(i, key), message(100 + i, key), message(200 + i, key)])
        )
        const sessionA = yield* a.open(["kafka"])
        let held: ReadonlyArray<ReceivedMessage> = []
        while (held.length === 0) held = (yield* sessionA.claim("kafka", 1, [])).messages
        // A second member joins: the group rebalances and each member keeps one partition.
        const b = yield* KafkaTransport.make(options)
        const sessionB = yield* b.open(["kafka"])
        let claimedB: ReadonlyArray<ReceivedMessage> = []
        for (let i = 0; i < 200 && claimedB.length === 0; i++) {
          claimedB = (yield* sessionB.claim("kafka", 100, [])).messages
        }
        expect(claimedB.length).toBeGreaterThan(0)
        const ofB = new Set(claimedB.map(partitionOf))
        expect(ofB.size).toBe(1)
        // A settles its record: its stream resumes and hands over what it buffered.
        const claimedA: Array<ReceivedMessage> = []
        let acks = held.map((m) => m.id)
        for (let i = 0; i < 10; i++) {
          const { messages } = yield* sessionA.claim("kafka", 100, acks)
          acks = messages.map((m) => m.id)
          claimedA.push(...messages)
        }
        expect(claimedA.length).toBeGreaterThan(0)
        expect(claimedA.filter((m) => ofB.has(partitionOf(m))).map((m) => m.id)).toEqual([])
      }).pipe(Effect.scoped, Logger.withMinimumLogLevel(LogLevel.None)),
    90_000
  )
})
