/**
 * What the chaos program and its worker processes share: the message, the tables, the consumer and the
 * configuration a worker process is started with.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Handlers from "../src/services/Handlers.js"
import * as IdempotencyStore from "../src/services/IdempotencyStore.js"

/** The chaos run's message: the number of the business transaction that dispatched it. */
export class ChaosPaid extends Schema.TaggedClass<ChaosPaid>()("ChaosPaid", {
  n: Schema.Int,
  note: Schema.optional(Schema.String)
}) {}

/** The transport table (the library's default) and its queues. */
export const table = "messenger_messages"
export const queue = "outbox"
export const failedQueue = "failed"

/** The idempotent consumer's name. */
export const consumer = "chaos-effects"

/**
 * The business tables. `chaos_orders` is the producer's business row, written in the transaction of the dispatch:
 * it exists if and only if the message was committed. `chaos_effects` is the consumer's side effect, written in the
 * transaction of its idempotency record (no unique key: a second effect must show, not fail). `chaos_deliveries`
 * counts every handler invocation, written before and outside that transaction. On PostgreSQL, the keyed scenarios
 * (Kafka's) give each message an ordering key: `chaos_keys` holds each key's last sequence number, which a producer
 * raises (and so locks the key's row until its commit) before the dispatch, so `chaos_orders.seq` is the key's commit
 * order.
 */
export const postgresBusinessTables = [
  `CREATE TABLE chaos_orders (n int PRIMARY KEY, message_id uuid NOT NULL, ordering_key text, seq int)`,
  `CREATE TABLE chaos_keys (ordering_key text PRIMARY KEY, seq int NOT NULL)`,
  `CREATE TABLE chaos_effects (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, message_id uuid NOT NULL,
     n int NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
  `CREATE TABLE chaos_deliveries (message_id uuid NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT now())`
]

/**
 * The consumer: records the delivery (its own statement, outside any transaction), then writes the effect through
 * the idempotency store — effect and `(message id, consumer)` record in one transaction, so it runs once. The effect
 * takes `workMs` inside its transaction (the business work), so faults find handlers in flight.
 */
export const consume = (options: { readonly fromTransport?: string; readonly workMs: number }) =>
  Handlers.handler(
    ChaosPaid,
    (paid, envelope) =>
      Effect.gen(function*() {
        const sql = (yield* SqlClient.SqlClient).withoutTransforms()
        yield* sql`INSERT INTO chaos_deliveries (message_id, pid) VALUES (${envelope.messageId}, ${process.pid})`
        yield* IdempotencyStore.once(
          envelope,
          consumer,
          Effect.zipRight(
            Effect.sleep(options.workMs),
            sql`INSERT INTO chaos_effects (message_id, n, pid) VALUES (${envelope.messageId}, ${paid.n}, ${process.pid})`
          )
        )
      }),
    { name: consumer, ...(options.fromTransport === undefined ? {} : { fromTransport: options.fromTransport }) }
  )

/**
 * The Kafka consumer: a handler that records each invocation (autocommitted, a statement of its own) and the
 * idempotent handler (`idempotent: true`: the idempotency record and the effect in one transaction, the effect's
 * work inside it). Both run for every record of `ChaosPaid` the `kafka` transport hands out.
 */
export const consumeKafka = (options: { readonly workMs: number }) =>
  [
    Handlers.handler(
      ChaosPaid,
      (_, envelope) =>
        Effect.flatMap(
          SqlClient.SqlClient,
          (sql) =>
            sql
              .withoutTransforms()`INSERT INTO chaos_deliveries (message_id, pid) VALUES (${envelope.messageId}, ${process.pid})`
        ),
      { name: "chaos-deliveries", fromTransport: "kafka" }
    ),
    Handlers.handler(
      ChaosPaid,
      (paid, envelope) =>
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.zipRight(
            Effect.sleep(options.workMs),
            sql
              .withoutTransforms()`INSERT INTO chaos_effects (message_id, n, pid) VALUES (${envelope.messageId}, ${paid.n}, ${process.pid})`
          )),
      { name: consumer, fromTransport: "kafka", idempotent: true }
    )
  ] as const

/**
 * The retry policy of every worker: the faults make handlers, forwards and settling writes fail for seconds at a
 * time, so the policy outlasts them (as README's "Forwarding to a broker" advises for broker outages) instead of
 * giving messages up to the failure queue. A message that cannot be decoded still fails at once.
 */
export const retry: ScheduleRetryStrategy.Options = {
  default: { maxRetries: 1000, delay: "100 millis", multiplier: 2, maxDelay: "1 second" }
}

/**
 * The retry policy of a worker: `retry`, or the same delays with `maxRetries` of its own (the SIGKILL storm's 5:
 * the budget that deliveries without an outcome — a worker killed under the message — count against).
 */
export const retryOf = (config: Pick<WorkerConfig, "maxRetries">): ScheduleRetryStrategy.Options =>
  config.maxRetries === undefined ? retry : { default: { ...retry.default, maxRetries: config.maxRetries } }

/** What a worker process does. */
export type Role =
  /** Consumes `outbox` from PostgreSQL with the idempotent consumer. */
  | "consumer"
  /** Forwards `outbox` to the broker transport `amqp`. */
  | "forwarder"
  /** Consumes `amqp` from the broker with the idempotent consumer (failures to PostgreSQL's `failed`). */
  | "broker-consumer"
  /** Forwards `outbox` to the Kafka transport `kafka`. */
  | "kafka-forwarder"
  /** Consumes `kafka` from Kafka with `consumeKafka` (failures to PostgreSQL's `failed`). */
  | "kafka-consumer"

/** The configuration of a worker process (its one argument, as JSON). */
export interface WorkerConfig {
  readonly role: Role
  readonly url: string
  readonly leaseMs: number
  readonly batchSize: number
  readonly concurrency: number
  /** How long the consumer's effect works inside its transaction, in ms. */
  readonly workMs: number
  readonly settleTimeoutMs?: number
  /** The retry budget, when not `retry`'s (see `retryOf`). */
  readonly maxRetries?: number
  readonly amqp?: { readonly url: string; readonly exchange: string; readonly queue: string }
  readonly kafka?: KafkaConfig
}

/** The Kafka transport `kafka` of a scenario: its broker, topic (and partitions) and consumer group. */
export interface KafkaConfig {
  readonly bootstrap: string
  readonly topic: string
  readonly partitions: number
  readonly groupId: string
  readonly sessionTimeoutMs: number
}

/** The ordering key of business transaction `n` among `keys` keys. */
export const keyOf = (n: number, keys: number) => `key-${n % keys}`

/** The `application_name` of the worker processes' pooled connections (their claim session has the library's). */
export const workerApplicationName = "chaos worker"
/** The `application_name` of the producers' connections. */
export const producerApplicationName = "chaos producer"
/** The `application_name` of the chaos program's own probes, which the fault injection spares. */
export const monitorApplicationName = "chaos monitor"
