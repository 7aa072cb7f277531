/**
 * The Kafka broker the tests start (support/kafka.ts) is a real one: topics are created by the admin client, an
 * idempotent producer's records (acks from all in-sync replicas) come back to a consumer group, the SASL/SCRAM
 * listener admits its user with both mechanisms and refuses a wrong password, and a broker killed with SIGKILL
 * starts again on its ports with its data.
 */
import { afterEach, describe, expect, inject, it } from "@effect/vitest"
import {
  Admin,
  AuthenticationError,
  Consumer,
  type Message,
  ProduceAcks,
  Producer,
  stringDeserializers,
  stringSerializers
} from "@platformatic/kafka"
import { startKafka } from "./support/kafka.js"

/** What a test opened, closed after it also when it failed half-way. */
const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup().catch(() => undefined)))
})

let names = 0
const uniqueName = (prefix: string) => `${prefix}-${process.pid}-${++names}-${Math.random().toString(36).slice(2, 7)}`

/** Client options that fail within seconds instead of retrying for long. */
const fast = { connectTimeout: 5_000, requestTimeout: 10_000, timeout: 10_000, retries: 2, retryDelay: 200 }

const admin = (bootstrap: string, extra: Partial<ConstructorParameters<typeof Admin>[0]> = {}) => {
  const client = new Admin({ clientId: uniqueName("admin"), bootstrapBrokers: [bootstrap], ...fast, ...extra })
  cleanups.push(() => client.close())
  return client
}

const producer = (bootstrap: string) => {
  const client = new Producer({
    clientId: uniqueName("producer"),
    bootstrapBrokers: [bootstrap],
    idempotent: true,
    acks: ProduceAcks.ALL,
    serializers: stringSerializers,
    ...fast
  })
  cleanups.push(() => client.close())
  return client
}

/** Reads `count` records of `topic` from the start, with a fresh consumer group. */
const consume = async (bootstrap: string, topic: string, count: number) => {
  const consumer = new Consumer({
    clientId: uniqueName("consumer"),
    groupId: uniqueName("group"),
    bootstrapBrokers: [bootstrap],
    deserializers: stringDeserializers,
    ...fast
  })
  cleanups.push(() =>
    new Promise<void>((resolve, reject) => consumer.close(true, (error) => error ? reject(error) : resolve()))
  )
  const stream = await consumer.consume({ topics: [topic], mode: "earliest", autocommit: false })
  const messages: Array<Message<string, string, string, string>> = []
  // Records that never come fail the test with what came instead of waiting for its timeout.
  const timer = setTimeout(() => void stream.close(), 60_000)
  try {
    for await (const message of stream) {
      messages.push(message)
      if (messages.length === count) break
    }
  } finally {
    clearTimeout(timer)
  }
  expect(messages.length, `records of ${topic} received`).toBe(count)
  return messages
}

/** Creates a topic, produces `count` keyed records to it and returns what a consumer reads back, in order per key. */
const roundTrip = async (bootstrap: string, topic: string, count: number) => {
  await admin(bootstrap).createTopics({ topics: [topic], partitions: 3, replicas: 1 })
  const sent = Array.from({ length: count }, (_, i) => ({ topic, key: `k${i % 5}`, value: `v${i}` }))
  await producer(bootstrap).send({ messages: sent })
  return consume(bootstrap, topic, count)
}

/** The SCRAM listener of the run's broker. */
const scramListener = () => {
  const scram = inject("kafkaScram")
  expect(scram, "KAFKA_BOOTSTRAP is set without KAFKA_SCRAM_BOOTSTRAP, _USERNAME and _PASSWORD").not.toBeNull()
  return scram!
}

/** An error, its causes and the errors it aggregates, depth first. */
const causes = (error: unknown): Array<unknown> => {
  if (!(error instanceof Error)) return error === undefined ? [] : [error]
  const nested = error instanceof AggregateError ? error.errors : []
  return [error, ...nested.flatMap(causes), ...causes(error.cause)]
}

const byKey = (messages: ReadonlyArray<{ readonly key: string; readonly value: string }>) => {
  const keys = new Map<string, Array<string>>()
  for (const { key, value } of messages) keys.set(key, [...(keys.get(key) ?? []), value])
  return Object.fromEntries([...keys].sort(([a], [b]) => a.localeCompare(b)))
}

describe("the tests' Kafka broker", () => {
  it("creates topics, takes an idempotent producer's records and hands them to a consumer group", async () => {
    const bootstrap = inject("kafkaBootstrap")
    const topic = uniqueName("broker")
    const received = await roundTrip(bootstrap, topic, 50)
    expect(received.every((message) => message.topic === topic)).toBe(true)
    expect(new Set(received.map((message) => message.partition)).size).toBeGreaterThan(1)
    const expected = Array.from({ length: 50 }, (_, i) => ({ key: `k${i % 5}`, value: `v${i}` }))
    expect(byKey(received)).toEqual(byKey(expected))
    // Topics are never created by a client asking for one.
    await expect(producer(bootstrap).send({ messages: [{ topic: uniqueName("absent"), value: "x" }] })).rejects
      .toThrow()
  })

  it.each(["SCRAM-SHA-256", "SCRAM-SHA-512"] as const)(
    "the SCRAM listener admits its user with %s",
    async (mechanism) => {
      const { bootstrap, password, username } = scramListener()
      const topic = uniqueName("scram")
      await admin(bootstrap, { sasl: { mechanism, username, password } }).createTopics({
        topics: [topic],
        partitions: 1,
        replicas: 1
      })
      expect(await admin(bootstrap, { sasl: { mechanism, username, password } }).listTopics()).toContain(topic)
    }
  )

  it.each(["SCRAM-SHA-256", "SCRAM-SHA-512"] as const)(
    "the SCRAM listener refuses a wrong password (%s)",
    async (mechanism) => {
      const { bootstrap, username } = scramListener()
      const client = admin(bootstrap, { sasl: { mechanism, username, password: "wrong" }, retries: 0 })
      const error = await client.listTopics().then(() => undefined, (error: unknown) => error)
      // The client reports a connection failure whose cause is the broker's refusal.
      const chain = causes(error)
      expect(chain.some((cause) => cause instanceof AuthenticationError)).toBe(true)
      expect(chain.map((cause) => (cause as { serverErrorMessage?: string }).serverErrorMessage)).toContain(
        `Authentication failed during authentication due to invalid credentials with SASL mechanism ${mechanism}`
      )
    }
  )

  it("a broker killed with SIGKILL starts again on its ports with its data", async () => {
    const broker = await startKafka()
    cleanups.push(() => broker.destroy())
    const topic = uniqueName("crash")
    expect(await roundTrip(broker.bootstrap, topic, 20)).toHaveLength(20)
    const pid = broker.pid()
    await broker.kill()
    expect(broker.pid()).toBeUndefined()
    await broker.start()
    expect(broker.pid()).not.toBe(pid)
    const received = await consume(broker.bootstrap, topic, 20)
    expect(byKey(received)).toEqual(byKey(Array.from({ length: 20 }, (_, i) => ({ key: `k${i % 5}`, value: `v${i}` }))))
  }, 300_000)
})
