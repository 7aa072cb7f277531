/**
 * The Kafka transport against the test run's Apache Kafka 4.4 broker (and PostgreSQL for the outbox and the
 * failure transport): forwarding with Java's partitions and per-key order, consuming with offsets committed only
 * past settled records, retries and the failure transport, two members of one group, SASL/SCRAM, setup, and records
 * of other producers.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Admin, ConfigResourceTypes, Consumer, Producer } from "@platformatic/kafka"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import type { OutgoingMessage, StoredMessage } from "../src/domain/Envelope.js"
import * as Headers from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as KafkaTransport from "../src/layers/kafka/KafkaTransport.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Cli from "../src/programs/Cli.js"
import * as Forwarder from "../src/programs/Forwarder.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { runCli } from "./support/cli.js"
import { createDatabase, pgLayer } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"
import { kafkaBootstrap, kafkaScram, uniqueName } from "./support/kafka-transport.js"
import { OrderPaid } from "./support/messages.js"

let url = ""
beforeAll(async () => {
  url = await createDatabase("kafka")
}, 90_000)

class PaymentDeclined extends Data.TaggedError("PaymentDeclined")<{ readonly message: string }> {}

const quiet = Logger.withMinimumLogLevel(LogLevel.None)

const waitUntil = (condition: () => boolean, timeout: Duration.DurationInput = "30 seconds") =>
  Effect.sync(condition).pipe(
    Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (ok) => ok }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error("condition not met in time") })
  )

/** One test's stack: PostgreSQL's outbox and `failed` under a router with a Kafka transport of its own topics. */
const stack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(options: {
  readonly handlers: Hs
  readonly retry?: ScheduleRetryStrategy.Options
  readonly kafka?: Partial<KafkaTransport.Options>
}) => {
  const table = uniqueTable("kafka")
  const prefix = uniqueName("kafka")
  const topic = `${prefix}.orders`
  const kafkaOptions: KafkaTransport.Options = {
    brokers: kafkaBootstrap(),
    groupId: prefix,
    sessionTimeout: "6 seconds",
    transports: { kafka: { topic } },
    ...options.kafka
  }
  const transport = TransportRouter.layer(
    PgTransport.make({ table, autoSetup: true }),
    KafkaTransport.make(kafkaOptions)
  )
  const handlers = Handlers.layer(options.handlers).pipe(
    Layer.provide(PgIdempotencyStore.layer({ table: `${table}_idem`, autoSetup: true }))
  )
  const layer = Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layer(options.retry)).pipe(
    Layer.provideMerge(transport),
    Layer.provideMerge(Layer.orDie(pgLayer(url)))
  )
  return { table, prefix, topic, layer, kafkaOptions }
}

const setup = Effect.flatMap(TransportAdmin, (t) => t.setup)

interface Read {
  readonly partition: number
  readonly offset: bigint
  readonly key: string | undefined
  readonly value: string
  readonly headers: Readonly<Record<string, string>>
}

/** Reads `count` records of a topic from its start with a plain client (a group of its own), then leaves. */
const readTopic = (topic: string, count: number, brokers = kafkaBootstrap()) =>
  Effect.promise(async () => {
    const consumer = new Consumer({ clientId: "reader", groupId: uniqueName("reader"), bootstrapBrokers: [brokers] })
    const stream = await consumer.consume({ topics: [topic], mode: "earliest", autocommit: false, maxWaitTime: 200 })
    const read: Array<Read> = []
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`read ${read.length} of ${count} records`)), 30_000)
        stream.on("data", (m) => {
          const headers: Record<string, string> = {}
          for (const [k, v] of m.headers) headers[k.toString()] = v.toString()
          read.push({
            partition: m.partition,
            offset: m.offset,
            key: m.key?.length ? m.key.toString() : undefined,
            value: m.value.toString(),
            headers
          })
          if (read.length >= count) {
            clearTimeout(timer)
            resolve()
          }
        })
      })
    } finally {
      await stream.close().catch(() => undefined)
      await consumer.close().catch(() => undefined)
    }
    return read
  })

/** An OrderPaid message as a producer hands it to a transport. */
const orderPaid = (orderId: number, orderingKey?: string): OutgoingMessage => ({
  messageId: MessageId.make(),
  type: "OrderPaid",
  body: JSON.stringify({ _tag: "OrderPaid", orderId, amount: 1 }),
  headers: Headers.encode(new Headers.Headers({ type: "OrderPaid" })),
  delayMs: 0,
  ...(orderingKey !== undefined ? { orderingKey } : {})
})

describe("Kafka transport", () => {
  it.live(
    "forwarding: a key's messages land in the partition Java picks, in commit order, with id, type and headers",
    () =>
      Effect.gen(function*() {
        const s = stack({ handlers: Forwarder.handlers([OrderPaid], { to: "kafka" }) })
        yield* Effect.gen(function*() {
          yield* setup
          const sql = yield* SqlClient.SqlClient
          const keys = ["order-1", "order-42", "customer:7f3a", "ключ", "a"]
          for (let orderId = 1; orderId <= 60; orderId++) {
            yield* sql.withTransaction(
              Outbox.dispatch(new OrderPaid({ orderId, amount: orderId }), {
                orderingKey: keys[orderId % keys.length]!,
                headers: { tenant: "acme" }
              })
            )
          }
          const ids = new Map(
            (yield* sql<{ message_id: string; body: string }>`SELECT message_id::text, body FROM ${sql(s.table)}`)
              .map((r) => [JSON.parse(r.body).orderId as number, r.message_id])
          )
          const forwarder = yield* Effect.fork(
            Worker.run({ transports: ["outbox"], concurrency: 20, batchSize: 20, sleep: "20 millis" })
          )
          const read = yield* readTopic(s.topic, 60)
          yield* Fiber.interrupt(forwarder)
          expect(read.length).toBe(60)
          for (const r of read) {
            const body = JSON.parse(r.value)
            expect(r.key).toBe(keys[body.orderId % keys.length])
            expect(r.partition).toBe(KafkaTransport.partitionOf(r.key!, 3))
            expect(r.headers.id).toBe(ids.get(body.orderId))
            expect(r.headers.type).toBe("OrderPaid")
            expect(r.headers.tenant).toBe("acme")
          }
          for (const key of keys) {
            const orders = read.filter((r) => r.key === key).sort((a, b) => Number(a.offset - b.offset))
              .map((r) => JSON.parse(r.value).orderId as number)
            expect(orders).toEqual([...orders].sort((a, b) => a - b))
          }
          expect((yield* sql`SELECT 1 FROM ${sql(s.table)}`).length).toBe(0)
        }).pipe(Effect.provide(s.layer))
      }).pipe(quiet),
    120_000
  )

  it.live(
    "forwarding a claimed batch: a record over the topic's size limit fails alone, the batch's others are forwarded",
    () =>
      Effect.gen(function*() {
        const s = stack({
          handlers: Forwarder.handlers([OrderPaid], { to: "kafka" }),
          retry: { default: { maxRetries: 0 } }
        })
        yield* Effect.promise(async () => {
          const admin = new Admin({ clientId: "small-topic", bootstrapBrokers: [kafkaBootstrap()] })
          try {
            await admin.createTopics({
              topics: [s.topic],
              partitions: 3,
              replicas: 1,
              configs: [{ name: "max.message.bytes", value: "2048" }]
            })
          } finally {
            await admin.close()
          }
        })
        yield* Effect.gen(function*() {
          yield* setup
          const sql = yield* SqlClient.SqlClient
          for (let orderId = 1; orderId <= 10; orderId++) {
            yield* Outbox.dispatch(new OrderPaid({ orderId, amount: orderId }), {
              orderingKey: `order-${orderId}`,
              ...(orderId === 4 ? { headers: { note: "x".repeat(5_000) } } : {})
            })
          }
          const run = yield* Worker.run({ transports: ["outbox"], batchSize: 50, stopWhenEmpty: true })
          expect(run).toMatchObject({ handled: 9, retried: 0, failed: 1 })
          // Records of a failed request's other partitions were written, and are again with their half: duplicates.
          const written = (yield* Effect.flatMap(TransportAdmin, (t) => t.stats("kafka"))).ready
          const read = yield* readTopic(s.topic, written)
          const forwarded = new Set(read.map((r) => JSON.parse(r.value).orderId as number))
          expect([...forwarded].sort((a, b) => a - b)).toEqual([1, 2, 3, 5, 6, 7, 8, 9, 10])
          const failed = yield* sql<{ body: string; headers: string }>`
            SELECT body, headers FROM ${sql(s.table)} WHERE queue_name = 'failed'`
          expect(failed.map((r) => JSON.parse(r.body).orderId)).toEqual([4])
          expect(JSON.parse(failed[0]!.headers).errorDetails.tag).toBe("TransportError")
        }).pipe(Effect.provide(s.layer))
      }).pipe(quiet),
    120_000
  )

  it.live(
    "consuming: a partition's offset moves only past settled records; a key waits behind its blocked message",
    () =>
      Effect.gen(function*() {
        const handled: Array<number> = []
        const gate = yield* Deferred.make<void>()
        const s = stack({
          handlers: [
            Handlers.handler(OrderPaid, (m) =>
              Effect.gen(function*() {
                if (m.orderId === 3) yield* Deferred.await(gate)
                handled.push(m.orderId)
              }), { fromTransport: "kafka" })
          ]
        })
        yield* Effect.gen(function*() {
          yield* setup
          const outbox = yield* Transport
          const admin = yield* TransportAdmin
          // Order 3 is of key "slow", as are 6 and 9; the others are of other keys.
          const key = (orderId: number) => (orderId % 3 === 0 ? "slow" : `k${orderId}`)
          yield* outbox.send("kafka", Array.from({ length: 12 }, (_, i) => orderPaid(i + 1, key(i + 1))))
          const worker = yield* Effect.fork(Worker.run({ transports: ["kafka"], concurrency: 4, sleep: "20 millis" }))
          yield* waitUntil(() => handled.length === 8)
          const slowPartition = KafkaTransport.partitionOf("slow", 3)
          const before = yield* admin.stats("kafka")
          const slow = before.partitions!.find((p) => p.partition === slowPartition)!
          expect(handled.filter((n) => n % 3 === 0)).toEqual([])
          // Orders 3, 6, 9 and 12 are in that partition: nothing from order 3 on is committed.
          expect(slow.lag).toBeGreaterThanOrEqual(4)
          yield* Deferred.succeed(gate, undefined)
          yield* waitUntil(() => handled.length === 12)
          expect(handled.filter((n) => n % 3 === 0)).toEqual([3, 6, 9, 12])
          yield* waitUntil(() => false, "300 millis").pipe(Effect.ignore)
          const after = yield* admin.stats("kafka")
          expect(after.partitions!.map((p) => p.lag)).toEqual([0, 0, 0])
          yield* Fiber.interrupt(worker)
        }).pipe(Effect.provide(s.layer))
      }).pipe(quiet),
    120_000
  )

  it.live(
    "consuming: an idle worker takes a key's next record as soon as the previous one is acked, not at its next poll",
    () =>
      Effect.gen(function*() {
        const handled: Array<number> = []
        const s = stack({
          handlers: [
            Handlers.handler(OrderPaid, (m) => Effect.sync(() => handled.push(m.orderId)), { fromTransport: "kafka" })
          ]
        })
        yield* Effect.gen(function*() {
          yield* setup
          const transport = yield* Transport
          yield* transport.send("kafka", Array.from({ length: 5 }, (_, i) => orderPaid(i + 1, "one-key")))
          // Every record but the first waits behind its key; only the ack of the one before frees it. The poll
          // interval is an hour: the test's timeout ends it long before, unless the ack wakes the worker.
          const worker = yield* Effect.fork(Worker.run({ transports: ["kafka"], sleep: "1 hour" }))
          yield* waitUntil(() => handled.length === 5)
          expect(handled).toEqual([1, 2, 3, 4, 5])
          yield* Fiber.interrupt(worker)
        }).pipe(Effect.provide(s.layer))
      }).pipe(quiet),
    120_000
  )

  it.live(
    "retries with the strategy's backoff in place, then the failure transport in PostgreSQL; failed:retry sends it back to Kafka",
    () =>
      Effect.gen(function*() {
        let attempts = 0
        let heal = false
        const handled: Array<number> = []
        const s = stack({
          retry: { default: { maxRetries: 2, delay: "50 millis", multiplier: 2, jitter: 0 } },
          handlers: [
            Handlers.handler(OrderPaid, (m) =>
              m.orderId === 1 && !heal
                ? Effect.fail(new PaymentDeclined({ message: `attempt ${++attempts} refused` }))
                : Effect.sync(() => handled.push(m.orderId)), { fromTransport: "kafka" })
          ]
        })
        yield* Effect.gen(function*() {
          yield* setup
          const transport = yield* Transport
          const admin = yield* TransportAdmin
          expect(transport.capabilities("kafka").pipe((c) => c._tag === "Some" && c.value.orderingKeys)).toBe(true)
          yield* transport.send("kafka", [orderPaid(1, "k"), orderPaid(2, "k"), orderPaid(3, "other")])
          const events: Array<string> = []
          const worker = yield* Effect.fork(Worker.run({
            transports: ["kafka"],
            sleep: "20 millis",
            onEvent: (e) =>
              Effect.sync(() => events.push(e._tag === "Retried" ? `retry ${e.attempt} in ${e.delayMs} ms` : e._tag))
          }))
          yield* waitUntil(() => handled.length === 2)
          // Order 2 waited for order 1 (same key) until it was failed; order 3 did not.
          expect(handled).toEqual([3, 2])
          expect(attempts).toBe(3)
          expect(events.filter((e) => e.startsWith("retry"))).toEqual(["retry 1 in 50 ms", "retry 2 in 100 ms"])
          const [failed] = yield* admin.list("failed", { max: 10 })
          expect(failed!.messageId).toBeDefined()
          const headers = Headers.decode(failed!.headers)
          expect(headers._tag === "Right" && headers.right.originalTransport).toBe("kafka")
          expect(headers._tag === "Right" && headers.right.errorDetails?.message).toMatch(/attempt 3 refused/)
          yield* waitUntil(() => false, "300 millis").pipe(Effect.ignore)
          expect((yield* admin.stats("kafka")).partitions!.every((p) => p.lag === 0)).toBe(true)
          // The operator's failed:retry: the message goes back to its topic, and is handled.
          heal = true
          expect(
            yield* admin.move("failed", failed!.id, {
              to: "kafka",
              headers: new Headers.Headers({ type: "OrderPaid" })
            })
          )
            .toBe(true)
          yield* waitUntil(() => handled.length === 3)
          expect(handled).toEqual([3, 2, 1])
          yield* Fiber.interrupt(worker)
        }).pipe(Effect.provide(s.layer))
      }).pipe(quiet),
    120_000
  )

  it.live(
    "two members of one group share the partitions; one leaving hands its records over: every message handled",
    () =>
      Effect.gen(function*() {
        const seen: Array<number> = []
        const s = stack({
          handlers: [
            Handlers.handler(OrderPaid, (m) => Effect.sync(() => seen.push(m.orderId)), {
              fromTransport: "kafka",
              idempotent: true
            })
          ]
        })
        yield* Effect.gen(function*() {
          yield* setup
          const transport = yield* Transport
          yield* transport.send("kafka", Array.from({ length: 300 }, (_, i) => orderPaid(i + 1, `k${i % 30}`)))
          // A second member of the same group, in a layer of its own.
          const second = stack({
            handlers: [
              Handlers.handler(OrderPaid, (m) => Effect.sync(() => seen.push(m.orderId)), {
                fromTransport: "kafka",
                idempotent: true
              })
            ],
            kafka: s.kafkaOptions
          })
          const first = yield* Effect.fork(Worker.run({ transports: ["kafka"], sleep: "20 millis", batchSize: 5 }))
          const other = yield* Effect.fork(
            Worker.run({ transports: ["kafka"], sleep: "20 millis", batchSize: 5 }).pipe(
              Effect.provide(Layer.mergeAll(second.layer))
            )
          )
          yield* waitUntil(() => new Set(seen).size >= 100)
          yield* Fiber.interrupt(other)
          yield* waitUntil(() => new Set(seen).size === 300, "60 seconds")
          yield* Fiber.interrupt(first)
          expect(new Set(seen).size).toBe(300)
          const sql = yield* SqlClient.SqlClient
          const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${s.table}_idem`)}`
          expect(row!.n).toBe(300)
        }).pipe(Effect.provide(s.layer))
      }).pipe(quiet),
    180_000
  )

  it.live(
    "setup creates the topics with their partitions and min.insync.replicas; a send before it is StorageNotReadyError",
    () =>
      Effect.gen(function*() {
        const prefix = uniqueName("setup")
        const transport = yield* KafkaTransport.make({
          brokers: kafkaBootstrap(),
          transports: {
            orders: { topic: `${prefix}.orders`, partitions: 5, minInsyncReplicas: 1, failureTransport: "dead" },
            dead: { topic: `${prefix}.dead`, partitions: 1, minInsyncReplicas: 2 }
          }
        })
        const early = yield* Effect.exit(transport.send("orders", [orderPaid(1)]))
        expect(Exit.isFailure(early) && JSON.stringify(early.cause)).toMatch(
          /"_tag":"StorageNotReadyError"/
        )
        expect(Exit.isFailure(early) && JSON.stringify(early.cause)).toMatch(/does not exist: run setup-transports/)
        expect(yield* transport.setup).toEqual([
          `kafka topic ${prefix}.orders (5 partitions)`,
          `kafka topic ${prefix}.dead (1 partition)`
        ])
        expect(yield* transport.setup).toEqual([])
        const stats = yield* transport.stats("orders")
        expect(stats.partitions!.map((p) => p.partition)).toEqual([0, 1, 2, 3, 4])
        yield* transport.send("orders", [orderPaid(1, "a")])
        expect((yield* transport.stats("orders")).ready).toBe(1)
        const configs = yield* Effect.promise(async () => {
          const admin = new Admin({ clientId: "configs", bootstrapBrokers: [kafkaBootstrap()] })
          try {
            return await admin.describeConfigs({
              resources: [`${prefix}.orders`, `${prefix}.dead`].map((resourceName) => ({
                resourceType: ConfigResourceTypes.TOPIC,
                resourceName,
                configurationKeys: ["min.insync.replicas"]
              }))
            })
          } finally {
            await admin.close()
          }
        })
        expect(configs.map((c) => [c.resourceName, c.configs[0]?.value])).toEqual([
          [`${prefix}.orders`, "1"],
          [`${prefix}.dead`, "2"]
        ])
      }).pipe(Effect.scoped, quiet),
    60_000
  )

  it.live(
    "a topic per message type (topicOf), consumed by its transport; the W3C trace context travels in record headers",
    () =>
      Effect.gen(function*() {
        const prefix = uniqueName("topics")
        const transport = yield* KafkaTransport.make({
          brokers: kafkaBootstrap(),
          groupId: prefix,
          transports: {
            orders: {
              topic: `${prefix}.orders`,
              topicOf: { Shipped: `${prefix}.shipping` },
              failureTransport: "orders"
            }
          }
        })
        expect(yield* transport.setup).toHaveLength(2)
        const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        yield* transport.send("orders", [
          orderPaid(1, "a"),
          { ...orderPaid(2, "a"), type: "Shipped", traceparent, tracestate: "vendor=1" }
        ])
        const [shipped] = yield* readTopic(`${prefix}.shipping`, 1)
        expect(shipped!.headers).toMatchObject({ type: "Shipped", traceparent, tracestate: "vendor=1" })
        const [paid] = yield* readTopic(`${prefix}.orders`, 1)
        expect(paid!.headers.type).toBe("OrderPaid")
        const session = yield* transport.open(["orders"])
        const first = yield* session.claim("orders", 10, [])
        const second = yield* session.claim("orders", 10, first.messages.map((m) => m.id))
        expect([...first.messages, ...second.messages].map((m) => JSON.parse(m.body).orderId).sort()).toEqual([1, 2])
      }).pipe(Effect.scoped, quiet),
    60_000
  )

  it.live(
    "sends that went out together and were refused for one of them: the others are sent again, and every one acknowledged is written",
    () =>
      Effect.gen(function*() {
        const prefix = uniqueName("group")
        const transport = yield* KafkaTransport.make({
          brokers: kafkaBootstrap(),
          transports: { orders: { topic: `${prefix}.orders` }, ghost: { topic: `${prefix}.ghost` } }
        })
        const admin = new Admin({ clientId: "group-test", bootstrapBrokers: [kafkaBootstrap()] })
        yield* Effect.promise(() => admin.createTopics({ topics: [`${prefix}.orders`], partitions: 3, replicas: 1 }))
        yield* Effect.promise(() => admin.close())
        yield* transport.send("orders", [orderPaid(0, "warm")])
        // The first send goes alone; the 30 after it wait for it, then go out together — with the one to the
        // topic that does not exist, which has the broker refuse the whole request.
        const sends = Array.from({ length: 30 }, (_, i) =>
          Effect.either(
            i === 7
              ? transport.send("ghost", [orderPaid(i)])
              : transport.send("orders", Array.from({ length: 50 }, (_, j) => orderPaid(i * 100 + j, `k${j}`)))
          ))
        const results = yield* Effect.all([Effect.either(transport.send("orders", [orderPaid(1)])), ...sends], {
          concurrency: "unbounded"
        })
        const failed = results.flatMap((r) => (r._tag === "Left" ? [r.left._tag] : []))
        expect(failed).toEqual(["StorageNotReadyError"])
        // Sent again all at once, the client's idempotent producer acknowledged 1 400 of these records and wrote 50.
        expect((yield* transport.stats("orders")).ready).toBe(2 + 29 * 50)
      }).pipe(Effect.scoped, quiet),
    60_000
  )

  it.live(
    "SASL/SCRAM: sends and consumes with SCRAM-SHA-256 and -512; a wrong password is a TransportError, not a hang",
    () =>
      Effect.gen(function*() {
        const scram = kafkaScram()
        if (scram === null) {
          throw new Error("KAFKA_BOOTSTRAP names a broker without KAFKA_SCRAM_BOOTSTRAP/USERNAME/PASSWORD")
        }
        for (const mechanism of ["SCRAM-SHA-256", "SCRAM-SHA-512"] as const) {
          const prefix = uniqueName("scram")
          yield* Effect.scoped(Effect.gen(function*() {
            const t = yield* KafkaTransport.make({
              brokers: scram.bootstrap,
              sasl: { mechanism, username: scram.username, password: Redacted.make(scram.password) },
              groupId: prefix,
              transports: { kafka: { topic: `${prefix}.t`, failureTransport: "kafka" } }
            })
            yield* t.setup
            yield* t.send("kafka", [orderPaid(1, "a")])
            const session = yield* t.open(["kafka"])
            const claimed = yield* session.claim("kafka", 10, [])
            expect(claimed.messages.map((m) => JSON.parse(m.body).orderId)).toEqual([1])
          }))
        }
        // The same through a URL: kafka://user:password@host:port?sasl=scram-sha-512.
        const viaUrl = yield* Effect.scoped(Effect.gen(function*() {
          const t = yield* KafkaTransport.make({
            brokers: `kafka://${encodeURIComponent(scram.username)}:${
              encodeURIComponent(scram.password)
            }@${scram.bootstrap}`,
            transports: { kafka: { topic: uniqueName("scram-url"), failureTransport: "kafka" } }
          })
          return yield* t.setup
        }))
        expect(viaUrl.length).toBe(1)
        const refused = yield* Effect.scoped(Effect.gen(function*() {
          const t = yield* KafkaTransport.make({
            brokers: scram.bootstrap,
            sasl: { mechanism: "SCRAM-SHA-512", username: scram.username, password: "wrong" },
            requestTimeout: "5 seconds",
            transports: { kafka: { topic: uniqueName("scram-no"), failureTransport: "kafka" } }
          })
          return yield* Effect.exit(t.send("kafka", [orderPaid(1)]))
        }))
        expect(Exit.isFailure(refused) && JSON.stringify(refused.cause)).toMatch(/"_tag":"TransportError"/)
        expect(Exit.isFailure(refused) && JSON.stringify(refused.cause)).toMatch(/[Aa]uthentication|credentials/)
      }).pipe(quiet),
    120_000
  )

  it.live(
    "records of other producers: Debezium's headers give id and type; a record that is not JSON goes to the failure transport",
    () =>
      Effect.gen(function*() {
        const handled: Array<{ readonly orderId: number; readonly messageId: string }> = []
        const s = stack({
          handlers: [
            Handlers.handler(OrderPaid, (m, envelope) =>
              Effect.sync(() => handled.push({ orderId: m.orderId, messageId: envelope.messageId })), {
              fromTransport: "kafka"
            })
          ]
        })
        yield* Effect.gen(function*() {
          yield* setup
          const id = "0190f5a8-7b2c-7def-8123-456789abcdef"
          yield* Effect.promise(async () => {
            const producer = new Producer({ clientId: "debezium-like", bootstrapBrokers: [kafkaBootstrap()] })
            await producer.send({
              messages: [
                {
                  topic: s.topic,
                  key: Buffer.from("order-7"),
                  value: Buffer.from(JSON.stringify({ _tag: "OrderPaid", orderId: 7, amount: 3 })),
                  headers: new Map([[Buffer.from("id"), Buffer.from(id)], [
                    Buffer.from("type"),
                    Buffer.from("OrderPaid")
                  ]])
                },
                {
                  topic: s.topic,
                  key: Buffer.from("order-8"),
                  value: Buffer.from("\u0000not json"),
                  headers: new Map([[Buffer.from("type"), Buffer.from("OrderPaid")]])
                }
              ]
            })
            await producer.close()
          })
          const admin = yield* TransportAdmin
          const worker = yield* Effect.fork(Worker.run({ transports: ["kafka"], sleep: "20 millis" }))
          yield* waitUntil(() =>
            handled.length === 1
          )
          expect(handled).toEqual([{ orderId: 7, messageId: id }])
          let failed: ReadonlyArray<StoredMessage> = []
          yield* Effect.gen(function*() {
            failed = yield* admin.list("failed", { max: 10 })
            return failed.length > 0
          }).pipe(
            Effect.repeat({ schedule: Schedule.spaced("50 millis"), until: (found) => found }),
            Effect.timeout("20 seconds")
          )
          expect(failed.length).toBe(1)
          const headers = Headers.decode(failed[0]!.headers)
          expect(headers._tag === "Right" && headers.right.errorDetails?.tag).toBe("MessageDecodeError")
          // PostgreSQL's text holds no NUL: the failure copy has U+FFFD in its place.
          expect(failed[0]!.body).toBe("\uFFFDnot json")
          yield* Fiber.interrupt(worker)
        }).pipe(Effect.provide(s.layer))
      }).pipe(quiet),
    120_000
  )

  it.scopedLive(
    "the command line: setup-transports creates the topics, stats shows the group's lag per partition, consume and failed:retry reach Kafka",
    () =>
      Effect.gen(function*() {
        const dsn = yield* Effect.promise(() => createDatabase("kafkacli"))
        const table = uniqueTable("kafkacli")
        const prefix = uniqueName("kafkacli")
        const handled: Array<number> = []
        let refuse = true
        const cli = Cli.make({
          transport: { table },
          kafka: { brokers: `kafka://${kafkaBootstrap()}`, groupId: prefix, transports: { kafka: { topic: prefix } } },
          idempotency: false,
          retry: { default: { maxRetries: 0 } },
          handlers: Handlers.layer([
            ...Forwarder.handlers([OrderPaid], { to: "kafka" }),
            Handlers.handler(OrderPaid, (paid) =>
              refuse && paid.orderId === 2
                ? Effect.fail(new PaymentDeclined({ message: "declined" }))
                : Effect.sync(() => handled.push(paid.orderId)), { fromTransport: "kafka" })
          ])
        })
        const setup = yield* runCli(cli, ["setup-transports", "--dsn", dsn])
        expect(setup.stderr).toBe("")
        expect(setup.stdout).toContain(`kafka topic ${prefix} (3 partitions)`)
        yield* Effect.forEach([1, 2], (orderId) =>
          Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }), { orderingKey: `order-${orderId}` })).pipe(
            Effect.provide(
              Outbox.layer().pipe(Layer.provide(PgTransport.layer({ table })), Layer.provide(Layer.orDie(pgLayer(dsn))))
            )
          )
        const forward = yield* runCli(cli, ["consume", "outbox", "--limit", "2", "--sleep", "0.05", "--dsn", dsn])
        expect(forward.stdout).toContain("Worker stopped (limit): handled 2, retried 0, failed 0.")
        const lagging = yield* runCli(cli, ["stats", "kafka", "--dsn", dsn, "--format", "json"])
        const stats = JSON.parse(lagging.stdout).transports.kafka
        expect(
          stats.partitions.map((p: { lag: number }) =>
            p.lag
          ).reduce((a: number, b: number) => a + b, 0)
        ).toBe(2)
        const text = yield* runCli(cli, ["stats", "kafka", "--dsn", dsn])
        expect(text.stdout).toMatch(/Partition.*Committed.*End.*Lag/)
        const consume = yield* runCli(cli, ["consume", "kafka", "--limit", "2", "--sleep", "0.05", "--dsn", dsn])
        expect(consume.stdout).toContain("Worker stopped (limit): handled 1, retried 0, failed 1.")
        expect(handled).toEqual([1])
        const show = yield* runCli(cli, ["failed:show", "--dsn", dsn, "--format", "json"])
        const [failed] = JSON.parse(show.stdout).messages ?? JSON.parse(show.stdout)
        expect(failed).toBeDefined()
        refuse = false
        const retry = yield* runCli(cli, ["failed:retry", "--all", "--force", "--dsn", dsn])
        expect(retry.stderr).toBe("")
        yield* runCli(cli, ["consume", "kafka", "--limit", "1", "--sleep", "0.05", "--dsn", dsn])
        expect(handled).toEqual([1, 2])
      }).pipe(quiet),
    120_000
  )
})
