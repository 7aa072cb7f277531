/**
 * The MySQL and MariaDB transport: Symfony's `messenger_messages` table, many queues, claimed with
 * `SELECT … FOR UPDATE SKIP LOCKED` (MySQL ≥ 8.0, MariaDB ≥ 10.6). Its statements live in `mysql/sql/transport.ts`,
 * its migrations in `mysql/sql/migrations.ts`, a worker's session in `mysql/MysqlSession.ts`. Without
 * notifications, workers poll; a producer wakes the workers of its own process at once.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { StoredMessage } from "../domain/Envelope.js"
import { type OutboxConfigError, TransportError, type UnknownTransportError } from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import * as Identifier from "../domain/Identifier.js"
import { mapConfigError } from "../internal/configError.js"
import { rowCapabilities, unknownTransport } from "../internal/transports.js"
import { Transport, type TransportShape } from "../services/Transport.js"
import {
  backendLayer,
  type TransportAdmin,
  type TransportAdminShape,
  type TransportBackend
} from "../services/TransportAdmin.js"
import * as LocalWakeups from "./internal/localWakeups.js"
import { isRowId, listRows, type ResolvedTransport, resolveTransports } from "./internal/tableTransports.js"
import { isStorageUnusable, missingTable, storageNotReady, transportError } from "./mysql/errors.js"
import { runMigrations } from "./mysql/migrate.js"
import * as MysqlSession from "./mysql/MysqlSession.js"
import * as Migrations from "./mysql/sql/migrations.js"
import * as Statements from "./mysql/sql/transport.js"
import type { TransportOptions as PgTransportOptions } from "./PgTransport.js"

/**
 * Options of one named transport: its queue, its lease (`redeliverTimeout`) and its failure transport, as on
 * PostgreSQL. Ordering keys are PostgreSQL's only.
 *
 * @since 0.1.0
 * @category models
 */
export type TransportOptions = Omit<PgTransportOptions, "keyAfterFailure">

/**
 * Options of the MySQL transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Table name, optionally qualified with its database (default `messenger_messages`). */
  readonly table?: string
  /** Named transports (default: `outbox`). The failure transport (`failed`) is added when missing. */
  readonly transports?: Readonly<Record<string, TransportOptions>>
  /** Run the migrations when the layer is built (default `false`: production runs `setup-transports`). */
  readonly autoSetup?: boolean
}

/**
 * The default table name, as Symfony's.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTable = "messenger_messages"

const toStored = (transport: string) => (row: Statements.StoredRow): StoredMessage => ({
  id: row.id,
  transport,
  messageId: row.message_id,
  body: row.body,
  headers: row.headers,
  createdAt: Statements.dateOf(row.created_us),
  availableAt: Statements.dateOf(row.available_us),
  deliveredAt: row.delivered_us === null ? null : Statements.dateOf(row.delivered_us),
  deliveries: Number(row.delivery_count)
})

const affectedRows = (result: unknown): number => Number((result as { affectedRows?: unknown }).affectedRows ?? 0)

const count = (value: number | string | null): number => value === null ? 0 : Number(value)

/**
 * Builds the transport on the `SqlClient` in context (a `MysqlClient`). Every statement runs on the caller's
 * connection: inside `sql.withTransaction`, `send` joins the caller's transaction. A worker's claim is a
 * transaction of its own on a pooled connection.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<TransportBackend, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const client = yield* SqlClient.SqlClient
    const sql = client.withoutTransforms()
    const table = yield* Identifier.validateTableName(options.table ?? defaultTable, 48)
    const transports = yield* resolveTransports(options.transports ?? { outbox: {} })
    const statements = Statements.make(sql, table)
    const wakeups = LocalWakeups.shared(client, table)

    const lookup = (name: string): Effect.Effect<ResolvedTransport, UnknownTransportError> => {
      const found = transports.get(name)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(unknownTransport(name, transports.keys()))
    }
    const wrap = (transport: string, operation: string) => <A, R>(self: Effect.Effect<A, SqlError, R>) =>
      Effect.mapError(self, (error) => transportError(transport, operation, error))
    /** The hot path's errors: a missing or forbidden table is a `StorageNotReadyError`, not an outage. */
    const toError = (transport: string, operation: string, error: SqlError) =>
      isStorageUnusable(error) ? storageNotReady(table, error) : transportError(transport, operation, error)

    const setup = runMigrations({
      sql,
      migrationsTable: `${table}_migrations`,
      migrations: Migrations.migrations(table),
      onError: (detail, cause) =>
        new TransportError({
          transport: "*",
          operation: "setup",
          message: `Setup of ${table} failed: ${detail}`,
          cause
        })
    })

    const send: TransportShape["send"] = (name, messages) =>
      Effect.flatMap(lookup(name), (transport) => {
        if (messages.length === 0) return Effect.void
        if (messages.some((m) => m.orderingKey !== undefined)) {
          return Effect.fail(
            new TransportError({
              transport: name,
              operation: "send",
              message: "The MySQL transport has no ordering keys: a message with one cannot be sent to it"
            })
          )
        }
        return Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (tx) =>
          statements.insert(transport.queueName, messages).pipe(
            Effect.mapError((error) => toError(name, "send", error)),
            // Committed already outside a transaction; inside one, visible only once the caller commits.
            Effect.tap(() =>
              wakeups.notify(transport.queueName, Option.isSome(tx))
            ),
            Effect.asVoid
          ))
      })

    const withIds = (
      name: string,
      operation: string,
      ids: ReadonlyArray<string>,
      statement: (queue: string, ids: ReadonlyArray<string>) => Effect.Effect<unknown, SqlError>
    ) =>
      Effect.flatMap(lookup(name), (transport) => {
        const valid = ids.filter(isRowId)
        return valid.length === 0
          ? Effect.void
          : statement(transport.queueName, valid).pipe(wrap(name, operation), Effect.asVoid)
      })

    const transport: TransportShape = {
      names: Array.from(transports.keys()),
      capabilities: (name) => (transports.has(name) ? Option.some(rowCapabilities) : Option.none()),
      lease: (name) =>
        Option.map(Option.fromNullable(transports.get(name)), (t) => Duration.millis(t.redeliverTimeoutMs)),
      failureTransport: (name) => Option.map(Option.fromNullable(transports.get(name)), (t) => t.failureTransport),
      send,
      open: MysqlSession.open({ sql, table, transports, wakeups, toError }),
      ack: (name, ids) => withIds(name, "ack", ids, statements.ack),
      retry: (message, { delay, headers }) =>
        Effect.flatMap(lookup(message.transport), (transport) =>
          isRowId(message.id)
            ? statements.retry(transport.queueName, message.id, Duration.toMillis(delay), Headers.encode(headers)).pipe(
              wrap(message.transport, "retry"),
              Effect.asVoid
            )
            : Effect.void),
      fail: (message, headers) =>
        Effect.flatMap(lookup(message.transport), (transport) =>
          isRowId(message.id)
            ? statements.fail(
              transport.queueName,
              message.id,
              transports.get(transport.failureTransport)!.queueName,
              Headers.encode(headers)
            ).pipe(wrap(message.transport, "fail"), Effect.asVoid)
            : Effect.void),
      start: (message) =>
        Effect.flatMap(lookup(message.transport), (transport) =>
          isRowId(message.id)
            ? statements.start(transport.queueName, message.id, transport.redeliverTimeoutMs).raw.pipe(
              wrap(message.transport, "start"),
              Effect.map((result) => affectedRows(result) === 1)
            )
            : Effect.succeed(false)),
      keepalive: (name, ids) => withIds(name, "keepalive", ids, statements.keepalive),
      release: (name, ids) =>
        withIds(
          name,
          "release",
          ids,
          (queue, values) => Effect.tap(statements.release(queue, values), () => wakeups.notify(queue, false))
        )
    }

    const list: TransportAdminShape["list"] = (name, options) =>
      Effect.flatMap(lookup(name), ({ queueName }) =>
        listRows(
          options,
          (after, size) => statements.listPage(queueName, after, size).pipe(wrap(name, "list")),
          toStored(name)
        ))

    const admin: TransportAdminShape = {
      setup,
      list,
      find: (name, id) =>
        Effect.flatMap(lookup(name), ({ queueName }) =>
          !isRowId(id) ? Effect.succeedNone : statements.find(queueName, id).pipe(
            wrap(name, "find"),
            Effect.map((rows) =>
              Option.map(Option.fromNullable(rows[0]), toStored(name))
            )
          )),
      remove: (name, ids) =>
        Effect.flatMap(lookup(name), ({ queueName }) => {
          const valid = ids.filter(isRowId)
          return valid.length === 0
            ? Effect.succeed(0)
            : Effect.map(statements.remove(queueName, valid).raw.pipe(wrap(name, "remove")), affectedRows)
        }),
      move: (from, id, { headers, to }) =>
        Effect.gen(function*() {
          const source = yield* lookup(from)
          const target = yield* lookup(to)
          if (!isRowId(id)) return false
          const result = yield* statements.move(source.queueName, id, target.queueName, Headers.encode(headers)).raw
            .pipe(wrap(from, "move"))
          const moved = affectedRows(result) === 1
          if (moved) wakeups.notify(target.queueName, false)
          return moved
        }),
      stats: (name) =>
        Effect.gen(function*() {
          const transport = yield* lookup(name)
          const failure = transports.get(transport.failureTransport)!
          const [row] = yield* statements.stats(transport.queueName, failure.queueName, transport.redeliverTimeoutMs)
            .pipe(wrap(name, "stats"))
          return {
            transport: name,
            queue: transport.queueName,
            ready: count(row!.ready),
            delayed: count(row!.delayed),
            inFlight: count(row!.in_flight),
            failed: count(row!.failed),
            oldestReadyAgeMs: row!.oldest_us === null ? null : Math.max(0, Math.round(Number(row!.oldest_us) / 1000)),
            blockedKeys: 0
          }
        })
    }

    if (options.autoSetup === true) yield* setup
    return { ...transport, ...admin }
  })

/**
 * The transport over the `SqlClient` in context (for example `MysqlClient.layer`), as `Transport` and
 * `TransportAdmin`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<Transport | TransportAdmin, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  backendLayer(make(options))

/**
 * `make` with its options read from `Config` (each field a `Config`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeConfig = (
  config: Config.Config.Wrap<Options>
): Effect.Effect<TransportBackend, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Effect.flatMap(mapConfigError(Config.unwrap(config)), make)

/**
 * `layer` with its options read from `Config` (see `makeConfig`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Config.Wrap<Options>
): Layer.Layer<Transport | TransportAdmin, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  backendLayer(makeConfig(config))

/**
 * At most this many queues are read back by `queueNames`.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxListedQueues = 1000

/**
 * The queue names a table holds messages in (at most `maxListedQueues`, in order), whatever transports an
 * application declares: an operator read. A table that does not exist yet holds none.
 *
 * @since 0.1.0
 * @category operator reads
 */
export const queueNames = (
  options: { readonly table?: string } = {}
): Effect.Effect<ReadonlyArray<string>, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const table = yield* Identifier.validateTableName(options.table ?? defaultTable, 48)
    return yield* Statements.queueNames(sql, table, maxListedQueues).pipe(
      Effect.map((rows) => rows.map((row) => row.queue_name)),
      Effect.catchIf((error) => missingTable(error) !== undefined, () => Effect.succeed([])),
      Effect.mapError((error) => transportError("*", "queues", error))
    )
  })

/**
 * How many messages of a failure queue failed from each transport — the `originalTransport` their headers record
 * (`null`: headers that record none, or that cannot be read). An operator read (`outbox stats`).
 *
 * @since 0.1.0
 * @category operator reads
 */
export const failedFrom = (
  failureQueue: string,
  options: { readonly table?: string } = {}
): Effect.Effect<
  ReadonlyArray<{ readonly transport: string | null; readonly count: number }>,
  OutboxConfigError | TransportError,
  SqlClient.SqlClient
> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const table = yield* Identifier.validateTableName(options.table ?? defaultTable, 48)
    const rows = yield* Statements.failedFrom(sql, table, failureQueue).pipe(
      Effect.mapError((error) => transportError(failureQueue, "stats", error))
    )
    return rows.map((row) => ({ transport: row.origin, count: Number(row.n) }))
  })
