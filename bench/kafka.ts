/**
 * The Kafka scenario (`npm run bench -- --scenarios kafka`): the Kafka transport on a private Apache Kafka broker
 * (test/support/kafka.ts, or `KAFKA_BOOTSTRAP`) beside the run's PostgreSQL, and RabbitMQ (test/support/rabbitmq.ts,
 * or `AMQP_URL`) for the AMQP forwarder.
 *
 * - Forward: `messages` keyed messages (round-robin over `keys` ordering keys) committed in the outbox, then one
 *   worker with `Forwarder.handlers` drains them into a topic of 3 partitions — messages/s from the worker's start
 *   until the outbox is empty, broker acks included (idempotent producer, `acks=all`). Against the raw limit: a
 *   plain `@platformatic/kafka` `Producer` (idempotent, `acks=all`, Java's partitioner) sending records of the same
 *   key, value and headers in batches, from memory; and against the same forwarder into RabbitMQ. A grid of worker
 *   settings (batchSize × concurrency) finds the forwarder's best.
 * - Consume: the same records read back by a worker (`fromTransport: "kafka"`) with an idempotent handler
 *   (`PgIdempotencyStore`), with a plain handler, and by a raw `Consumer` that commits its offsets as fast as the
 *   broker takes them; from the first record handled until the group's committed offsets reach the topic's end.
 * - Latency: a forwarder and a Kafka consumer running in one process while a producer commits one message every
 *   `1 / latencyRate` s; commit returning → the Kafka consumer's handler start (and the same through RabbitMQ).
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { Admin, compatibilityPartitioner, Consumer, ProduceAcks, Producer } from "@platformatic/kafka"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as inspector from "node:inspector/promises"
import * as path from "node:path"
import pg from "pg"
import { v7 as uuidv7 } from "uuid"
import { resend } from "../src/domain/Envelope.js"
import * as Headers from "../src/domain/Headers.js"
import * as Message from "../src/domain/Message.js"
import * as AmqpTransport from "../src/layers/amqp/AmqpTransport.js"
import * as KafkaTransport from "../src/layers/kafka/KafkaTransport.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Forwarder from "../src/programs/Forwarder.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { ensureKafka, kafkaVersion } from "../test/support/kafka.js"
import { ensureBroker } from "../test/support/rabbitmq.js"
import { freshDatabase, settle, withClient } from "./cluster.js"
import { BenchNoop, keyOf, queue, sleep, table, withDeadline } from "./common.js"
import { type Percentiles, percentiles } from "./latency.js"
import { claimSql } from "./raw.js"
import { rate, ratio, summarize, type Summary, table as markdownTable } from "./stats.js"

export interface KafkaOptions {
  /** Forward and consume: messages per round. */
  readonly messages: number
  /**
   * The forward runs: the ordering keys their messages are spread over (message n on key `k${n % keys}`; 0: no
   * keys). The first is the headline (and the consume and latency runs' keys).
   */
  readonly keys: ReadonlyArray<number>
  readonly rounds: number
  /** Unmeasured messages each contender handles first in its process (JIT, connections). */
  readonly warmup: number
  /** Records produced once before the first round, so that the broker's JVM has compiled its produce path. */
  readonly brokerWarmup: number
  /** Forwarder settings tried (batchSize × concurrency); the best is compared with the raw limit. */
  readonly grid: ReadonlyArray<WorkerSettings>
  /**
   * Raw producer: records per `send`, and sends in flight at once (each its own lane). Keep 1: concurrent sends of the
   * client's idempotent producer fail with OUT_OF_ORDER_SEQUENCE_NUMBER, or are acknowledged and not written
   * (@platformatic/kafka 1.35; see the Kafka producer's tests).
   */
  readonly rawSettings: ReadonlyArray<RawSettings>
  /** The batch of the one-send-per-claim bound and of the raw relay. */
  readonly claimBatch: number
  /** Consumers' worker settings. */
  readonly consume: WorkerSettings
  /** Latency: messages per second, seconds measured (after a warm-up of `latencyWarmupSeconds`). */
  readonly latencyRate: number
  readonly latencySeconds: number
  readonly latencyWarmupSeconds: number
}

/** One forward or consume run's messages: message n on key `k${n % keys}` (0: no keys), after `warmup` unmeasured. */
export interface Sizes {
  readonly messages: number
  readonly keys: number
  readonly warmup: number
}

export interface WorkerSettings {
  readonly batchSize: number
  readonly concurrency: number
  /**
   * The forward as a per-message handler (`Forwarder.forward` in `Handlers.handler`, one send per message) instead
   * of `Forwarder.handlers` (a batch handler: one send per claimed batch): the design's share, in the same run.
   */
  readonly perMessage?: boolean
}

export interface RawSettings {
  readonly batch: number
  readonly inFlight: number
}

/** Messages/s over rounds, and this process's CPU µs per message (median over rounds). */
export interface Figure {
  readonly rates: Summary
  readonly cpuUs: number
}

/** The forward runs over one key count. */
export interface ForwardResult {
  readonly keys: number
  /** Forwarder into Kafka per setting. */
  readonly grid: ReadonlyArray<Figure & { readonly settings: WorkerSettings }>
  readonly best: WorkerSettings
  /** The library's transports, one send per claimed batch, no worker. */
  readonly batched: Figure
  /** The transport's claim function and a plain producer, no library. */
  readonly relay: Figure
  readonly raw: ReadonlyArray<Figure & { readonly settings: RawSettings }>
  readonly rawBest: RawSettings
  /** The forwarder into RabbitMQ with `best`. */
  readonly amqp: Figure
}

export interface KafkaResult {
  readonly version: string
  readonly messages: number
  readonly warmup: number
  readonly rounds: number
  readonly claimBatch: number
  readonly forward: ReadonlyArray<ForwardResult>
  readonly consume: {
    readonly keys: number
    readonly settings: WorkerSettings
    readonly idempotent: Summary
    readonly plain: Summary
    readonly raw: Summary
  }
  readonly latency: ReadonlyArray<{ readonly label: string; readonly ms: Percentiles }>
  readonly latencyRate: number
  readonly latencySeconds: number
  readonly latencyKeys: number
  /** Records found in the forward topics beyond those forwarded (redelivered duplicates), over all rounds. */
  readonly duplicates: number
}

const quiet = <A, E, R>(self: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(self, LogLevel.Error)

let names = 0
const unique = (prefix: string) => `bench-${prefix}-${process.pid}-${++names}`

const partitions = 3

/** The raw consumer reads this many times the others' records. */
const rawConsumeFactor = 10

/** The headers the forwarder writes for a BenchNoop (`Forwarder.forwardedHeaders`, encoded). */
const storedHeaders = `{"type":"BenchNoop"}`
/** The body `Outbox.dispatch(new BenchNoop({ n }))` stores. */
const bodyOf = (n: number) => `{"n":${n},"_tag":"BenchNoop"}`

/** Records of the raw producer: the key, value and headers a forwarded BenchNoop carries (`id`, `type`, stored). */
const recordsOf = (topic: string, from: number, to: number, keys: number) => {
  const records = new Array(to - from + 1)
  for (let n = from; n <= to; n++) {
    records[n - from] = {
      topic,
      ...(keys > 0 ? { key: Buffer.from(keyOf(n, keys)) } : {}),
      value: Buffer.from(bodyOf(n)),
      headers: new Map([
        [Buffer.from("id"), Buffer.from(uuidv7())],
        [Buffer.from("type"), Buffer.from("BenchNoop")],
        [Buffer.from("x-outbox-headers"), Buffer.from(storedHeaders)]
      ])
    }
  }
  return records
}

const createTopic = async (bootstrap: string, topic: string) => {
  const admin = new Admin({ clientId: "bench-admin", bootstrapBrokers: [bootstrap] })
  try {
    await admin.createTopics({ topics: [topic], partitions, replicas: 1 })
  } finally {
    await admin.close()
  }
}

/** The sum of the topic's end offsets: records written. */
const endOffsets = async (bootstrap: string, topic: string): Promise<ReadonlyArray<bigint>> => {
  const consumer = new Consumer({ clientId: "bench-ends", groupId: unique("ends"), bootstrapBrokers: [bootstrap] })
  try {
    const ends = await consumer.listOffsets({ topics: [topic] })
    return ends.get(topic) ?? []
  } finally {
    await consumer.close()
  }
}
const total = (offsets: ReadonlyArray<bigint>) => offsets.reduce((a, b) => a + Number(b), 0)

/** Resolves when the group's committed offsets of `topic` reach `ends` (polled every 10 ms); the time then. */
const committedAt = async (bootstrap: string, group: string, topic: string, ends: ReadonlyArray<bigint>) => {
  const admin = new Admin({ clientId: "bench-lag", bootstrapBrokers: [bootstrap] })
  try {
    for (;;) {
      const [found] = await admin.listConsumerGroupOffsets({ groups: [group] })
      const committed = found?.topics.find((t) => t.name === topic)?.partitions ?? []
      const done = ends.every((end, p) =>
        end === 0n || (committed.find((c) => c.partitionIndex === p)?.committedOffset ?? -1n) >= end
      )
      if (done) return performance.now()
      await sleep(10)
    }
  } finally {
    await admin.close()
  }
}

// ---------------------------------------------------------------------------------------------------
// Stacks

export type Target = "kafka" | "amqp"

export interface Brokers {
  readonly kafka: string
  readonly amqp: string
}

/** The broker backend of a target, its topic or queue named `name`. */
const backendOf = (target: Target, brokers: Brokers, name: string) =>
  target === "kafka"
    ? KafkaTransport.make({
      brokers: brokers.kafka,
      groupId: name,
      transports: { kafka: { topic: name, partitions } }
    })
    : AmqpTransport.make({ url: brokers.amqp, exchange: { name }, transports: { amqp: { queue: name } } })

/** PostgreSQL's outbox (and `failed`) under a router with the target's transport; the given handlers. */
const stackOf = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(
  url: string,
  target: Target,
  brokers: Brokers,
  name: string,
  handlers: Hs
) =>
  Layer.mergeAll(
    Outbox.layer(),
    Handlers.layer(handlers).pipe(
      Layer.provide(PgIdempotencyStore.layer({ table: "bench_idempotency", autoSetup: true }))
    ),
    ScheduleRetryStrategy.layerDefault
  ).pipe(
    Layer.provideMerge(TransportRouter.layer(PgTransport.make({ table }), backendOf(target, brokers, name))),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 10 }))
  )

/** A `BenchNoop` whose class derives its ordering key (as bench/ours.ts's), so `dispatchAll` keys each message. */
class KeyedBenchNoop extends BenchNoop {
  constructor(n: number, readonly key: string) {
    super({ n })
  }
  [Message.orderingKey]() {
    return this.key
  }
}

/** Dispatches messages `from..to`, message n on key `k${n % keys}`, with `dispatchAll` in transactions of 1 000. */
const seedKeyed = (from: number, to: number, keys: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox
    for (let lo = from; lo <= to; lo += 1_000) {
      const batch: Array<BenchNoop> = []
      for (let n = lo; n <= Math.min(to, lo + 999); n++) {
        batch.push(keys > 0 ? new KeyedBenchNoop(n, keyOf(n, keys)) : new BenchNoop({ n }))
      }
      yield* sql.withTransaction(outbox.dispatchAll(batch))
    }
  })

// ---------------------------------------------------------------------------------------------------
// Forward

interface ForwardRound {
  readonly perSecond: number
  /** Records in the target beyond those forwarded (Kafka only). */
  readonly duplicates: number
  /** This process's CPU time per message while timed, µs. */
  readonly cpuUs: number
}

let profiles = 0

/**
 * Times `f`: messages/s for `messages`, and this process's CPU µs per message meanwhile. With
 * `KAFKA_BENCH_PROFILE=<dir>`, a CPU profile of the timed part goes there (`<n>.cpuprofile`).
 */
const timed = async (messages: number, f: () => Promise<unknown>) => {
  const dir = process.env["KAFKA_BENCH_PROFILE"]
  const session = dir === undefined || dir === "" ? undefined : new inspector.Session()
  if (session !== undefined) {
    session.connect()
    await session.post("Profiler.enable")
    await session.post("Profiler.start")
  }
  const cpu = process.cpuUsage()
  const t0 = performance.now()
  await f()
  const seconds = (performance.now() - t0) / 1000
  const used = process.cpuUsage(cpu)
  if (session !== undefined) {
    const { profile } = await session.post("Profiler.stop")
    fs.writeFileSync(path.join(dir!, `${++profiles}.cpuprofile`), JSON.stringify(profile))
    session.disconnect()
  }
  return { perSecond: messages / seconds, cpuUs: (used.user + used.system) / messages }
}

/**
 * One forwarder round on a fresh database and topic: `warmup` messages forwarded first (not timed), then `messages`
 * committed, the tables settled, and the worker timed from its start until the outbox is empty.
 */
export const forwardOurs = async (
  adminUrl: string,
  brokers: Brokers,
  target: Target,
  settings: WorkerSettings,
  o: Sizes
): Promise<ForwardRound> => {
  const db = await freshDatabase(adminUrl, `kafka_fwd_${target}`)
  const name = unique(`fwd-${target}`)
  const runtime = ManagedRuntime.make(
    stackOf(
      db.url,
      target,
      brokers,
      name,
      settings.perMessage === true
        ? [Handlers.handler(BenchNoop, (_, envelope) => Forwarder.forward(envelope, { to: target }))]
        : Forwarder.handlers([BenchNoop], { to: target })
    )
  )
  try {
    const drain = Worker.run({
      transports: [queue],
      batchSize: settings.batchSize,
      concurrency: settings.concurrency,
      stopWhenEmpty: true
    })
    await runtime.runPromise(quiet(Effect.flatMap(TransportAdmin, (t) => t.setup)))
    if (o.warmup > 0) {
      await runtime.runPromise(quiet(seedKeyed(1, o.warmup, o.keys)))
      await runtime.runPromise(quiet(drain))
    }
    await runtime.runPromise(quiet(seedKeyed(o.warmup + 1, o.warmup + o.messages, o.keys)))
    await settle(db.url)
    const time = await timed(o.messages, () => runtime.runPromise(quiet(drain)))
    const left = await withClient(db.url, (c) => c.query<{ n: string }>(`SELECT count(*) AS n FROM "${table}"`))
    if (Number(left.rows[0]!.n) !== 0) throw new Error(`the forwarder left ${left.rows[0]!.n} messages`)
    const written = target === "kafka" ? total(await endOffsets(brokers.kafka, name)) : o.warmup + o.messages
    if (written < o.warmup + o.messages) throw new Error(`${written} records in ${name}, expected more`)
    return { ...time, duplicates: written - o.warmup - o.messages }
  } finally {
    await runtime.dispose()
    await db.drop()
  }
}

/**
 * What one send per claimed batch would give: the library's transports without the worker — a session claims up to
 * `batchSize` messages from the outbox (the acks of the last batch sent riding on the claim) while the previous batch
 * is sent to the target in one `Transport.send` (one produce request; a key's messages in claim order), until the
 * outbox is empty. No handlers, no retries: the bound a batch forwarder could reach.
 */
export const forwardBatched = async (
  adminUrl: string,
  brokers: Brokers,
  target: Target,
  batchSize: number,
  o: Sizes
): Promise<ForwardRound & { readonly perSend: number }> => {
  const db = await freshDatabase(adminUrl, `kafka_batched_${target}`)
  const name = unique(`batched-${target}`)
  const runtime = ManagedRuntime.make(stackOf(db.url, target, brokers, name, []))
  let sends = 0
  try {
    const drain = Effect.scoped(Effect.gen(function*() {
      const transport = yield* Transport
      const session = yield* transport.open([queue])
      let acks: ReadonlyArray<string> = []
      // The send of the previous batch: the next claim runs while it is in flight (as the worker's prefetch).
      let sending: { readonly fiber: Fiber.RuntimeFiber<void, unknown>; readonly ids: Array<string> } | undefined
      for (;;) {
        const { messages } = yield* session.claim(queue, batchSize, acks)
        acks = []
        if (sending !== undefined) {
          yield* Fiber.join(sending.fiber)
          acks = sending.ids
          sending = undefined
        }
        // Nothing claimed: the outbox is empty, or its free keys all wait for the acks just collected.
        if (messages.length === 0) {
          if (acks.length === 0) break
          continue
        }
        const outgoing = messages.map((m) => {
          const headers = Either.getOrThrow(Headers.decode(m.headers))
          return resend(m, Forwarder.forwardedHeaders(headers))
        })
        sends++
        sending = { fiber: yield* Effect.fork(transport.send(target, outgoing)), ids: messages.map((m) => m.id) }
      }
    }))
    await runtime.runPromise(quiet(Effect.flatMap(TransportAdmin, (t) => t.setup)))
    if (o.warmup > 0) {
      await runtime.runPromise(quiet(seedKeyed(1, o.warmup, o.keys)))
      await runtime.runPromise(quiet(drain))
    }
    await runtime.runPromise(quiet(seedKeyed(o.warmup + 1, o.warmup + o.messages, o.keys)))
    await settle(db.url)
    sends = 0
    const time = await timed(o.messages, () => runtime.runPromise(quiet(drain)))
    const perSend = o.messages / sends
    const left = await withClient(db.url, (c) => c.query<{ n: string }>(`SELECT count(*) AS n FROM "${table}"`))
    if (Number(left.rows[0]!.n) !== 0) throw new Error(`the batched forward left ${left.rows[0]!.n} messages`)
    const written = target === "kafka" ? total(await endOffsets(brokers.kafka, name)) : o.warmup + o.messages
    return { ...time, perSend, duplicates: written - o.warmup - o.messages }
  } finally {
    await runtime.dispose()
    await db.drop()
  }
}

/**
 * A raw outbox relay: the transport's claim function (`claimSql` of bench/raw.ts, acks riding on the next claim) on
 * one `pg` connection, each claimed batch sent by a plain producer (the raw limit's settings) in one `send`, the next
 * claim running while it is in flight. No library: what the outbox's own PostgreSQL work leaves of the raw limit.
 */
export const relayRaw = async (
  adminUrl: string,
  bootstrap: string,
  batchSize: number,
  o: Sizes
): Promise<ForwardRound> => {
  const db = await freshDatabase(adminUrl, "kafka_relay")
  const topic = unique("relay")
  await createTopic(bootstrap, topic)
  const seeding = ManagedRuntime.make(
    Outbox.layer().pipe(
      Layer.provideMerge(PgTransport.layer({ table, autoSetup: true })),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 2 }))
    )
  )
  const producer = new Producer({
    clientId: "bench-relay",
    bootstrapBrokers: [bootstrap],
    idempotent: true,
    acks: ProduceAcks.ALL,
    partitioner: compatibilityPartitioner,
    autocreateTopics: false
  })
  const client = new pg.Client({ connectionString: db.url })
  client.on("error", () => {})
  try {
    await seeding.runPromise(quiet(Effect.void))
    await client.connect()
    const relay = async () => {
      let acks: Array<string> = []
      let sending: { readonly done: Promise<unknown>; readonly ids: Array<string> } | undefined
      for (;;) {
        const { rows } = await client.query<RelayRow>(claimSql, [queue, 30_000, batchSize, acks, true, null])
        acks = []
        if (sending !== undefined) {
          await sending.done
          acks = sending.ids
          sending = undefined
        }
        const claimed = rows.filter((r) => r.id !== null)
        if (claimed.length === 0) {
          if (acks.length === 0) break
          continue
        }
        const records = claimed.map((r) => ({
          topic,
          value: Buffer.from(r.body),
          ...(r.ordering_key !== null ? { key: Buffer.from(r.ordering_key) } : {}),
          headers: new Map([
            [Buffer.from("id"), Buffer.from(r.message_id)],
            [Buffer.from("type"), Buffer.from((JSON.parse(r.headers) as { type: string }).type)],
            [Buffer.from("x-outbox-headers"), Buffer.from(r.headers)]
          ])
        }))
        sending = { done: producer.send({ messages: records }), ids: claimed.map((r) => r.id!) }
      }
    }
    if (o.warmup > 0) {
      await seeding.runPromise(quiet(seedKeyed(1, o.warmup, o.keys)))
      await relay()
    }
    await seeding.runPromise(quiet(seedKeyed(o.warmup + 1, o.warmup + o.messages, o.keys)))
    await settle(db.url)
    const time = await timed(o.messages, relay)
    const written = total(await endOffsets(bootstrap, topic))
    const left = await client.query<{ n: string }>(`SELECT count(*) AS n FROM "${table}"`)
    if (Number(left.rows[0]!.n) !== 0) throw new Error(`the raw relay left ${left.rows[0]!.n} messages`)
    return { ...time, duplicates: written - o.warmup - o.messages }
  } finally {
    await client.end().catch(() => undefined)
    await producer.close()
    await seeding.dispose()
    await db.drop()
  }
}

interface RelayRow {
  readonly id: string | null
  readonly message_id: string
  readonly body: string
  readonly headers: string
  readonly ordering_key: string | null
}

/** The raw limit: a plain producer sends the records in batches of `batch`, `inFlight` sends at once. */
export const forwardRaw = async (
  bootstrap: string,
  settings: RawSettings,
  o: Sizes
): Promise<ForwardRound> => {
  const topic = unique("raw")
  await createTopic(bootstrap, topic)
  const producer = new Producer({
    clientId: "bench-raw",
    bootstrapBrokers: [bootstrap],
    idempotent: true,
    acks: ProduceAcks.ALL,
    partitioner: compatibilityPartitioner,
    autocreateTopics: false
  })
  try {
    const sendAll = async (from: number, to: number) => {
      let next = from
      const lane = async () => {
        while (next <= to) {
          const lo = next
          next = Math.min(to + 1, lo + settings.batch)
          await producer.send({ messages: recordsOf(topic, lo, next - 1, o.keys) })
        }
      }
      await Promise.all(Array.from({ length: settings.inFlight }, lane))
    }
    if (o.warmup > 0) await sendAll(1, o.warmup)
    const time = await timed(o.messages, () => sendAll(o.warmup + 1, o.warmup + o.messages))
    const written = total(await endOffsets(bootstrap, topic))
    return { ...time, duplicates: written - o.warmup - o.messages }
  } finally {
    await producer.close()
  }
}

// ---------------------------------------------------------------------------------------------------
// Consume

/** Writes `messages` records (the forwarder's shape) into a new topic; its end offsets. */
export const fillTopic = async (bootstrap: string, topic: string, messages: number, keys: number) => {
  await createTopic(bootstrap, topic)
  const producer = new Producer({
    clientId: "bench-fill",
    bootstrapBrokers: [bootstrap],
    idempotent: true,
    acks: ProduceAcks.ALL,
    partitioner: compatibilityPartitioner,
    autocreateTopics: false
  })
  try {
    for (let lo = 1; lo <= messages; lo += 2_000) {
      await producer.send({ messages: recordsOf(topic, lo, Math.min(messages, lo + 1_999), keys) })
    }
  } finally {
    await producer.close()
  }
  return endOffsets(bootstrap, topic)
}

/** Our worker consuming `topic` from its start: from the first handler start until every offset is committed. */
export const consumeOurs = async (
  adminUrl: string,
  bootstrap: string,
  topic: string,
  ends: ReadonlyArray<bigint>,
  idempotent: boolean,
  settings: WorkerSettings
): Promise<number> => {
  const db = await freshDatabase(adminUrl, "kafka_consume")
  const prefix = unique("consume")
  let first: number | undefined
  let handled = 0
  const handler = Handlers.handler(BenchNoop, () =>
    Effect.sync(() => {
      first ??= performance.now()
      handled++
    }), { fromTransport: "kafka", idempotent })
  const layer = Layer.mergeAll(
    Handlers.layer([handler]).pipe(
      Layer.provide(PgIdempotencyStore.layer({ table: "bench_idempotency", autoSetup: true }))
    ),
    ScheduleRetryStrategy.layerDefault
  ).pipe(
    Layer.provideMerge(
      TransportRouter.layer(
        PgTransport.make({ table, autoSetup: true }),
        KafkaTransport.make({ brokers: bootstrap, groupId: prefix, transports: { kafka: { topic } } })
      )
    ),
    Layer.provideMerge(
      PgClient.layer({ url: Redacted.make(db.url), maxConnections: Math.min(40, settings.concurrency + 4) })
    )
  )
  const runtime = ManagedRuntime.make(layer)
  try {
    await runtime.runPromise(Effect.void)
    const worker = runtime.runFork(
      quiet(Worker.run({ transports: ["kafka"], batchSize: settings.batchSize, concurrency: settings.concurrency }))
    )
    const done = await withDeadline(committedAt(bootstrap, `${prefix}.kafka`, topic, ends), 300_000, "consume")
    await runtime.runPromise(Fiber.interrupt(worker))
    const expected = total(ends)
    if (handled < expected) throw new Error(`the consumer handled ${handled} of ${expected}`)
    return expected / ((done - first!) / 1000)
  } finally {
    await runtime.dispose()
    await db.drop()
  }
}

/** The raw limit: a plain consumer reading `topic` from its start, committing what it read as fast as it can. */
export const consumeRaw = async (bootstrap: string, topic: string, ends: ReadonlyArray<bigint>): Promise<number> => {
  const group = unique("raw-consume")
  const consumer = new Consumer<Buffer, Buffer, Buffer, Buffer>({
    clientId: "bench-raw-consumer",
    groupId: group,
    bootstrapBrokers: [bootstrap],
    autocommit: false
  })
  const expected = total(ends)
  let first: number | undefined
  let read = 0
  const next = new Map<number, bigint>()
  let dirty = false
  let wake: (() => void) | undefined
  try {
    const stream = await consumer.consume({ topics: [topic], mode: "earliest", autocommit: false, maxWaitTime: 500 })
    stream.on("data", (record) => {
      first ??= performance.now()
      read++
      next.set(record.partition, record.offset + 1n)
      dirty = true
      wake?.()
    })
    // One commit in flight at a time, of everything read so far: the broker takes commits as fast as it can.
    const committer = (async () => {
      for (;;) {
        if (!dirty) {
          if (read >= expected) return
          await new Promise<void>((resolve) => (wake = resolve))
          continue
        }
        dirty = false
        const offsets = [...next].map(([partition, offset]) => ({ topic, partition, offset, leaderEpoch: -1 }))
        await consumer.commit({ offsets })
      }
    })()
    await withDeadline(committer, 300_000, "the raw consumer")
    const done = performance.now()
    await stream.close()
    return expected / ((done - first!) / 1000)
  } finally {
    await consumer.close()
  }
}

// ---------------------------------------------------------------------------------------------------
// Latency

/**
 * A forwarder (outbox → target) and a consumer of the target running in one process, while messages are committed
 * one at a time at `rate` per second; commit returning → the consumer's handler start, ms (after the warm-up).
 */
export const latency = async (
  adminUrl: string,
  brokers: Brokers,
  target: Target,
  o: Pick<KafkaOptions, "latencyRate" | "latencySeconds" | "latencyWarmupSeconds"> & { readonly keys: number }
): Promise<{ readonly handled: ReadonlyArray<number>; readonly forwarded: ReadonlyArray<number> }> => {
  const db = await freshDatabase(adminUrl, `kafka_latency_${target}`)
  const name = unique(`lat-${target}`)
  const committed = new Map<number, number>()
  const samples: Array<number> = []
  const forwarded: Array<number> = []
  const warmup = Math.round(o.latencyRate * o.latencyWarmupSeconds)
  const count = warmup + Math.round(o.latencyRate * o.latencySeconds)
  let handled = 0
  let allHandled: (() => void) | undefined
  const consumer = Handlers.handler(BenchNoop, (m) =>
    Effect.sync(() => {
      const t = performance.now()
      const c = committed.get(m.n)
      if (c !== undefined && m.n > warmup) samples.push(t - c)
      if (++handled >= count) allHandled?.()
    }), { fromTransport: target, idempotent: true })
  // `Forwarder.handler`'s own body (`Forwarder.forward`), timed when the broker acknowledged the record.
  const forwarder = Handlers.handler(
    BenchNoop,
    (m, envelope) =>
      Effect.tap(Forwarder.forward(envelope, { to: target }), () =>
        Effect.sync(() => {
          const c = committed.get(m.n)
          if (c !== undefined && m.n > warmup) forwarded.push(performance.now() - c)
        })),
    { fromTransport: queue, name: `forward:BenchNoop->${target}` }
  )
  const runtime = ManagedRuntime.make(stackOf(db.url, target, brokers, name, [forwarder, consumer]))
  try {
    await runtime.runPromise(quiet(Effect.flatMap(TransportAdmin, (t) => t.setup)))
    const workers = runtime.runFork(quiet(Effect.all([
      Worker.run({ transports: [queue], batchSize: 50, concurrency: 50 }),
      Worker.run({ transports: [target], batchSize: 50, concurrency: 50 })
    ], { concurrency: "unbounded" })))
    const finished = new Promise<void>((resolve) => (allHandled = resolve))
    await sleep(1_000)
    const send = (n: number) =>
      Effect.flatMap(
        SqlClient.SqlClient,
        (sql) => sql.withTransaction(Outbox.dispatch(new BenchNoop({ n }), { orderingKey: keyOf(n, o.keys) }))
      )
    const t0 = performance.now()
    for (let n = 1; n <= count; n++) {
      const due = t0 + (n - 1) * (1000 / o.latencyRate)
      const wait = due - performance.now()
      if (wait > 0) await sleep(wait)
      await runtime.runPromise(send(n))
      committed.set(n, performance.now())
    }
    await withDeadline(finished, 60_000, `latency ${target}: every message handled`)
    await runtime.runPromise(Fiber.interrupt(workers))
    return { handled: samples, forwarded }
  } finally {
    await runtime.dispose()
    await db.drop()
  }
}

// ---------------------------------------------------------------------------------------------------
// Run

const label = (s: WorkerSettings) =>
  `${s.perMessage === true ? "per-message handler, " : ""}batch ${s.batchSize}, concurrency ${s.concurrency}`
const rawLabel = (s: RawSettings) => `${s.batch} records a send, ${s.inFlight} in flight`

const figure = (rounds: ReadonlyArray<ForwardRound>): Figure => ({
  rates: summarize(rounds.map((r) => r.perSecond)),
  cpuUs: summarize(rounds.map((r) => r.cpuUs)).median
})

const bestBy = <A extends Figure>(figures: ReadonlyArray<A>): A =>
  figures.reduce((a, b) => (b.rates.median > a.rates.median ? b : a))

/** The forward runs over `keys` keys: every contender once per round, the order reversed every other round. */
const runForward = async (
  pgAdminUrl: string,
  brokers: Brokers,
  keys: number,
  o: KafkaOptions,
  log: (line: string) => void,
  counted: (duplicates: number) => void
): Promise<ForwardResult> => {
  const sizes = { messages: o.messages, keys, warmup: o.warmup }
  const grid = o.grid.map(() => [] as Array<ForwardRound>)
  const raw = o.rawSettings.map(() => [] as Array<ForwardRound>)
  const batched: Array<ForwardRound> = []
  const relay: Array<ForwardRound> = []
  const keyed = keys > 0 ? `${keys} keys` : "no keys"
  const show = (at: string, what: string, r: ForwardRound) => {
    counted(r.duplicates)
    log(`${at}  forward, ${keyed}: ${what}: ${rate(r.perSecond)} msg/s, ${r.cpuUs.toFixed(0)} µs CPU a message`)
  }
  for (let round = 0; round < o.rounds; round++) {
    const at = `kafka round ${round + 1}/${o.rounds}`
    const steps: Array<() => Promise<void>> = [
      async () => {
        for (const [i, settings] of o.rawSettings.entries()) {
          const r = await forwardRaw(brokers.kafka, settings, sizes)
          raw[i]!.push(r)
          show(at, `raw producer (${rawLabel(settings)})`, r)
        }
      },
      async () => {
        const r = await relayRaw(pgAdminUrl, brokers.kafka, o.claimBatch, sizes)
        relay.push(r)
        show(at, `raw relay (claim ${o.claimBatch})`, r)
      },
      async () => {
        const r = await forwardBatched(pgAdminUrl, brokers, "kafka", o.claimBatch, sizes)
        batched.push(r)
        show(at, `one send per claim (${o.claimBatch})`, r)
      },
      async () => {
        for (const [i, settings] of o.grid.entries()) {
          const r = await forwardOurs(pgAdminUrl, brokers, "kafka", settings, sizes)
          grid[i]!.push(r)
          show(at, `ours → Kafka (${label(settings)})`, r)
        }
      }
    ]
    // Alternate the order, so that drift of the machine does not always hit the same contender.
    for (const step of round % 2 === 0 ? steps : [...steps].reverse()) await step()
  }
  const gridFigures = o.grid.map((settings, i) => ({ settings, ...figure(grid[i]!) }))
  const best = bestBy(gridFigures.filter((g) => g.settings.perMessage !== true)).settings
  const amqp: Array<ForwardRound> = []
  for (let round = 0; round < o.rounds; round++) {
    const r = await forwardOurs(pgAdminUrl, brokers, "amqp", best, sizes)
    amqp.push(r)
    show(`kafka round ${round + 1}/${o.rounds}`, `ours → RabbitMQ (${label(best)})`, r)
  }
  const rawFigures = o.rawSettings.map((settings, i) => ({ settings, ...figure(raw[i]!) }))
  return {
    keys,
    grid: gridFigures,
    best,
    batched: figure(batched),
    relay: figure(relay),
    raw: rawFigures,
    rawBest: bestBy(rawFigures).settings,
    amqp: figure(amqp)
  }
}

/** Runs the scenario on the run's PostgreSQL (`pgAdminUrl`), a Kafka broker and a RabbitMQ broker it starts. */
export const run = async (pgAdminUrl: string, o: KafkaOptions, log: (line: string) => void): Promise<KafkaResult> => {
  log("kafka: starting Apache Kafka (or KAFKA_BOOTSTRAP) and RabbitMQ (or AMQP_URL)")
  const [kafka, rabbit] = await Promise.all([ensureKafka(), ensureBroker()])
  const brokers: Brokers = { kafka: kafka.bootstrap, amqp: rabbit.url }
  try {
    log(`kafka: warming the broker up (${count(o.brokerWarmup)} records)`)
    await fillTopic(brokers.kafka, unique("warmup"), o.brokerWarmup, 200)
    let duplicates = 0
    const forward: Array<ForwardResult> = []
    for (const keys of o.keys) {
      forward.push(await runForward(pgAdminUrl, brokers, keys, o, log, (d) => (duplicates += d)))
    }
    const keys = o.keys[0]!
    const consume = { idempotent: [] as Array<number>, plain: [] as Array<number>, raw: [] as Array<number> }
    for (let round = 0; round < o.rounds; round++) {
      const at = `kafka round ${round + 1}/${o.rounds}`
      const topic = unique("consume")
      const ends = await fillTopic(brokers.kafka, topic, o.messages, keys)
      // The raw consumer reads its share in tens of milliseconds: it reads more records, so its figure is not noise.
      const rawTopic = unique("consume-raw")
      const rawEnds = await fillTopic(brokers.kafka, rawTopic, o.messages * rawConsumeFactor, keys)
      const order = ["raw", "idempotent", "plain"] as const
      for (const who of round % 2 === 0 ? order : [...order].reverse()) {
        const perSecond = who === "raw"
          ? await consumeRaw(brokers.kafka, rawTopic, rawEnds)
          : await consumeOurs(pgAdminUrl, brokers.kafka, topic, ends, who === "idempotent", o.consume)
        consume[who].push(perSecond)
        log(`${at}  consume ${who}: ${rate(perSecond)} msg/s`)
      }
    }
    log(`kafka: latency at ${o.latencyRate} msg/s for ${o.latencySeconds} s, through Kafka then RabbitMQ`)
    const sizes = { ...o, keys }
    const viaKafka = await latency(pgAdminUrl, brokers, "kafka", sizes)
    const viaAmqp = await latency(pgAdminUrl, brokers, "amqp", sizes)
    return {
      version: kafkaVersion,
      messages: o.messages,
      warmup: o.warmup,
      rounds: o.rounds,
      claimBatch: o.claimBatch,
      forward,
      consume: {
        keys,
        settings: o.consume,
        idempotent: summarize(consume.idempotent),
        plain: summarize(consume.plain),
        raw: summarize(consume.raw)
      },
      latency: [
        { label: "Kafka: commit → the consumer's handler", ms: percentiles(viaKafka.handled) },
        { label: "Kafka: commit → forwarded (broker ack)", ms: percentiles(viaKafka.forwarded) },
        { label: "RabbitMQ: commit → the consumer's handler", ms: percentiles(viaAmqp.handled) },
        { label: "RabbitMQ: commit → forwarded (broker confirm)", ms: percentiles(viaAmqp.forwarded) }
      ],
      latencyRate: o.latencyRate,
      latencySeconds: o.latencySeconds,
      latencyKeys: keys,
      duplicates
    }
  } finally {
    await Promise.all([kafka.stop(), rabbit.stop?.()])
  }
}

// ---------------------------------------------------------------------------------------------------
// Report

const ms = (value: number) => (Number.isFinite(value) ? value.toFixed(1) : "–")
const count = (n: number) => n.toLocaleString("en-US")

const rawOf = (f: ForwardResult) =>
  f.raw.find((x) => x.settings.batch === f.rawBest.batch && x.settings.inFlight === f.rawBest.inFlight)!
const bestOf = (f: ForwardResult) => f.grid.find((x) => x.settings === f.best)!

/** The rows of the Targets table: the headline key count's forward rate against the raw producer. */
export const targets = (r: KafkaResult) => {
  const f = r.forward[0]!
  const value = bestOf(f).rates.median / rawOf(f).rates.median
  return [{
    name: `Kafka: forward rate ÷ raw producer (${keysText(f.keys)})`,
    value: ratio(value),
    goal: "≥ 0.80×",
    met: Number.isFinite(value) ? value >= 0.8 : undefined
  }]
}

const keysText = (keys: number) => (keys > 0 ? `${count(keys)} keys` : "no keys")

const forwardTable = (f: ForwardResult, claimBatch: number): string => {
  const raw = rawOf(f).rates.median
  const relay = f.relay.rates.median
  const row = (name: string, x: Figure) => [
    name,
    rate(x.rates.median),
    `${rate(x.rates.min)} – ${rate(x.rates.max)}`,
    ratio(x.rates.median / raw),
    ratio(x.rates.median / relay),
    x.cpuUs.toFixed(0)
  ]
  return markdownTable(
    ["contender", "msg/s (median)", "min – max", "÷ raw producer", "÷ raw relay", "CPU µs/msg"],
    [
      row(`effect-outbox → Kafka, \`Forwarder.handlers\` (${label(f.best)})`, bestOf(f)),
      row(`effect-outbox transports, one send per claim of ${claimBatch} (no worker)`, f.batched),
      row(`raw relay: claim function (${claimBatch}) + raw producer`, f.relay),
      row(`raw producer (${rawLabel(f.rawBest)})`, rawOf(f)),
      row(`effect-outbox → RabbitMQ, \`Forwarder.handlers\` (${label(f.best)})`, f.amqp)
    ],
    ["l", "r", "r", "r", "r", "r"]
  ) +
    `\n\nSettings tried (${keysText(f.keys)}; medians):\n\n` +
    markdownTable(
      ["contender", "msg/s", "÷ raw producer", "CPU µs/msg"],
      [
        ...f.grid.map((g) => [
          `forwarder, ${label(g.settings)}`,
          rate(g.rates.median),
          ratio(g.rates.median / raw),
          g.cpuUs.toFixed(0)
        ]),
        ...f.raw.map((g) => [
          `raw producer, ${rawLabel(g.settings)}`,
          rate(g.rates.median),
          ratio(g.rates.median / raw),
          g.cpuUs.toFixed(0)
        ])
      ],
      ["l", "r", "r", "r"]
    )
}

/** The Markdown section of BENCHMARKS.md's results. */
export const section = (r: KafkaResult): string => {
  const plural = r.rounds > 1 ? "s" : ""
  const consumeRow = (name: string, s: Summary) => [
    name,
    rate(s.median),
    `${rate(s.min)} – ${rate(s.max)}`,
    ratio(s.median / r.consume.raw.median)
  ]
  return `### Kafka\n\nApache Kafka ${r.version} (one KRaft node on the same machine, started by the benchmark), ` +
    `the run's PostgreSQL for the outbox, RabbitMQ (Debian's) for the AMQP forwarder. ` +
    `Forward: ${count(r.messages)} messages committed in the outbox, then drained into a topic of ${partitions} ` +
    `partitions — from the start until the outbox is empty, every record acknowledged by the broker (idempotent ` +
    `producer, \`acks=all\`). Contenders: one worker with \`Forwarder.handlers\` (the best of the settings tried); ` +
    `the library's transports without the worker, one \`Transport.send\` per claimed batch, the next claim running ` +
    `while it is in flight (what a batch forwarder could reach); a raw relay — the transport's claim function on one ` +
    `\`pg\` connection, each batch sent by a plain producer, pipelined the same way; the raw producer — a plain ` +
    `\`@platformatic/kafka\` \`Producer\` with the same settings (idempotent, \`acks=all\`, Java's partitioner) ` +
    `sending records of the same key, value and headers from memory, in batches (its best setting is the base); ` +
    `and the forwarder into RabbitMQ. ${r.rounds} round${plural}, each on a fresh database and topic, each contender ` +
    `first forwarding ${count(r.warmup)} unmeasured messages in its process; ` +
    `CPU: this process's, per message, while timed.\n\n` +
    r.forward.map((f) => `Over ${keysText(f.keys)}:\n\n${forwardTable(f, r.claimBatch)}`).join("\n\n") +
    `\n\nConsume: ${count(r.messages)} records (over ${keysText(r.consume.keys)}) read from a topic's start by a ` +
    `fresh consumer group (the raw consumer: ${rawConsumeFactor} times as many), from the first record handled ` +
    `until the group's committed offsets reach the topic's end; ` +
    `our worker (\`fromTransport: "kafka"\`, ${label(r.consume.settings)}) with an idempotent handler ` +
    `(\`PgIdempotencyStore\`: a PostgreSQL transaction per message) and with a plain one, against a plain ` +
    `\`Consumer\` committing what it read, one commit in flight at a time.\n\n` +
    markdownTable(
      ["consumer", "msg/s (median)", "min – max", "÷ raw"],
      [
        consumeRow("effect-outbox, idempotent handler", r.consume.idempotent),
        consumeRow("effect-outbox, plain handler", r.consume.plain),
        consumeRow("raw consumer", r.consume.raw)
      ],
      ["l", "r", "r", "r"]
    ) +
    `\n\nLatency: a forwarder (batch 50, concurrency 50) and a consumer (the same, idempotent handler) running in ` +
    `one process while messages (over ${keysText(r.latencyKeys)}) are committed one at a time at ${r.latencyRate} ` +
    `a second for ${r.latencySeconds} s (after a warm-up); from COMMIT returning to the consumer's handler start, ` +
    `and to the forward's broker acknowledgement, ms.\n\n` +
    markdownTable(
      ["path", "n", "p50", "p95", "p99", "max"],
      r.latency.map((l) => [l.label, String(l.ms.count), ms(l.ms.p50), ms(l.ms.p95), ms(l.ms.p99), ms(l.ms.max)]),
      ["l", "r", "r", "r", "r", "r"]
    ) +
    (r.duplicates > 0 ? `\n\nDuplicates in the forward topics: ${count(r.duplicates)}.` : "")
}
