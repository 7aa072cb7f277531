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
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Redacted from "effect/Redacted"
import { v7 as uuidv7 } from "uuid"
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
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { ensureKafka, kafkaVersion } from "../test/support/kafka.js"
import { ensureBroker } from "../test/support/rabbitmq.js"
import { freshDatabase, settle, withClient } from "./cluster.js"
import { BenchNoop, keyOf, queue, sleep, table, withDeadline } from "./common.js"
import { type Percentiles, percentiles } from "./latency.js"
import { rate, ratio, summarize, type Summary, table as markdownTable } from "./stats.js"

export interface KafkaOptions {
  /** Forward and consume: messages per round. */
  readonly messages: number
  /** Ordering keys the messages are spread over (message n on key `k${n % keys}`). */
  readonly keys: number
  readonly rounds: number
  /** Unmeasured messages each contender handles first in its process (JIT, connections). */
  readonly warmup: number
  /** Forwarder settings tried (batchSize × concurrency); the best is compared with the raw limit. */
  readonly grid: ReadonlyArray<WorkerSettings>
  /** Raw producer: records per `send`, and sends in flight at once (each its own lane). */
  readonly rawSettings: ReadonlyArray<RawSettings>
  /** Consumers' worker settings. */
  readonly consume: WorkerSettings
  /** Latency: messages per second, seconds measured (after a warm-up of `latencyWarmupSeconds`). */
  readonly latencyRate: number
  readonly latencySeconds: number
  readonly latencyWarmupSeconds: number
}

export interface WorkerSettings {
  readonly batchSize: number
  readonly concurrency: number
}

export interface RawSettings {
  readonly batch: number
  readonly inFlight: number
}

export interface KafkaResult {
  readonly version: string
  readonly messages: number
  readonly keys: number
  readonly rounds: number
  /** Forwarder into Kafka per setting, messages/s over rounds. */
  readonly grid: ReadonlyArray<{ readonly settings: WorkerSettings; readonly rates: Summary }>
  readonly best: WorkerSettings
  readonly raw: ReadonlyArray<{ readonly settings: RawSettings; readonly rates: Summary }>
  readonly rawBest: RawSettings
  readonly amqp: Summary
  readonly consume: {
    readonly settings: WorkerSettings
    readonly idempotent: Summary
    readonly plain: Summary
    readonly raw: Summary
  }
  readonly latency: ReadonlyArray<{ readonly label: string; readonly ms: Percentiles }>
  readonly latencyRate: number
  readonly latencySeconds: number
  /** Records found in the forward topics beyond those forwarded (redelivered duplicates), over all rounds. */
  readonly duplicates: number
}

const quiet = <A, E, R>(self: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(self, LogLevel.Error)

let names = 0
const unique = (prefix: string) => `bench-${prefix}-${process.pid}-${++names}`

const partitions = 3

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
      key: Buffer.from(keyOf(n, keys)),
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

type Target = "kafka" | "amqp"

interface Brokers {
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
      for (let n = lo; n <= Math.min(to, lo + 999); n++) batch.push(new KeyedBenchNoop(n, keyOf(n, keys)))
      yield* sql.withTransaction(outbox.dispatchAll(batch))
    }
  })

// ---------------------------------------------------------------------------------------------------
// Forward

interface ForwardRound {
  readonly perSecond: number
  /** Records in the target beyond those forwarded (Kafka only). */
  readonly duplicates: number
}

/**
 * One forwarder round on a fresh database and topic: `warmup` messages forwarded first (not timed), then `messages`
 * committed, the tables settled, and the worker timed from its start until the outbox is empty.
 */
const forwardOurs = async (
  adminUrl: string,
  brokers: Brokers,
  target: Target,
  settings: WorkerSettings,
  o: Pick<KafkaOptions, "messages" | "keys" | "warmup">
): Promise<ForwardRound> => {
  const db = await freshDatabase(adminUrl, `kafka_fwd_${target}`)
  const name = unique(`fwd-${target}`)
  const runtime = ManagedRuntime.make(
    stackOf(db.url, target, brokers, name, Forwarder.handlers([BenchNoop], { to: target }))
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
    const t0 = performance.now()
    await runtime.runPromise(quiet(drain))
    const seconds = (performance.now() - t0) / 1000
    const left = await withClient(db.url, (c) => c.query<{ n: string }>(`SELECT count(*) AS n FROM "${table}"`))
    if (Number(left.rows[0]!.n) !== 0) throw new Error(`the forwarder left ${left.rows[0]!.n} messages`)
    const written = target === "kafka" ? total(await endOffsets(brokers.kafka, name)) : o.warmup + o.messages
    if (written < o.warmup + o.messages) throw new Error(`${written} records in ${name}, expected more`)
    return { perSecond: o.messages / seconds, duplicates: written - o.warmup - o.messages }
  } finally {
    await runtime.dispose()
    await db.drop()
  }
}

/** The raw limit: a plain producer sends the records in batches of `batch`, `inFlight` sends at once. */
const forwardRaw = async (
  bootstrap: string,
  settings: RawSettings,
  o: Pick<KafkaOptions, "messages" | "keys" | "warmup">
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
    const t0 = performance.now()
    await sendAll(o.warmup + 1, o.warmup + o.messages)
    const seconds = (performance.now() - t0) / 1000
    const written = total(await endOffsets(bootstrap, topic))
    return { perSecond: o.messages / seconds, duplicates: written - o.warmup - o.messages }
  } finally {
    await producer.close()
  }
}

// ---------------------------------------------------------------------------------------------------
// Consume

/** Writes `messages` records (the forwarder's shape) into a new topic; its end offsets. */
const fillTopic = async (bootstrap: string, topic: string, messages: number, keys: number) => {
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
const consumeOurs = async (
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
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(db.url), maxConnections: settings.concurrency + 4 }))
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
const consumeRaw = async (bootstrap: string, topic: string, ends: ReadonlyArray<bigint>): Promise<number> => {
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
const latency = async (
  adminUrl: string,
  brokers: Brokers,
  target: Target,
  o: Pick<KafkaOptions, "keys" | "latencyRate" | "latencySeconds" | "latencyWarmupSeconds">
): Promise<ReadonlyArray<number>> => {
  const db = await freshDatabase(adminUrl, `kafka_latency_${target}`)
  const name = unique(`lat-${target}`)
  const committed = new Map<number, number>()
  const samples: Array<number> = []
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
  const runtime = ManagedRuntime.make(
    stackOf(db.url, target, brokers, name, [...Forwarder.handlers([BenchNoop], { to: target }), consumer])
  )
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
    return samples
  } finally {
    await runtime.dispose()
    await db.drop()
  }
}

// ---------------------------------------------------------------------------------------------------
// Run

const label = (s: WorkerSettings) => `batch ${s.batchSize}, concurrency ${s.concurrency}`
const rawLabel = (s: RawSettings) => `${s.batch} records a send, ${s.inFlight} in flight`

/** Runs the scenario on the run's PostgreSQL (`pgAdminUrl`), a Kafka broker and a RabbitMQ broker it starts. */
export const run = async (pgAdminUrl: string, o: KafkaOptions, log: (line: string) => void): Promise<KafkaResult> => {
  log("kafka: starting Apache Kafka (or KAFKA_BOOTSTRAP) and RabbitMQ (or AMQP_URL)")
  const [kafka, rabbit] = await Promise.all([ensureKafka(), ensureBroker()])
  const brokers: Brokers = { kafka: kafka.bootstrap, amqp: rabbit.url }
  try {
    const sizes = { messages: o.messages, keys: o.keys, warmup: o.warmup }
    const grid = o.grid.map(() => [] as Array<number>)
    const raw = o.rawSettings.map(() => [] as Array<number>)
    const amqp: Array<number> = []
    const consume = { idempotent: [] as Array<number>, plain: [] as Array<number>, raw: [] as Array<number> }
    let duplicates = 0
    for (let round = 0; round < o.rounds; round++) {
      const at = `kafka round ${round + 1}/${o.rounds}`
      // Alternate the order, so that drift of the machine does not always hit the same contender.
      const flip = round % 2 === 1
      const rawFirst = async () => {
        for (const [i, s] of o.rawSettings.entries()) {
          const r = await forwardRaw(brokers.kafka, s, sizes)
          raw[i]!.push(r.perSecond)
          duplicates += r.duplicates
          log(`${at}  forward raw (${rawLabel(s)}): ${rate(r.perSecond)} msg/s`)
        }
      }
      const oursAll = async () => {
        for (const [i, s] of (flip ? [...o.grid.entries()].reverse() : [...o.grid.entries()])) {
          const r = await forwardOurs(pgAdminUrl, brokers, "kafka", s, sizes)
          grid[i]!.push(r.perSecond)
          duplicates += r.duplicates
          log(`${at}  forward ours → Kafka (${label(s)}): ${rate(r.perSecond)} msg/s`)
        }
      }
      if (flip) {
        await oursAll()
        await rawFirst()
      } else {
        await rawFirst()
        await oursAll()
      }
    }
    const gridRates = o.grid.map((settings, i) => ({ settings, rates: summarize(grid[i]!) }))
    const best = gridRates.reduce((a, b) => (b.rates.median > a.rates.median ? b : a)).settings
    for (let round = 0; round < o.rounds; round++) {
      const at = `kafka round ${round + 1}/${o.rounds}`
      const r = await forwardOurs(pgAdminUrl, brokers, "amqp", best, sizes)
      amqp.push(r.perSecond)
      log(`${at}  forward ours → RabbitMQ (${label(best)}): ${rate(r.perSecond)} msg/s`)
    }
    for (let round = 0; round < o.rounds; round++) {
      const at = `kafka round ${round + 1}/${o.rounds}`
      const topic = unique("consume")
      const ends = await fillTopic(brokers.kafka, topic, o.messages, o.keys)
      const order = ["raw", "idempotent", "plain"] as const
      for (const who of round % 2 === 0 ? order : [...order].reverse()) {
        const perSecond = who === "raw"
          ? await consumeRaw(brokers.kafka, topic, ends)
          : await consumeOurs(pgAdminUrl, brokers.kafka, topic, ends, who === "idempotent", o.consume)
        consume[who].push(perSecond)
        log(`${at}  consume ${who}: ${rate(perSecond)} msg/s`)
      }
    }
    log(`kafka: latency at ${o.latencyRate} msg/s for ${o.latencySeconds} s, through Kafka then RabbitMQ`)
    const viaKafka = await latency(pgAdminUrl, brokers, "kafka", { ...o })
    const viaAmqp = await latency(pgAdminUrl, brokers, "amqp", { ...o })
    const rawRates = o.rawSettings.map((settings, i) => ({ settings, rates: summarize(raw[i]!) }))
    return {
      version: kafkaVersion,
      messages: o.messages,
      keys: o.keys,
      rounds: o.rounds,
      grid: gridRates,
      best,
      raw: rawRates,
      rawBest: rawRates.reduce((a, b) => (b.rates.median > a.rates.median ? b : a)).settings,
      amqp: summarize(amqp),
      consume: {
        settings: o.consume,
        idempotent: summarize(consume.idempotent),
        plain: summarize(consume.plain),
        raw: summarize(consume.raw)
      },
      latency: [
        { label: "outbox → Kafka → Kafka consumer", ms: percentiles(viaKafka) },
        { label: "outbox → RabbitMQ → AMQP consumer", ms: percentiles(viaAmqp) }
      ],
      latencyRate: o.latencyRate,
      latencySeconds: o.latencySeconds,
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

const rawOf = (r: KafkaResult) =>
  r.raw.find((x) => x.settings.batch === r.rawBest.batch && x.settings.inFlight === r.rawBest.inFlight)!.rates
const bestOf = (r: KafkaResult) =>
  r.grid.find((x) => x.settings.batchSize === r.best.batchSize && x.settings.concurrency === r.best.concurrency)!
    .rates

/** The rows of the Targets table. */
export const targets = (r: KafkaResult) => {
  const value = bestOf(r).median / rawOf(r).median
  return [{
    name: "Kafka: forward rate ÷ raw producer",
    value: ratio(value),
    goal: "≥ 0.80×",
    met: Number.isFinite(value) ? value >= 0.8 : undefined
  }]
}

/** The Markdown section of BENCHMARKS.md's results. */
export const section = (r: KafkaResult): string => {
  const raw = rawOf(r)
  const best = bestOf(r)
  const row = (name: string, s: Summary, base: number) => [
    name,
    rate(s.median),
    rate(s.min),
    rate(s.max),
    ratio(s.median / base)
  ]
  const plural = r.rounds > 1 ? "s" : ""
  return `### Kafka\n\nApache Kafka ${r.version} (one KRaft node on the same machine, started by the benchmark), ` +
    `the run's PostgreSQL for the outbox, RabbitMQ (Debian's) for the AMQP forwarder. ` +
    `Forward: ${count(r.messages)} messages over ${count(r.keys)} ordering keys committed in the outbox, then one ` +
    `worker with \`Forwarder.handlers\` drains them into a topic of ${partitions} partitions — from the worker's ` +
    `start until the outbox is empty, every record acknowledged by the broker (idempotent producer, \`acks=all\`). ` +
    `The raw limit is a plain \`@platformatic/kafka\` \`Producer\` with the same settings (idempotent, ` +
    `\`acks=all\`, Java's partitioner) sending records of the same key, value and headers from memory, in ` +
    `batches; its best setting is the ratios' base. ${r.rounds} round${plural}, each on a fresh database and topic, ` +
    `each contender first forwarding unmeasured messages in its process.\n\n` +
    markdownTable(
      ["contender", "msg/s (median)", "min", "max", "÷ raw"],
      [
        row(`effect-outbox → Kafka (${label(r.best)})`, best, raw.median),
        row(`raw producer (${rawLabel(r.rawBest)})`, raw, raw.median),
        row(`effect-outbox → RabbitMQ (${label(r.best)})`, r.amqp, raw.median)
      ],
      ["l", "r", "r", "r", "r"]
    ) +
    `\n\nForwarder settings (medians):\n\n` +
    markdownTable(
      ["worker", "msg/s", "÷ raw"],
      [
        ...r.grid.map((g) => [label(g.settings), rate(g.rates.median), ratio(g.rates.median / raw.median)]),
        ...r.raw.map((g) => [`raw: ${rawLabel(g.settings)}`, rate(g.rates.median), ratio(g.rates.median / raw.median)])
      ],
      ["l", "r", "r"]
    ) +
    `\n\nConsume: the same ${count(r.messages)} records read from a topic's start by a fresh consumer group, ` +
    `from the first record handled until the group's committed offsets reach the topic's end; our worker ` +
    `(\`fromTransport: "kafka"\`, ${label(r.consume.settings)}) with an idempotent handler ` +
    `(\`PgIdempotencyStore\`: a PostgreSQL transaction per message) and with a plain one, against a plain ` +
    `\`Consumer\` committing what it read, one commit in flight at a time.\n\n` +
    markdownTable(
      ["consumer", "msg/s (median)", "min", "max", "÷ raw"],
      [
        row("effect-outbox, idempotent handler", r.consume.idempotent, r.consume.raw.median),
        row("effect-outbox, plain handler", r.consume.plain, r.consume.raw.median),
        row("raw consumer", r.consume.raw, r.consume.raw.median)
      ],
      ["l", "r", "r", "r", "r"]
    ) +
    `\n\nLatency: a forwarder (batch 50, concurrency 50) and a consumer (the same, idempotent handler) running in ` +
    `one process while messages are committed one at a time at ${r.latencyRate} a second for ` +
    `${r.latencySeconds} s (after a warm-up); from COMMIT returning to the consumer's handler start, ms.\n\n` +
    markdownTable(
      ["path", "n", "p50", "p95", "p99", "max"],
      r.latency.map((l) => [l.label, String(l.ms.count), ms(l.ms.p50), ms(l.ms.p95), ms(l.ms.p99), ms(l.ms.max)]),
      ["l", "r", "r", "r", "r", "r"]
    ) +
    (r.duplicates > 0 ? `\n\nDuplicates in the forward topics: ${count(r.duplicates)}.` : "")
}
