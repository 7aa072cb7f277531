/**
 * The layers of a chaos worker process, and of the chaos program's own setup: the PostgreSQL client, the transport
 * (PostgreSQL alone, or PostgreSQL and RabbitMQ under one router), the idempotency store, the retry policy and the
 * handlers of the worker's role.
 */
import * as MysqlClient from "@effect/sql-mysql2/MysqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type { OutboxConfigError } from "../src/domain/Errors.js"
import * as AmqpTransport from "../src/layers/amqp/AmqpTransport.js"
import * as KafkaTransport from "../src/layers/kafka/KafkaTransport.js"
import * as MysqlIdempotencyStore from "../src/layers/MysqlIdempotencyStore.js"
import * as MysqlTransport from "../src/layers/MysqlTransport.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Forwarder from "../src/programs/Forwarder.js"
import * as Handlers from "../src/services/Handlers.js"
import type { IdempotencyStore } from "../src/services/IdempotencyStore.js"
import type { Transport } from "../src/services/Transport.js"
import { dialectOf } from "./dialects.js"
import { ChaosPaid, consume, consumeKafka, queue, retryOf, table, type WorkerConfig } from "./model.js"

/**
 * A pool on a URL: PostgreSQL's, its connections named for `pg_stat_activity`, or MariaDB's (`mysql://`), whose
 * connections have no name.
 */
export const database = (
  url: string,
  applicationName: string,
  maxConnections = 10
): Layer.Layer<SqlClient.SqlClient, unknown> =>
  dialectOf(url) === "mariadb"
    ? MysqlClient.layer({ url: Redacted.make(url), maxConnections })
    : PgClient.layer({ url: Redacted.make(url), applicationName, maxConnections })

/** The PostgreSQL transport options: `outbox` with the scenario's lease (and `failed`, added by the transport). */
export const pgOptions = (leaseMs: number): PgTransport.Options => ({
  table,
  transports: { [queue]: { redeliverTimeout: Duration.millis(leaseMs) } }
})

/**
 * `Transport` and `TransportAdmin`: PostgreSQL, plus the broker's `amqp` transport or Kafka's `kafka` when
 * configured; or MariaDB's.
 */
export const transport = (config: Pick<WorkerConfig, "leaseMs" | "amqp" | "kafka" | "url">) =>
  dialectOf(config.url) === "mariadb"
    ? MysqlTransport.layer(pgOptions(config.leaseMs))
    : config.kafka !== undefined
    ? TransportRouter.layer(
      PgTransport.make(pgOptions(config.leaseMs)),
      KafkaTransport.make({
        brokers: config.kafka.bootstrap,
        clientId: "chaos",
        sessionTimeout: Duration.millis(config.kafka.sessionTimeoutMs),
        transports: {
          kafka: { topic: config.kafka.topic, groupId: config.kafka.groupId, partitions: config.kafka.partitions }
        }
      })
    )
    : config.amqp === undefined
    ? PgTransport.layer(pgOptions(config.leaseMs))
    : TransportRouter.layer(
      PgTransport.make(pgOptions(config.leaseMs)),
      AmqpTransport.make({
        url: config.amqp.url,
        exchange: { name: config.amqp.exchange },
        transports: { amqp: { queue: config.amqp.queue } }
      })
    )

/** The handlers of a role. */
const handlers = (
  config: WorkerConfig
): Layer.Layer<Handlers.Handlers, OutboxConfigError, IdempotencyStore | SqlClient.SqlClient | Transport> => {
  switch (config.role) {
    case "consumer":
      return Handlers.layer([consume({ workMs: config.workMs })])
    case "forwarder":
      return Handlers.layer([...Forwarder.handlers([ChaosPaid], { to: "amqp" })])
    case "broker-consumer":
      return Handlers.layer([consume({ fromTransport: "amqp", workMs: config.workMs })])
    case "kafka-forwarder":
      return Handlers.layer([...Forwarder.handlers([ChaosPaid], { to: "kafka" })])
    case "kafka-consumer":
      return Handlers.layer(consumeKafka({ workMs: config.workMs }))
  }
}

/** The idempotency store of the database's dialect. */
export const idempotencyStore = (url: string) =>
  dialectOf(url) === "mariadb" ? MysqlIdempotencyStore.layer() : PgIdempotencyStore.layer()

/** Everything `Worker.run` needs in a worker process of the role, over the SqlClient in context. */
export const workerStack = (config: WorkerConfig) =>
  Layer.mergeAll(
    handlers(config).pipe(Layer.provide(idempotencyStore(config.url))),
    ScheduleRetryStrategy.layer(retryOf(config))
  ).pipe(Layer.provideMerge(transport(config)))
