/**
 * The Debezium connector configuration that matches a CDC transport (PgCdcTransport): Kafka Connect's REST form and
 * a standalone worker's properties.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import { OutboxConfigError } from "../../domain/Errors.js"
import type { Resolved } from "./cdcOptions.js"

/**
 * Where the connector reads and what it creates: the database it connects to (its role needs REPLICATION), the
 * connector's name (default `effect-outbox-cdc`), Debezium's `topic.prefix` (default `effect-outbox`; the routed
 * topics do not use it), the partitions and replication factor of the topics it creates (default 3 and 1), how often
 * it sends a heartbeat (default 10 s: on a database whose other tables change while the events do not, the slot
 * advances only with heartbeats), and how long it waits for more changes before it sends what it has (Debezium's
 * `poll.interval.ms`, default here 100 ms instead of its 500: the commit → Kafka latency, against a little CPU).
 *
 * @since 0.1.0
 * @category models
 */
export interface ConnectorOptions {
  readonly database: {
    readonly host: string
    readonly port: number
    readonly user: string
    /** Left out, the configuration names Connect's file config provider (`${file:…}`) for you to fill in. */
    readonly password?: string | Redacted.Redacted
    readonly dbname: string
  }
  readonly name?: string
  readonly topicPrefix?: string
  readonly partitions?: number
  readonly replicationFactor?: number
  readonly heartbeatIntervalMs?: number
  readonly pollIntervalMs?: number
}

/**
 * A connector's name and configuration, as Kafka Connect's REST API takes them (`PUT /connectors/<name>/config`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Connector {
  readonly name: string
  readonly config: Readonly<Record<string, string>>
}

const positiveInteger = (what: string, value: number | undefined, fallback: number) =>
  value === undefined
    ? Effect.succeed(fallback)
    : Number.isSafeInteger(value) && value > 0
    ? Effect.succeed(value)
    : Effect.fail(new OutboxConfigError({ message: `connector ${what} must be a positive integer, got ${value}` }))

/** The connector for resolved CDC options. @internal */
export const connector = (
  o: Resolved,
  options: ConnectorOptions
): Effect.Effect<Connector, OutboxConfigError> =>
  Effect.gen(function*() {
    const partitions = yield* positiveInteger("partitions", options.partitions, 3)
    const replicationFactor = yield* positiveInteger("replicationFactor", options.replicationFactor, 1)
    const heartbeat = yield* positiveInteger("heartbeatIntervalMs", options.heartbeatIntervalMs, 10_000)
    const poll = yield* positiveInteger("pollIntervalMs", options.pollIntervalMs, 100)
    const port = yield* positiveInteger("database port", options.database.port, 5432)
    const name = options.name ?? "effect-outbox-cdc"
    if (!/^[A-Za-z0-9_.-]{1,200}$/.test(name)) {
      return yield* new OutboxConfigError({ message: `Invalid connector name ${JSON.stringify(name)}` })
    }
    const password = options.database.password
    const table = o.table.includes(".") ? o.table : `public.${o.table}`
    // A logical message's row has only the fields its JSON has (no trace context without a tracer): the trace
    // context travels in x-outbox-headers there; a table's row has every column.
    const placement = [
      "type:header:type",
      "headers:header:x-outbox-headers",
      ...(o.mode === "table" ? ["traceparent:header:traceparent", "tracestate:header:tracestate"] : []),
      "available_at:header:x-outbox-available-at"
    ].join(",")
    const config: Record<string, string> = {
      "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
      "tasks.max": "1",
      "plugin.name": "pgoutput",
      "database.hostname": options.database.host,
      "database.port": String(port),
      "database.user": options.database.user,
      "database.password": password === undefined
        ? "${file:/etc/kafka-connect/secrets.properties:database.password}"
        : Redacted.isRedacted(password)
        ? Redacted.value(password)
        : password,
      "database.dbname": options.database.dbname,
      "topic.prefix": options.topicPrefix ?? "effect-outbox",
      "publication.name": o.publication,
      // setup created it, for the table's inserts only: the connector must not widen it.
      "publication.autocreate.mode": "disabled",
      "slot.name": o.slot,
      // Events written before the slot existed are not sent: they were never meant for this connector.
      "snapshot.mode": "no_data",
      "tombstones.on.delete": "false",
      "extended.headers.enabled": "false",
      "heartbeat.interval.ms": String(heartbeat),
      "poll.interval.ms": String(poll),
      "key.converter": "org.apache.kafka.connect.storage.StringConverter",
      "value.converter": "org.apache.kafka.connect.storage.StringConverter",
      "topic.creation.default.partitions": String(partitions),
      "topic.creation.default.replication.factor": String(replicationFactor),
      ...(o.mode === "table"
        ? {
          "table.include.list": table,
          "transforms": "outbox"
        }
        : {
          // No table (the publication has none): the events are logical decoding messages, turned into rows of the
          // same fields first.
          "message.prefix.include.list": o.messagePrefix,
          "transforms": "decode,outbox",
          "transforms.decode.type": "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"
        }),
      "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
      "transforms.outbox.table.fields.additional.placement": placement,
      "transforms.outbox.table.expand.json.payload": "false"
    }
    return { name, config }
  })

/**
 * A connector as a standalone worker's connector properties file (`name=…` first, then the configuration).
 *
 * @since 0.1.0
 * @category utils
 */
export const toProperties = (c: Connector): string =>
  [`name=${c.name}`, ...Object.entries(c.config).map(([key, value]) => `${key}=${value}`)].join("\n") + "\n"
