/**
 * The PostgreSQL transport: one Symfony-compatible table, many queues.
 *
 * @since 0.1.0
 */
import * as Migrator from "@effect/sql/Migrator"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Statement from "@effect/sql/Statement"
import * as Duration from "effect/Duration"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as Exit from "effect/Exit"
import * as FiberRef from "effect/FiberRef"
import type { OutgoingMessage, ReceivedMessage, StoredMessage } from "../domain/Envelope.js"
import * as Headers from "../domain/Headers.js"
import { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import * as Identifier from "../domain/Identifier.js"
import { Transport, type TransportShape } from "../services/Transport.js"
import * as HeldConnection from "./internal/heldConnection.js"
import { listen } from "./internal/pgListener.js"
import { describeError } from "../internal/describeError.js"
import { compareIds } from "../internal/compareIds.js"

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
   * Wake workers at commit with `pg_notify` (default `true`): each send statement notifies once per queue,
   * delivered when the transaction commits — never before the row is visible. Workers listen on a dedicated
   * connection (when a `PgClient` is in context) and still poll as the safety net. Turn it off for very
   * many concurrent producers: PostgreSQL serializes committing transactions that notified.
   */
  readonly notify?: boolean
  /** The notification channel (default: the table name, `.` replaced by `_`). */
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
 * The smallest pool (`PgClient` `maxConnections`) in which a running worker keeps a connection of its own for
 * its claims; in a smaller one its claims take turns in the pool like every other statement.
 *
 * @since 0.1.0
 * @category constants
 */
export const minPoolForOwnConnection = 4

/**
 * The default failure transport name.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultFailureTransport = "failed"

/**
 * The default lease of a claim.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultRedeliverTimeout: Duration.Duration = Duration.seconds(30)

interface ResolvedTransport {
  readonly name: string
  readonly queueName: string
  readonly redeliverTimeoutMs: number
  readonly failureTransport: string
}

interface Row {
  readonly id: string
  readonly message_id: string
  readonly body: string
  readonly headers: string
  readonly created_at: Date
  readonly available_at: Date
  readonly delivered_at?: Date | null
  readonly delivery_count: number
}

/** A row of the claim function: a leased message, or — `id` NULL — a claim's "nothing; next due in `available_ms`". */
interface ClaimedRow {
  readonly id: string | null
  readonly message_id: string
  readonly body: string
  readonly headers: string
  readonly created_ms: number
  readonly available_ms: number | null
  readonly delivery_count: number
}

const toStored = (transport: string) => (row: Row): StoredMessage => ({
  id: row.id,
  transport,
  messageId: row.message_id,
  body: row.body,
  headers: row.headers,
  createdAt: row.created_at,
  availableAt: row.available_at,
  deliveredAt: row.delivered_at ?? null,
  deliveries: row.delivery_count
})

/**
 * The migrations of the transport table, in order. Each is idempotent on its own, so a table made
 * by Symfony's Doctrine transport is adopted and completed rather than replaced.
 *
 * @since 0.1.0
 * @category migrations
 */
export const migrations = (table: string) => {
  const index = (suffix: string) => `${table.replace(/\./g, "_").slice(0, 63 - suffix.length)}${suffix}`
  return Migrator.fromRecord({
    "1_create_messages": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
        id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        message_id uuid NOT NULL,
        body text NOT NULL,
        headers text NOT NULL,
        queue_name varchar(190) NOT NULL,
        created_at timestamptz(3) NOT NULL DEFAULT now(),
        available_at timestamptz(3) NOT NULL,
        delivered_at timestamptz(3) NULL,
        delivery_count integer NOT NULL DEFAULT 0
      )`
      yield* sql`ALTER TABLE ${sql(table)} ADD COLUMN IF NOT EXISTS message_id uuid NOT NULL DEFAULT gen_random_uuid()`
      yield* sql`ALTER TABLE ${sql(table)} ALTER COLUMN message_id DROP DEFAULT`
      yield* sql`ALTER TABLE ${sql(table)} ADD COLUMN IF NOT EXISTS delivery_count integer NOT NULL DEFAULT 0`
      // Symfony's tables use second-precision `timestamp` columns holding UTC: upgrade them to
      // millisecond `timestamptz`, so the database clock and ordering are exact.
      const columns = yield* sql<{ column_name: string; data_type: string; precision: number | null }>`
        SELECT column_name, data_type, datetime_precision AS precision FROM information_schema.columns
        WHERE table_schema = coalesce(${schemaOf(table)}, current_schema()) AND table_name = ${nameOf(table)}
          AND column_name IN ('created_at', 'available_at', 'delivered_at')`
      for (const column of columns) {
        if (column.data_type === "timestamp with time zone" && column.precision === 3) continue
        const using = column.data_type === "timestamp without time zone"
          ? sql`${sql(column.column_name)} AT TIME ZONE 'UTC'`
          : sql`${sql(column.column_name)}`
        yield* sql`ALTER TABLE ${sql(table)} ALTER COLUMN ${sql(column.column_name)} TYPE timestamptz(3) USING ${using}`
      }
      yield* sql`ALTER TABLE ${sql(table)} ALTER COLUMN created_at SET DEFAULT now()`
      yield* sql`CREATE INDEX IF NOT EXISTS ${sql(index("_claim_idx"))}
        ON ${sql(table)} (queue_name, available_at, id)`
      yield* sql`CREATE INDEX IF NOT EXISTS ${sql(index("_message_id_idx"))} ON ${sql(table)} (message_id)`
    }),
    // Room on each page for the claim's and the lease's row versions: they stay on the page (HOT-friendly)
    // instead of spreading the table and its indexes. Applies to new pages; existing ones follow on rewrite.
    "2_claim_fillfactor": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql`ALTER TABLE ${sql(table)} SET (fillfactor = 50)`
    }),
    // The claim as a function: PL/pgSQL keeps the plans of its statements for the session (no parse and
    // plan per claim), acks and claims in one transaction, and may commit it without waiting for the WAL
    // flush (see `claimFunction`).
    "3_claim_function": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* claimFunctionSql(sql, table, false)
    }),
    // A claim that leases nothing also says when the next message is due: an idle worker's poll is one round
    // trip instead of two.
    "4_claim_next_due": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* claimFunctionSql(sql, table, true)
    })
  })
}

/**
 * The name of a table's claim function: `<table>_claim`, in the table's schema.
 *
 * @since 0.1.0
 * @category migrations
 */
export const claimFunction = (table: string): string => `${table}_claim`

/**
 * The claim function of a table (identifiers are validated before they get here): deletes `acked`, then
 * locks the next `batch_size` ready rows of `queue` (skipping rows other claimers hold), leases them and
 * returns them. When it leases nothing, it returns one row whose `id` is NULL and whose `available_ms` is the
 * number of milliseconds until the next message of `queue` becomes claimable (NULL when none waits) — the
 * same answer as `nextDue` (migration 4; migration 3 had no such row). With `relaxed`, the transaction
 * commits without waiting for the WAL flush
 * (`synchronous_commit = off` for this transaction only): a server crash can then undo the claim or the
 * acks — the messages come back and are delivered again — but never lose or invent a message. The worker
 * asks for it only when the claim is its own transaction, never inside a caller's.
 */
const claimFunctionSql = (sql: SqlClient.SqlClient, table: string, answersNextDue: boolean) => {
  const t = sql(table)
  const nextDue = answersNextDue
    ? sql`
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::float8, ${nextDueMs(sql, t, sql`queue`, sql`lease_ms`)}, NULL::int;
  END IF;`
    : sql``
  return sql`CREATE OR REPLACE FUNCTION ${sql(claimFunction(table))}(
  queue text, lease_ms float8, batch_size int, acked bigint[], relaxed boolean
) RETURNS TABLE (
  id text, message_id text, body text, headers text, created_ms float8, available_ms float8, delivery_count int
) LANGUAGE plpgsql AS $claim$
#variable_conflict use_column
BEGIN
  IF relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  IF cardinality(acked) > 0 THEN
    DELETE FROM ${t} AS done WHERE done.id = ANY(acked);
  END IF;
  RETURN QUERY
  WITH next AS MATERIALIZED (
    SELECT ready.id FROM ${t} AS ready
    WHERE ready.queue_name = queue
      AND ready.available_at <= now()
      AND (ready.delivered_at IS NULL OR ready.delivered_at < now() - lease_ms * interval '1 millisecond')
    ORDER BY ready.available_at, ready.id
    LIMIT batch_size
    FOR UPDATE SKIP LOCKED
  )
  UPDATE ${t} AS m SET delivered_at = now(), delivery_count = m.delivery_count + 1
  WHERE m.id = ANY(ARRAY(SELECT next.id FROM next))
  RETURNING m.id::text, m.message_id::text, m.body, m.headers,
    (extract(epoch FROM m.created_at) * 1000)::float8, (extract(epoch FROM m.available_at) * 1000)::float8,
    m.delivery_count;${nextDue}
END
$claim$`
}

/**
 * Milliseconds until the next message of a queue becomes claimable, NULL when none waits: the first unclaimed
 * row — delayed, or already due (it became due after a claim that found nothing: then the answer is "now") —
 * and the earliest lease of the in-flight rows; both through the claim index.
 */
const nextDueMs = (sql: SqlClient.SqlClient, t: Statement.Identifier, queue: Statement.Fragment | string, leaseMs: Statement.Fragment | number) =>
  sql`(extract(epoch FROM least(
    (SELECT available_at FROM ${t} WHERE queue_name = ${queue} AND delivered_at IS NULL ORDER BY available_at LIMIT 1),
    (SELECT min(delivered_at) FROM ${t} WHERE queue_name = ${queue} AND available_at <= now()
      AND delivered_at IS NOT NULL) + ${leaseMs}::float8 * interval '1 millisecond'
  ) - now()) * 1000)::float8`

/**
 * Builds the transport on the `SqlClient` in context. Every statement runs on the caller's
 * connection: inside `sql.withTransaction`, `send` joins the caller's transaction.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<TransportShape, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const table = yield* Identifier.validateTableName(options.table ?? defaultTable, 48)
    const transports = yield* resolveTransports(options.transports ?? { outbox: {} })
    const t = sql(table)
    const notify = options.notify ?? true
    const channel = yield* Identifier.validateTableName(options.channel ?? table.replace(/\./g, "_"), 63)
    /** `pg_notify` once per statement, piggy-backed on it (no extra round trip); delivered at commit. */
    const notifying = (queue: string, statement: Statement.Fragment) =>
      notify
        ? sql`WITH changed AS (${statement} RETURNING 1)
            SELECT count(*)::int AS n, pg_notify(${channel}, ${queue}) FROM changed HAVING count(*) > 0`
        : sql`${statement} RETURNING 1`

    /**
     * Runs a statement on the caller's transaction connection directly when there is one: the transaction
     * already holds it, so the per-statement span, scope and checkout of `@effect/sql` buy nothing there
     * (a dispatch inside `withTransaction` allocates about a third less). Outside a transaction, the pool.
     */
    const exec = <A extends object>(statement: Statement.Statement<A>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
      Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (tx) => {
        if (tx._tag === "None") return statement
        const [text, params] = statement.compile()
        return tx.value[0].execute(text, params, undefined) as Effect.Effect<ReadonlyArray<A>, SqlError>
      })

    const unknownTransport = (name: string): Effect.Effect<never, UnknownTransportError> =>
      Effect.fail(
        new UnknownTransportError({
          transport: name,
          message: `Unknown transport ${JSON.stringify(name)}; known: ${Array.from(transports.keys()).join(", ")}`
        })
      )
    const lookup = (name: string): Effect.Effect<ResolvedTransport, UnknownTransportError> => {
      const found = transports.get(name)
      return found !== undefined ? Effect.succeed(found) : unknownTransport(name)
    }
    const wrap = (transport: string, operation: string) => <A, R>(self: Effect.Effect<A, SqlError, R>) =>
      Effect.mapError(self, (error) => toTransportError(transport, operation, error))

    const setup = Migrator.make({})({ loader: migrations(table), table: `${table}_migrations` }).pipe(
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.catchAllDefect((defect) => Effect.fail(defect)),
      Effect.mapError((error) =>
        new TransportError({
          transport: "*",
          operation: "setup",
          message: `Setup of ${table} failed: ${describeError(error)}`,
          cause: error
        })
      ),
      Effect.map((applied) => applied.map(([id, name]) => `${id}_${name}`))
    )

    const send: TransportShape["send"] = (name, messages) =>
      Effect.gen(function*() {
        if (messages.length === 0) return
        const transport = yield* lookup(name)
        if (messages.length === 1) {
          const m = messages[0]!
          yield* exec(notifying(
            transport.queueName,
            sql`INSERT INTO ${t} (message_id, body, headers, queue_name, created_at, available_at)
              VALUES (${m.messageId}, ${m.body}, ${m.headers}, ${transport.queueName}, now(),
                      now() + ${m.delayMs}::float8 * interval '1 millisecond')`
          )).pipe(wrap(name, "send"))
          return
        }
        yield* exec(notifying(
          transport.queueName,
          sql`INSERT INTO ${t} (message_id, body, headers, queue_name, created_at, available_at)
            SELECT m, b, h, ${transport.queueName}, now(), now() + d * interval '1 millisecond'
            FROM unnest(${column(messages, (m) => m.messageId)}::uuid[], ${column(messages, (m) => m.body)}::text[],
                        ${column(messages, (m) => m.headers)}::text[], ${column(messages, (m) => m.delayMs)}::float8[])
                 WITH ORDINALITY AS x(m, b, h, d, n)
            ORDER BY n`
        )).pipe(wrap(name, "send"))
      })

    /**
     * One statement, the table's claim function (migrations 3 and 4, see `claimFunctionSql`): the handled
     * messages of `acked` are deleted and the next ready ones leased, in one round trip and one commit. Outside a
     * caller's transaction the commit is relaxed.
     */
    const ids = (values: ReadonlyArray<string>) => sql`${values}::bigint[]`
    const fn = sql(claimFunction(table))
    const claimStatement = (queue: string, leaseMs: number, batchSize: number, acked: ReadonlyArray<string>, relaxed: boolean) =>
      sql<ClaimedRow>`SELECT * FROM ${fn}(${queue}, ${leaseMs}, ${batchSize}, ${ids(acked)}, ${relaxed})`
    const claimText = claimStatement("", 0, 0, [], true).compile()[0]
    // A worker's claims run on a connection of its own, held while it is subscribed (see `wakeups` and
    // heldConnection); anyone else's go through the pool. Only when the pool has room for it: with fewer than
    // `minPoolForOwnConnection` connections (or a pool of unknown size) holding one could starve the application
    // or the worker's own handlers.
    const pgClient = yield* Effect.serviceOption(PgClient.PgClient)
    const ownConnections = Option.isSome(pgClient) &&
      (pgClient.value.config.maxConnections ?? defaultPoolSize) >= minPoolForOwnConnection
    /** What a subscribed worker fiber keeps: its connection, and what its last empty claims said of the next due message. */
    interface WorkerSession {
      readonly connection: HeldConnection.HeldConnection
      /**
       * Per transport: the answer of its last empty claim (see `claimFunctionSql`) as a deadline on this process's
       * monotonic clock (`performance.now()`, or null: nothing waits), used once by `nextDue`.
       */
      readonly dueHints: Map<string, number | null>
    }
    const workerSession = FiberRef.unsafeMake<WorkerSession | undefined>(undefined)
    const inTransaction = (fiber: Fiber.RuntimeFiber<unknown, unknown>) =>
      Option.isSome(Context.getOption(fiber.currentContext, SqlClient.TransactionConnection))
    /** The fiber's worker session, unless it runs inside a caller's transaction (then the caller's connection). */
    const sessionOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>) =>
      inTransaction(fiber) ? undefined : fiber.getFiberRef(workerSession)
    const toReceived = (name: string) => (row: ClaimedRow): ReceivedMessage => ({
      id: row.id!,
      transport: name,
      messageId: row.message_id,
      body: row.body,
      headers: row.headers,
      // Epoch milliseconds from SQL: a float is parsed much faster than a timestamp text.
      createdAt: new Date(row.created_ms),
      availableAt: new Date(row.available_ms!),
      deliveries: row.delivery_count
    })
    const claimRows = (name: string, batchSize: number, acked: ReadonlyArray<string>) =>
      Effect.withFiberRuntime<ReadonlyArray<ReceivedMessage>, TransportError | UnknownTransportError>((fiber) => {
        const transport = transports.get(name)
        if (transport === undefined) return unknownTransport(name)
        const session = sessionOf(fiber)
        const sentAt = performance.now()
        const batch = Math.max(1, Math.floor(batchSize))
        const { queueName, redeliverTimeoutMs: leaseMs } = transport
        // Relaxed commit only when the claim is its own transaction.
        const viaSql = () => exec(claimStatement(queueName, leaseMs, batch, acked, !inTransaction(fiber)))
        const rows = session === undefined
          ? viaSql()
          : session.connection.execute<ClaimedRow>(claimText, [queueName, leaseMs, batch, acked, true], viaSql)
        return Effect.mapBoth(rows, {
          onFailure: (error) => toTransportError(name, acked.length === 0 ? "claim" : "ackAndClaim", error),
          onSuccess: (claimed) => {
            // Leased nothing: the one row says when the next message is due.
            const nothing = claimed.length === 1 && claimed[0]!.id === null
            if (nothing) session?.dueHints.set(name, dueAt(sentAt, claimed[0]!.available_ms))
            else session?.dueHints.delete(name)
            return nothing ? [] : claimed.map(toReceived(name)).sort(byAvailability)
          }
        })
      })

    const claim: TransportShape["claim"] = (name, batchSize) => claimRows(name, batchSize, [])
    const ackAndClaim: NonNullable<TransportShape["ackAndClaim"]> = (name, values, batchSize) =>
      claimRows(name, batchSize, values)

    const ack: TransportShape["ack"] = (name, values) =>
      values.length === 0
        ? Effect.void
        : sql`DELETE FROM ${t} WHERE id = ANY(${ids(values)})`.pipe(wrap(name, "ack"), Effect.asVoid)

    const retry: TransportShape["retry"] = (name, id, { delay, headers }) =>
      sql`UPDATE ${t} SET available_at = now() + ${Duration.toMillis(delay)}::float8 * interval '1 millisecond',
            delivered_at = NULL, headers = ${headers}
          WHERE id = ${id}::bigint`.pipe(wrap(name, "retry"), Effect.asVoid)

    const fail: TransportShape["fail"] = (name, id, { headers }) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name).pipe(Effect.orDie)
        const failure = transports.get(transport.failureTransport)!
        yield* sql`UPDATE ${t} SET queue_name = ${failure.queueName}, available_at = now(),
              delivered_at = NULL, headers = ${headers}
            WHERE id = ${id}::bigint`.pipe(wrap(name, "fail"))
      })

    const keepalive: TransportShape["keepalive"] = (name, values) =>
      values.length === 0
        ? Effect.void
        : sql`UPDATE ${t} SET delivered_at = now()
            WHERE id = ANY(${ids(values)}) AND delivered_at IS NOT NULL`.pipe(wrap(name, "keepalive"), Effect.asVoid)

    const release: TransportShape["release"] = (name, values) =>
      values.length === 0 ? Effect.void : Effect.gen(function*() {
        const transport = yield* lookup(name).pipe(Effect.orDie)
        yield* notifying(
          transport.queueName,
          sql`UPDATE ${t} SET delivered_at = NULL, delivery_count = greatest(delivery_count - 1, 0)
            WHERE id = ANY(${ids(values)}) AND delivered_at IS NOT NULL`
        ).pipe(wrap(name, "release"))
      })

    // Its parameters are the transport's own, so it is compiled once per transport.
    const nextDueStatements = new Map(Array.from(transports.values(), (transport) => [
      transport.name,
      sql<{ ms: number | null }>`SELECT ${nextDueMs(sql, t, transport.queueName, transport.redeliverTimeoutMs)} AS ms`.compile()
    ] as const))
    const nextDue: TransportShape["nextDue"] = (name) =>
      Effect.withFiberRuntime((fiber) => {
        const statement = nextDueStatements.get(name)
        if (statement === undefined) return unknownTransport(name)
        const session = sessionOf(fiber)
        if (session?.dueHints.has(name)) {
          const at = session.dueHints.get(name)!
          session.dueHints.delete(name)
          return Effect.succeed(untilDeadline(at))
        }
        const sentAt = performance.now()
        const [text, params] = statement
        const viaSql = () => exec(sql.unsafe<{ ms: number | null }>(text, params))
        const rows = session === undefined ? viaSql() : session.connection.execute<{ ms: number | null }>(text, params, viaSql)
        return Effect.mapBoth(rows, {
          onFailure: (error) => toTransportError(name, "nextDue", error),
          onSuccess: ([row]) => untilDeadline(dueAt(sentAt, row?.ms))
        })
      })

    // Wake-ups: one LISTEN connection per transport instance, shared by its subscribers, started with the first.
    // The listener's callback resumes a waiting subscriber directly: no fiber, queue or race on the latency path.
    interface Subscription {
      readonly queues: ReadonlySet<string>
      /** A hint arrived while nobody waited. */
      pending: boolean
      /** Resumes the subscriber waiting now. */
      waiter: (() => void) | undefined
    }
    const subscriptions = new Set<Subscription>()
    const onNotify = (payload: string) => {
      for (const s of subscriptions) {
        if (payload !== "*" && !s.queues.has(payload)) continue
        if (s.waiter !== undefined) s.waiter()
        else s.pending = true
      }
    }
    let listenerScope: Scope.CloseableScope | undefined
    const startListener = Effect.suspend(() => {
      if (subscriptions.size > 1 || !notify || Option.isNone(pgClient)) return Effect.void
      return Effect.gen(function*() {
        const scope = yield* Scope.make()
        listenerScope = scope
        yield* listen({ config: pgClient.value.config, channel, onNotify }).pipe(Scope.extend(scope))
      })
    })
    const stopListener = Effect.suspend(() => {
      if (subscriptions.size > 0 || listenerScope === undefined) return Effect.void
      const scope = listenerScope
      listenerScope = undefined
      return Scope.close(scope, Exit.void)
    })
    const wakeups: TransportShape["wakeups"] = (names) =>
      Effect.gen(function*() {
        const queues = new Set(names.flatMap((name) => {
          const queue = transports.get(name)?.queueName
          return queue === undefined ? [] : [queue]
        }))
        const subscription: Subscription = { queues, pending: false, waiter: undefined }
        yield* Effect.acquireRelease(
          Effect.suspend(() => {
            subscriptions.add(subscription)
            return startListener
          }),
          () =>
            Effect.suspend(() => {
              subscriptions.delete(subscription)
              return stopListener
            })
        )
        if (ownConnections) {
          // From here on, this fiber's claims (and those of fibers it forks) use a connection of their own.
          const connection = HeldConnection.make(sql)
          yield* Effect.addFinalizer(() => connection.release)
          yield* Effect.locallyScoped(workerSession, { connection, dueHints: new Map() })
        }
        return (maxWait: Duration.Duration) =>
          Effect.async<void>((resume) => {
            if (subscription.pending) {
              subscription.pending = false
              resume(Effect.void)
              return
            }
            const done = () => {
              clearTimeout(timer)
              subscription.waiter = undefined
              subscription.pending = false
              resume(Effect.void)
            }
            const timer = setTimeout(done, Math.min(maxTimeout, Math.max(0, Duration.toMillis(maxWait))))
            subscription.waiter = done
            return Effect.sync(() => {
              clearTimeout(timer)
              subscription.waiter = undefined
            })
          })
      })

    const columns = sql.literal(
      "id::text AS id, message_id::text AS message_id, body, headers, created_at, available_at, delivered_at, delivery_count"
    )

    const list: TransportShape["list"] = (name, { max, type }) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name)
        const limit = Math.max(0, Math.floor(max))
        if (type === undefined) {
          const rows = yield* sql<Row>`SELECT ${columns} FROM ${t} WHERE queue_name = ${transport.queueName}
            ORDER BY id LIMIT ${limit}`.pipe(wrap(name, "list"))
          return rows.map(toStored(name))
        }
        // Headers are text that may be corrupt, so the type is matched here, page by page, not in SQL.
        const found: Array<StoredMessage> = []
        let after = "0"
        while (found.length < limit) {
          const page = yield* sql<Row>`SELECT ${columns} FROM ${t}
            WHERE queue_name = ${transport.queueName} AND id > ${after}::bigint ORDER BY id LIMIT 1000`.pipe(
            wrap(name, "list")
          )
          for (const row of page) {
            if (found.length < limit && Headers.typeOf(row.headers) === type) found.push(toStored(name)(row))
          }
          if (page.length < 1000) break
          after = page[page.length - 1]!.id
        }
        return found
      })

    const find: TransportShape["find"] = (name, id) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name)
        if (!/^\d{1,19}$/.test(id)) return Option.none()
        const rows = yield* sql<Row>`SELECT ${columns} FROM ${t}
          WHERE id = ${id}::bigint AND queue_name = ${transport.queueName}`.pipe(wrap(name, "find"))
        return Option.map(Option.fromNullable(rows[0]), toStored(name))
      })

    const remove: TransportShape["remove"] = (name, values) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name)
        const valid = values.filter((id) => /^\d{1,19}$/.test(id))
        if (valid.length === 0) return 0
        const rows = yield* sql`DELETE FROM ${t} WHERE id = ANY(${ids(valid)}) AND queue_name = ${transport.queueName}
          RETURNING id`.pipe(wrap(name, "remove"))
        return rows.length
      })

    const move: TransportShape["move"] = (from, id, { headers, to }) =>
      Effect.gen(function*() {
        const source = yield* lookup(from)
        const target = yield* lookup(to)
        if (!/^\d{1,19}$/.test(id)) return false
        const rows = yield* notifying(
          target.queueName,
          sql`UPDATE ${t} SET queue_name = ${target.queueName}, available_at = now(),
            delivered_at = NULL, delivery_count = 0, headers = ${headers}
          WHERE id = ${id}::bigint AND queue_name = ${source.queueName}`
        ).pipe(wrap(from, "move"))
        return rows.length === 1
      })

    const stats: TransportShape["stats"] = (name) =>
      Effect.gen(function*() {
        const transport = yield* lookup(name)
        const failure = transports.get(transport.failureTransport)!
        const lease = sql`now() - ${transport.redeliverTimeoutMs}::float8 * interval '1 millisecond'`
        const [row] = yield* sql<{
          ready: number
          delayed: number
          in_flight: number
          failed: number
          oldest_ms: number | null
        }>`SELECT
            count(*) FILTER (WHERE queue_name = ${transport.queueName} AND available_at <= now()
              AND (delivered_at IS NULL OR delivered_at < ${lease}))::int AS ready,
            count(*) FILTER (WHERE queue_name = ${transport.queueName} AND available_at > now()
              AND delivered_at IS NULL)::int AS delayed,
            count(*) FILTER (WHERE queue_name = ${transport.queueName} AND delivered_at >= ${lease})::int AS in_flight,
            count(*) FILTER (WHERE queue_name = ${failure.queueName})::int AS failed,
            (extract(epoch FROM now() - min(available_at) FILTER (WHERE queue_name = ${transport.queueName}
              AND available_at <= now() AND (delivered_at IS NULL OR delivered_at < ${lease}))) * 1000)::float8 AS oldest_ms
          FROM ${t} WHERE queue_name IN (${transport.queueName}, ${failure.queueName})`.pipe(wrap(name, "stats"))
        return {
          transport: name,
          queue: transport.queueName,
          ready: row!.ready,
          delayed: row!.delayed,
          inFlight: row!.in_flight,
          failed: row!.failed,
          oldestReadyAgeMs: row!.oldest_ms === null ? null : Math.max(0, Math.round(row!.oldest_ms))
        }
      })

    if (options.autoSetup === true) yield* setup

    return {
      names: Array.from(transports.keys()),
      failureTransport: (name) => Option.map(Option.fromNullable(transports.get(name)), (t) => t.failureTransport),
      lease: (name) => {
        const found = transports.get(name)
        return found === undefined ? Option.none() : Option.some(Duration.millis(found.redeliverTimeoutMs))
      },
      setup,
      send,
      claim,
      ackAndClaim,
      ack,
      retry,
      fail,
      keepalive,
      release,
      list,
      find,
      remove,
      move,
      stats,
      nextDue,
      wakeups
    }
  })

/**
 * The transport layer over the `SqlClient` in context (for example `PgClient.layer`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<Transport, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Layer.effect(Transport, make(options))

const resolveTransports = (
  input: Readonly<Record<string, TransportOptions>>
): Effect.Effect<Map<string, ResolvedTransport>, OutboxConfigError> =>
  Effect.gen(function*() {
    const entries = Object.entries(input)
    if (entries.length === 0) {
      return yield* new OutboxConfigError({ message: "At least one transport must be configured" })
    }
    const resolved = new Map<string, ResolvedTransport>()
    const add = (name: string, o: TransportOptions, failureTransport: string) =>
      Effect.gen(function*() {
        yield* Identifier.validateQueueName(name)
        const queueName = yield* Identifier.validateQueueName(o.queueName ?? name)
        const timeout = Duration.decodeUnknown(o.redeliverTimeout ?? defaultRedeliverTimeout)
        if (timeout._tag === "None" || !(Duration.toMillis(timeout.value) > 0) || !Duration.isFinite(timeout.value)) {
          return yield* new OutboxConfigError({
            message: `Transport ${name}: redeliverTimeout must be a positive, finite duration`
          })
        }
        resolved.set(name, { name, queueName, redeliverTimeoutMs: Duration.toMillis(timeout.value), failureTransport })
      })
    // A failure transport keeps its own failures (a failed message is never discarded).
    const failureOf = (name: string, o: TransportOptions) =>
      o.failureTransport ?? (failureNames.has(name) ? name : defaultFailureTransport)
    const failureNames = new Set(entries.map(([, o]) => o.failureTransport ?? defaultFailureTransport))
    for (const [name, o] of entries) yield* add(name, o, failureOf(name, o))
    for (const name of failureNames) {
      if (!resolved.has(name)) yield* add(name, {}, name)
    }
    const queues = new Map<string, string>()
    for (const t of resolved.values()) {
      const other = queues.get(t.queueName)
      if (other !== undefined) {
        return yield* new OutboxConfigError({
          message: `Transports ${other} and ${t.name} use the same queue ${t.queueName}`
        })
      }
      queues.set(t.queueName, t.name)
    }
    return resolved
  })

/**
 * The server's "due in `ms`" as a deadline on this process's monotonic clock, counted from when the statement was
 * sent: the answer is computed when the statement starts, and its response can take milliseconds to arrive (a
 * machine woken from a long idle answers slowly), so counting from its arrival would wake the worker late. Counted
 * from the send, the worker wakes at the due time or a little before (then its claim finds nothing and says how long
 * is left), never after.
 */
const dueAt = (sentAt: number, ms: number | null | undefined): number | null =>
  ms === null || ms === undefined ? null : sentAt + ms

/** Milliseconds from now to `deadline` (none when null). */
const untilDeadline = (deadline: number | null): Option.Option<number> =>
  deadline === null ? Option.none() : Option.some(Math.max(0, deadline - performance.now()))

/** The longest `setTimeout` delay (about 24.8 days). */
const maxTimeout = 2 ** 31 - 1

const schemaOf = (table: string): string | null => (table.includes(".") ? table.split(".")[0]! : null)
const nameOf = (table: string): string => (table.includes(".") ? table.split(".")[1]! : table)

const column = <A>(messages: ReadonlyArray<OutgoingMessage>, f: (m: OutgoingMessage) => A): Array<A> =>
  messages.map(f)

const byAvailability = (a: ReceivedMessage, b: ReceivedMessage): number => {
  const d = a.availableAt.getTime() - b.availableAt.getTime()
  if (d !== 0) return d
  return compareIds(a.id, b.id)
}


const toTransportError = (transport: string, operation: string, error: SqlError): TransportError =>
  new TransportError({ transport, operation, message: describeError(error), cause: error })
