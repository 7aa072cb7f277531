/**
 * The Kafka transport's pure parts: partitions as Java clients pick them (vectors printed by Kafka 4.4.0's own
 * `Utils.murmur2` and `BuiltInPartitioner.partitionForKey`), record ids, broker URLs and option validation.
 */
import { describe, expect, it } from "@effect/vitest"
import { murmur2 } from "@platformatic/kafka"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { messageIdOf } from "../../src/layers/kafka/codec.js"
import * as KafkaTransport from "../../src/layers/kafka/KafkaTransport.js"
import { parseBrokers } from "../../src/layers/kafka/options.js"
import { partitionOf } from "../../src/layers/kafka/partitioner.js"

/** key, Java's murmur2, partitions among 1, 3, 7, 12 and 50 (Kafka 4.4.0, `kafka-clients`). */
const javaVectors: ReadonlyArray<readonly [string, number, ReadonlyArray<number>]> = [
  ["", 275646681, [0, 0, 2, 9, 31]],
  ["a", -1563381124, [0, 1, 5, 4, 24]],
  ["21", -973932308, [0, 0, 3, 0, 40]],
  ["abc", 479470107, [0, 0, 4, 3, 7]],
  ["foobar", -790332482, [0, 0, 0, 6, 16]],
  ["order-1", 1221710326, [0, 1, 4, 10, 26]],
  ["order-42", 501153024, [0, 0, 1, 0, 24]],
  ["customer:7f3a", 854930010, [0, 0, 4, 6, 10]],
  ["ключ", 2122343024, [0, 2, 4, 8, 24]],
  ["a-little-bit-long-string", -985981536, [0, 2, 1, 8, 12]],
  ["lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, [0, 2, 3, 5, 27]]
]

describe("Kafka partitioning", () => {
  it("hashes keys as Java's Utils.murmur2 does", () => {
    for (const [key, hash] of javaVectors) expect([key, murmur2(Buffer.from(key, "utf8"), false)]).toEqual([key, hash])
  })

  it("picks the partition Java's BuiltInPartitioner picks for a key", () => {
    for (const [key, , partitions] of javaVectors) {
      expect([key, [1, 3, 7, 12, 50].map((count) => partitionOf(key, count))]).toEqual([key, partitions])
    }
  })
})

describe("Kafka records", () => {
  it("a record without a UUID id gets one derived from its place, the same at every redelivery", () => {
    const id = messageIdOf(undefined, "orders", 2, 41n)
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(messageIdOf("not-a-uuid", "orders", 2, 41n)).toBe(id)
    expect(messageIdOf(undefined, "orders", 2, 42n)).not.toBe(id)
    const own = "0190f5a8-7b2c-7def-8123-456789abcdef"
    expect(messageIdOf(own, "orders", 2, 41n)).toBe(own)
  })
})

describe("Kafka options", () => {
  it("reads host:port lists and kafka:// URLs with SASL and TLS", () =>
    Effect.gen(function*() {
      expect(yield* parseBrokers(["a:9092", "b:9093"])).toEqual({ brokers: ["a:9092", "b:9093"] })
      expect(yield* parseBrokers("kafka://a:9092,b:9093")).toEqual({ brokers: ["a:9092", "b:9093"], tls: false })
      expect(yield* parseBrokers("kafkas://u%40x:p%2Fw@a:9093?sasl=scram-sha-256")).toEqual({
        brokers: ["a:9093"],
        sasl: { mechanism: "SCRAM-SHA-256", username: "u@x", password: "p/w" },
        tls: true
      })
    }).pipe(Effect.runPromise))

  it("refuses what it cannot use with a typed error naming the option", async () => {
    const bad: ReadonlyArray<[KafkaTransport.Options, RegExp]> = [
      [{ brokers: "nohost" }, /host:port/],
      [{ brokers: "kafka://u:p@a:1?sasl=gssapi" }, /GSSAPI/],
      [{ brokers: "a:1", transports: {} }, /at least one transport/],
      [{ brokers: "a:1", transports: { x: { topic: "bad topic" } } }, /invalid topic/],
      [{ brokers: "a:1", transports: { x: { topic: "t" }, y: { topic: "t" } } }, /both use topic t/],
      [{ brokers: "a:1", transports: { x: { partitions: 0 } } }, /partitions/],
      [{ brokers: "a:1", maxBuffered: 0 }, /maxBuffered/],
      [{ brokers: "a:1", claimWait: "-1 millis" }, /claimWait/]
    ]
    for (const [options, message] of bad) {
      const exit = await Effect.runPromiseExit(Effect.scoped(KafkaTransport.make(options)))
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        expect(JSON.stringify(exit.cause)).toMatch(/OutboxConfigError/)
        expect(JSON.stringify(exit.cause)).toMatch(message)
      }
    }
  })
})
