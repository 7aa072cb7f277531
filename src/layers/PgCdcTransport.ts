/**
 * Change data capture on PostgreSQL: messages routed to a CDC transport are written, in the caller's transaction, as
 * events that Debezium reads from the WAL and its Outbox Event Router publishes to Kafka — no worker polls them. The
 * commit itself becomes the source of the event, as for the polled outbox: a rolled-back transaction never reaches
 * Kafka, a committed one always does (Debezium is at-least-once; consumers dedupe by the `id` header, the message
 * id).
 *
 * ```ts
 * const Transports = TransportRouter.layer(PgTransport.make(), PgCdcTransport.make())   // outbox, failed + cdc
 * const OutboxLive = Outbox.layer({ routes: { OrderPaid: ["cdc"] } })                      // OrderPaid → Debezium
 * ```
 *
 * Two ways to write an event (`mode`):
 * - `"message"` (the default): `pg_logical_emit_message(true, prefix, event)`, no table at all — the cheapest for
 *   the producer, nothing to vacuum; the connector decodes it with Debezium's `DecodeLogicalDecodingMessageContent`
 *   before the router. PostgreSQL 14 or later.
 * - `"table"`: a row of the event table (Debezium's default columns: `id`, `aggregatetype`, `aggregateid`, `type`,
 *   `payload`), deleted by a trigger in the statement that inserted it — the WAL keeps the insert, the table stays
 *   empty. PostgreSQL 13, and pipelines that read table changes only.
 *
 * Each event carries the message's stored headers (Kafka header `x-outbox-headers`), its trace context
 * (`traceparent`, `tracestate`) and, for a delayed dispatch, when it is due (`x-outbox-available-at`): the Kafka
 * transport consumes such records as it consumes its own. The record key is the message's ordering key, else its
 * id: a key's events reach one partition in commit order.
 *
 * `setup` checks that the server and the connector's role can do logical replication (saying what to change when
 * not) and creates the table and a publication of its inserts; `stats` shows the replication slot's retained WAL;
 * `connectorConfig` (and the command line's `cdc:connector`) prints the matching Debezium configuration. It has
 * nothing to consume or browse: `open` (a worker) fails at once, and so do `list`, `find`, `remove`, `move`.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { OutgoingMessage } from "../domain/Envelope.js"
import { OutboxConfigError, TransportError } from "../domain/Errors.js"
import { describeError } from "../internal/describeError.js"
import { emptyStats, noCapabilities, storesNothing, unknownTransport } from "../internal/transports.js"
import { type Capabilities, Transport } from "../services/Transport.js"
import { TransportAdmin, type TransportBackend } from "../services/TransportAdmin.js"
import * as CdcConnector from "./pg/cdcConnector.js"
import { type Options, resolve } from "./pg/cdcOptions.js"
import { isStorageUnusable, storageNotReady } from "./pg/errors.js"
import * as Cdc from "./pg/sql/cdc.js"

export type { Connector, ConnectorOptions } from "./pg/cdcConnector.js"
export { toProperties } from "./pg/cdcConnector.js"
export type { Mode, Options, Resolved, TransportOptions } from "./pg/cdcOptions.js"
export { resolve } from "./pg/cdcOptions.js"

export { defaultTransport } from "./pg/cdcOptions.js"

/**
 * What a CDC transport does: none of what a store does, but ordering keys (a key's events reach one partition in
 * commit order).
 *
 * @since 0.1.0
 * @category constants
 */
export const capabilities: Capabilities = { ...noCapabilities, orderingKeys: true }

/**
 * Builds the transport on the `SqlClient` in context. `send` runs on the caller's connection: inside
 * `sql.withTransaction` its event commits or rolls back with the business change.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<TransportBackend, OutboxConfigError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const o = yield* resolve(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const names = Array.from(o.transports.keys())

    const lookup = (name: string) => {
      const found = o.transports.get(name)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(unknownTransport(name, names))
    }
    const failure = (name: string, operation: string) => (error: SqlError) =>
      isStorageUnusable(error)
        ? storageNotReady(o.table, error)
        : new TransportError({
          transport: name,
          operation,
          message: `The CDC transport ${name} could not ${operation}: ${describeError(error)}`,
          cause: error
        })

    const eventsOf = (aggregateType: (type: string) => string, messages: ReadonlyArray<OutgoingMessage>, now: number) =>
      messages.map((m): Cdc.Event => ({
        id: m.messageId,
        aggregateType: aggregateType(m.type),
        aggregateId: m.orderingKey ?? m.messageId,
        type: m.type,
        // Text columns take no NUL: stored as U+FFFD, as the table transport stores it.
        payload: m.body.replaceAll("\u0000", "\uFFFD"),
        headers: m.headers.replaceAll("\u0000", "\uFFFD"),
        traceparent: m.traceparent ?? null,
        tracestate: m.tracestate ?? null,
        // Always set (the dispatch time when not delayed): a logical message's decoded row has no null fields.
        availableAt: now + Math.max(0, m.delayMs)
      }))

    const write = (events: ReadonlyArray<Cdc.Event>) =>
      Effect.asVoid(
        o.mode === "message" ? Cdc.emitMessages(sql, o.messagePrefix, events) : Cdc.insertEvents(sql, o.table, events)
      )

    const send: TransportBackend["send"] = (name, messages) =>
      Effect.flatMap(lookup(name), (aggregateType) =>
        messages.length === 0 ? Effect.void : Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const events = eventsOf(aggregateType, messages, now)
          for (const e of events) {
            if (e.aggregateType.length === 0 || !/^[A-Za-z0-9_.-]{1,200}$/.test(e.aggregateType)) {
              return Effect.fail(
                new TransportError({
                  transport: name,
                  operation: "send",
                  message: `The CDC transport ${name} derived the aggregate type ${
                    JSON.stringify(e.aggregateType.slice(0, 200))
                  } for ${e.type}: it must be 1-200 letters, digits, '_', '.' or '-' (it names a Kafka topic)`
                })
              )
            }
          }
          return Effect.mapError(write(events), failure(name, "send"))
        }))

    const setup = Effect.gen(function*() {
      const role = o.connectorRole ??
        (yield* sql<{ readonly role: string }>`SELECT current_user AS role`)[0]!.role
      const [ready] = yield* Cdc.readiness(sql, role)
      const problems: Array<string> = []
      if (ready!.walLevel !== "logical") {
        problems.push(
          `wal_level is ${ready!.walLevel}: run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) ` +
            "and restart the server"
        )
      }
      if (ready!.replication === null) {
        problems.push(`the connector's role ${role} does not exist`)
      } else if (!ready!.replication) {
        problems.push(`the connector's role ${role} may not replicate: run ALTER ROLE "${role}" WITH REPLICATION`)
      }
      if (o.mode === "message" && ready!.major < 14) {
        problems.push(
          `PostgreSQL ${ready!.major} does not stream logical decoding messages to pgoutput (14 does): use mode "table"`
        )
      }
      if (problems.length > 0) {
        return yield* new TransportError({
          transport: "*",
          operation: "setup",
          message: `Change data capture is not ready: ${problems.join("; ")}`
        })
      }
      const applied: Array<string> = []
      if (o.mode === "table") {
        if ((yield* Cdc.tableExists(sql, o.table))[0]!.n === 0) {
          yield* Cdc.createTable(sql, o.table)
          applied.push(`table ${o.table}`)
        }
        // Replaced each time: its text is the one this version runs. Its function runs with a fixed search_path,
        // so it names the table with its schema.
        const [{ schema }] = yield* sql<{ readonly schema: string }>`SELECT current_schema() AS schema`
        yield* Cdc.createForgetTrigger(sql, o.table.includes(".") ? o.table : `${schema}.${o.table}`)
      }
      const [exists] = yield* Cdc.publicationExists(sql, o.publication)
      if (exists!.n === 0) {
        // In message mode the publication has no table: pgoutput needs one to stream the messages.
        yield* o.mode === "table"
          ? Cdc.createPublication(sql, o.publication, o.table)
          : sql.unsafe(`CREATE PUBLICATION "${o.publication}"`)
        applied.push(`publication ${o.publication}`)
      }
      return applied
    }).pipe(
      Effect.catchTag("SqlError", (error) =>
        Effect.fail(
          new TransportError({
            transport: "*",
            operation: "setup",
            message: `Setup of the CDC transport failed: ${describeError(error)}`,
            cause: error
          })
        ))
    )

    const stats: TransportBackend["stats"] = (name) =>
      Effect.zipRight(
        lookup(name),
        Effect.map(Cdc.slotLag(sql, o.slot), ([row]) => ({
          ...emptyStats(name),
          slot: row === undefined ? null : {
            name: o.slot,
            active: row.active,
            retainedBytes: Number(row.retainedBytes ?? 0),
            pendingBytes: Number(row.pendingBytes ?? 0),
            walStatus: row.walStatus
          }
        })).pipe(
          Effect.mapError((error) =>
            new TransportError({
              transport: name,
              operation: "stats",
              message: `The CDC transport ${name} could not read its replication slot: ${describeError(error)}`,
              cause: error
            })
          )
        )
      )

    const backend: TransportBackend = {
      names,
      capabilities: (name) => (o.transports.has(name) ? Option.some(capabilities) : Option.none()),
      ...storesNothing({
        names,
        lookup,
        unsupported: (name, operation) =>
          `${operation} is not supported by the CDC transport ${name}: it stores no message, Debezium carries ` +
          "its events to Kafka",
        nothingToConsume: (name) =>
          `The transport ${JSON.stringify(name)} is a CDC transport: Debezium carries its events to Kafka, there ` +
          "is nothing to consume here; consume the Kafka topic with KafkaTransport"
      }),
      send,
      setup,
      stats
    }
    return backend
  })

/**
 * The Debezium connector that carries the transport's events: its name and configuration for Kafka Connect's REST
 * API (`PUT /connectors/<name>/config`); `toProperties` writes it for a standalone worker.
 *
 * @since 0.1.0
 * @category utils
 */
export const connectorConfig = (
  options: Options,
  connector: CdcConnector.ConnectorOptions
): Effect.Effect<CdcConnector.Connector, OutboxConfigError> =>
  Effect.flatMap(resolve(options), (o) => CdcConnector.connector(o, connector))

/**
 * A layer providing `Transport` and `TransportAdmin` (use `make` under `TransportRouter.layer` beside the table
 * transport).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<Transport | TransportAdmin, OutboxConfigError, SqlClient.SqlClient> =>
  Layer.effectContext(Effect.map(make(options), (t) => Context.make(Transport, t).pipe(Context.add(TransportAdmin, t))))
