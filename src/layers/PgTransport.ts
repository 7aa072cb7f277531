/**
 * The PostgreSQL transport: one Symfony-compatible table, many queues. Its statements live in
 * `pg/sql/transport.ts`, its migrations in `pg/sql/migrations.ts`, a worker's session in `pg/PgSession.ts`.
 *
 * @since 0.1.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Statement from "@effect/sql/Statement"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { OutgoingMessage, StoredMessage } from "../domain/Envelope.js"
import { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import * as Identifier from "../domain/Identifier.js"
import { mapConfigError } from "../internal/configError.js"
import { rowCapabilities, unknownTransport } from "../internal/transports.js"
import { type Capabilities, Transport, type TransportShape } from "../services/Transport.js"
import {
  backendLayer,
  type TransportAdmin,
  type TransportAdminShape,
  type TransportBackend
} from "../services/TransportAdmin.js"
import { runMigrations } from "./internal/migrate.js"
import { isRowId, listRows, type ResolvedTransport, resolveTransports } from "./internal/tableTransports.js"
import { isStorageUnusable, storageNotReady, transportError } from "./pg/errors.js"
import * as PgSession from "./pg/PgSession.js"
import * as PgWakeups from "./pg/PgWakeups.js"
import * as Migrations from "./pg/sql/migrations.js"
import * as Statements from "./pg/sql/transport.js"

/**
 * Options of one named transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportOptions {
  /** The `queue_name` it uses (default: the transport name). */
  readonly queueName?: string
  /**
   * How long a claim holds a message before another worker may take it (default 30 seconds). The worker
   * renews the lease of the messages it holds every third of it, so a slow handler is never
   * redelivered while its worker lives, and a dead worker's messages come back one lease later.
   */
  readonly redeliverTimeout?: Duration.DurationInput
  /** The transport its failed messages move to (default `failed`); it must live in the same table. */
  readonly failureTransport?: string
  /**
   * What an ordering key does once one of its messages went to the failure transport: `block` (the default)
   * holds the key's later messages until that message is retried or removed (`failed:retry`, `failed:remove`);
   * `skip` goes on with them.
   */
  readonly keyAfterFailure?: "block" | "skip"
}

/**
 * Options of the PostgreSQL transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Table name, optionally schema-qualified (default `messenger_messages`). */
  readonly table?: string
  /** Named transports (default: `outbox`). The failure transport (`failed`) is added when missing. */
  readonly transports?: Readonly<Record<string, TransportOptions>>
  /** Run the migrations when the layer is built (default `false`: production runs `setup-transports`). */
  readonly autoSetup?: boolean
  /**
   * Wake this layer's waiting workers at commit with `pg_notify` (default `true`): a worker listens on a dedicated
   * connection (when a `PgClient` is in context) and announces its waits in `<table>_waiting`; while one waits on a
   * queue, every statement that writes to the queue notifies it once — an INSERT through the table's trigger, from
   * any producer — delivered when the transaction commits, never before the row is visible. The commits of a busy
   * queue take no NOTIFY lock. Workers still poll as the safety net; with `false` they only poll.
   */
  readonly notify?: boolean
  /**
   * The notification channel: letters, digits, `_` and `.`, at most 63 characters (default: the table name, `.`
   * replaced by `_`, shortened with a hash when longer than 63 — `Identifier.defaultChannel`).
   */
  readonly channel?: string
}

/**
 * The default table name, as Symfony's.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTable = "messenger_messages"

/** `pg`'s pool size when `maxConnections` is not set. */
const defaultPoolSize = 10

/**
 * In a smaller pool (`PgClient` `maxConnections`) a worker's session does not hold a connection of its own: its
 * claims take turns in the pool like every other statement, so it cannot starve the application or its handlers.
 */
const minPoolForOwnConnection = 4

const toStored = (transport: string) => (row: Statements.StoredRow): StoredMessage => ({
  id: row.id,
  transport,
  messageId: row.message_id,
  body: row.body,
  headers: row.headers,
  createdAt: Statements.dateOf(row.created_ms),
  availableAt: Statements.dateOf(row.available_ms),
  deliveredAt: row.delivered_ms === null ? null : Statements.dateOf(row.delivered_ms),
  deliveries: row.delivery_count,
  ...(row.ordering_key === null ? {} : { orderingKey: row.ordering_key }),
  ...(row.blocks_key ? { blocksKey: true } : {})
})

/** A row store's capabilities, ordering keys included (migration 6). */
const capabilities: Capabilities = { ...rowCapabilities, orderingKeys: true }

/**
 * A message PostgreSQL's `text` can hold: a NUL character becomes U+FFFD. Messages dispatched here never hold one
 * (JSON escapes it); a broker's record moved to a failure transport here can (a binary value of another producer),
 * and refusing it would hold its worker on a write that never succeeds.
 */
const storable = (m: OutgoingMessage): OutgoingMessage =>
  m.body.includes("\u0000") || m.headers.includes("\u0000")
    ? { ...m, body: m.body.replaceAll("\u0000", "\uFFFD"), headers: m.headers.replaceAll("\u0000", "\uFFFD") }
    : m

/**
 * Builds the transport on the `SqlClient` in context. Every statement runs on the caller's connection: inside
 * `sql.withTransaction`, `send` joins the caller's transaction. With a `PgClient` in context (not just a
 * `SqlClient`), workers are woken by LISTEN/NOTIFY and their sessions hold a connection of their own.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<TransportBackend, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const table = yield* Identifier.validateTableName(options.table ?? defaultTable, 48)
    const transports = yield* resolveTransports(options.transports ?? { outbox: {} })
    const notify = options.notify ?? true
    const channel = options.channel === undefined
      ? Identifier.defaultChannel(table)
      : yield* Identifier.validateChannel(options.channel)
    const statements = Statements.make(sql, table, { channel: notify ? channel : undefined })
    const pgClient = yield* Effect.serviceOption(PgClient.PgClient)

    /**
     * Runs a statement on the caller's transaction connection directly when there is one: the transaction
     * already holds it, so the per-statement span, scope and checkout of `@effect/sql` buy nothing there
     * (see BENCHMARKS.md, dispatch). Outside a transaction, the pool.
     */
    const exec = <A extends object>(statement: Statement.Statement<A>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
      Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (tx) => {
        if (tx._tag === "None") return statement
        const [text, params] = statement.compile()
        return tx.value[0].execute(text, params, undefined) as Effect.Effect<ReadonlyArray<A>, SqlError>
      })

    const lookup = (name: string): Effect.Effect<ResolvedTransport, UnknownTransportError> => {
      const found = transports.get(name)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(unknownTransport(name, transports.keys()))
    }
    const wrap = (transport: string, operation: string) => <A, R>(self: Effect.Effect<A, SqlError, R>) =>
      Effect.mapError(self, (error) => transportError(transport, operation, error))
    /** The hot path's errors: a missing table or claim function is a `StorageNotReadyError`, not an outage. */
    const toError = (transport: string, operation: string, error: SqlError) =>
      isStorageUnusable(error) ? storageNotReady(table, error) : transportError(transport, operation, error)

    const setup = runMigrations({
      sql,
      loader: Migrations.loader(table),
      table: `${table}_migrations`,
      onError: (detail, cause) =>
        new TransportError({
          transport: "*",
          operation: "setup",
          message: `Setup of ${table} failed: ${detail}`,
          cause
        })
    })

    const send: TransportShape["send"] = (name, sent) =>
      Effect.flatMap(lookup(name), (transport) => {
        if (sent.length === 0) return Effect.void
        const messages = sent.map(storable)
        const first = messages[0]!
        const statement = messages.length === 1 && first.orderingKey !== undefined
          ? statements.insertOneKeyed(transport.queueName, { ...first, orderingKey: first.orderingKey })
          : messages.some((m) => m.orderingKey !== undefined)
          ? statements.insertKeyed(transport.queueName, messages)
          : messages.length === 1
          ? statements.insertOne(transport.queueName, messages[0]!)
          : statements.insertMany(transport.queueName, messages)
        return exec(statement).pipe(Effect.mapError((error) => toError(name, "send", error)), Effect.asVoid)
      })

    const open = PgSession.open({
      sql,
      table,
      transports,
      statements,
      wakeups: PgWakeups.make(
        notify && Option.isSome(pgClient) ? { config: pgClient.value.config, channel } : undefined
      ),
      ownConnection: Option.isSome(pgClient) &&
        (pgClient.value.config.maxConnections ?? defaultPoolSize) >= minPoolForOwnConnection,
      exec,
      toError
    })

    const withIds = (
      name: string,
      operation: string,
      ids: ReadonlyArray<string>,
      statement: (queue: string, ids: ReadonlyArray<string>) => Effect.Effect<unknown, SqlError>
    ) =>
      Effect.flatMap(
        lookup(name),
        (transport) =>
          ids.length === 0
            ? Effect.void
            : statement(transport.queueName, ids).pipe(wrap(name, operation), Effect.asVoid)
      )

    const transport: TransportShape = {
      names: Array.from(transports.keys()),
      capabilities: (name) => (transports.has(name) ? Option.some(capabilities) : Option.none()),
      lease: (name) =>
        Option.map(Option.fromNullable(transports.get(name)), (t) => Duration.millis(t.redeliverTimeoutMs)),
      failureTransport: (name) => Option.map(Option.fromNullable(transports.get(name)), (t) => t.failureTransport),
      send,
      open,
      ack: (name, ids) => withIds(name, "ack", ids, statements.ack),
      retry: (message, { delay, headers }) =>
        Effect.flatMap(
          lookup(message.transport),
          (transport) =>
            statements.retry(transport.queueName, message.id, Duration.toMillis(delay), Headers.encode(headers)).pipe(
              wrap(message.transport, "retry"),
              Effect.asVoid
            )
        ),
      fail: (message, headers) =>
        Effect.flatMap(lookup(message.transport), (transport) =>
          statements.fail(
            transport.queueName,
            message.id,
            transports.get(transport.failureTransport)!.queueName,
            Headers.encode(headers),
            transport.blocksKeys
          ).pipe(wrap(message.transport, "fail"), Effect.asVoid)),
      start: (message) =>
        Effect.flatMap(lookup(message.transport), (transport) =>
          statements.start(transport.queueName, message.id, transport.redeliverTimeoutMs).pipe(
            wrap(message.transport, "start"),
            Effect.map((rows) =>
              rows.length === 1
            )
          )),
      keepalive: (name, ids) => withIds(name, "keepalive", ids, statements.keepalive),
      release: (name, ids) =>
        withIds(name, "release", ids, (queue, values) =>
          // Released first: a claim between the two then finds the key due and its head free.
          Effect.zipRight(statements.release(queue, values), statements.releaseKeys(queue, values)))
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
            : Effect.map(statements.remove(queueName, valid).pipe(wrap(name, "remove")), (rows) =>
              rows.length)
        }),
      move: (from, id, { headers, to }) =>
        Effect.gen(function*() {
          const source = yield* lookup(from)
          const target = yield* lookup(to)
          if (!isRowId(id)) return false
          const rows = yield* statements.move(source.queueName, id, target.queueName, Headers.encode(headers)).pipe(
            wrap(from, "move")
          )
          if (rows.length === 1) {
            yield* Effect.zipRight(statements.unblock(id), statements.dueWhereMoved(id, target.queueName)).pipe(
              wrap(from, "move")
            )
          }
          return rows.length === 1
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
            ready: row!.ready,
            delayed: row!.delayed,
            inFlight: row!.in_flight,
            failed: row!.failed,
            oldestReadyAgeMs: row!.oldest_ms === null ? null : Math.max(0, Math.round(row!.oldest_ms)),
            blockedKeys: row!.blocked_keys
          }
        })
    }

    if (options.autoSetup === true) yield* setup
    return { ...transport, ...admin }
  })

/**
 * The transport over the `SqlClient` in context (for example `PgClient.layer`), as `Transport` and
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
 * `make` with its options read from `Config` (each field a `Config`, as `PgClient.layerConfig` takes them), e.g.
 * `PgTransport.layerConfig({ table: Config.string("OUTBOX_TABLE").pipe(Config.withDefault("messenger_messages")) })`.
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
 * At most this many queues are read back by `queueNames`: a table used with generated queue names (one per
 * tenant, say) is not listed whole by an operator command.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxListedQueues = 1000

/**
 * The queue names a table holds messages in (at most `maxListedQueues`, in order), whatever transports an
 * application declares: an operator read — the `outbox` binary serves every queue of a deployment with it, without
 * the application's code. One index probe per queue. A table that does not exist yet holds none.
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
      Effect.catchIf(isUndefinedTable, () => Effect.succeed([])),
      Effect.mapError((error) => transportError("*", "queues", error))
    )
  })

/**
 * How many messages of a failure queue failed from each transport — the `originalTransport` their headers record
 * (`null`: headers that record none, or that cannot be read). Counted from the headers text, so corrupt headers never
 * fail it. An operator read (`outbox stats`).
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
    return rows.map((row) => ({ transport: row.origin, count: row.n }))
  })

/** SQLSTATE 42P01: the table does not exist. */
const isUndefinedTable = (error: SqlError): boolean => (error.cause as { code?: unknown } | undefined)?.code === "42P01"
