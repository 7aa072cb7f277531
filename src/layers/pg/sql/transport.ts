/**
 * Every statement of the PostgreSQL transport, in one place: built from the `SqlClient` (without transforms)
 * and the validated table. The layer (`PgTransport`) only runs them.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type * as Statement from "@effect/sql/Statement"
import { claimFunction, keyStates, quote, waitingWorkers } from "./identifiers.js"

/** A row as the operator statements read it; times in epoch milliseconds (see `dateOf`). @internal */
export interface StoredRow {
  readonly id: string
  readonly message_id: string
  readonly body: string
  readonly headers: string
  readonly created_ms: number
  readonly available_ms: number
  readonly delivered_ms: number | null
  readonly delivery_count: number
  readonly ordering_key: string | null
  readonly blocks_key: boolean
}

/** The largest time a `Date` holds. */
const maxDateMs = 8.64e15

/**
 * A time read as epoch milliseconds: an `infinity` stored by hand becomes the largest (or smallest) `Date`, never
 * an invalid one that throws when formatted.
 *
 * @internal
 */
export const dateOf = (ms: number): Date => new Date(Math.min(maxDateMs, Math.max(-maxDateMs, ms)))

/** A row of the claim function: a leased message, or — `id` NULL — "nothing; next due in `available_ms`". @internal */
export interface ClaimedRow {
  readonly id: string | null
  readonly message_id: string
  readonly body: string
  readonly headers: string
  readonly created_ms: number
  readonly available_ms: number | null
  readonly delivery_count: number
  readonly ordering_key: string | null
  /** The deliveries charged to the message (migration 13). */
  readonly crash_count: number
  /** Its previous lease ended with no outcome (migration 13). */
  readonly redelivered: boolean
}

/** One message to insert. @internal */
export interface Insert {
  readonly messageId: string
  readonly body: string
  readonly headers: string
  readonly delayMs: number
  readonly orderingKey?: string
}

/** The counts of `stats`. @internal */
export interface StatsRow {
  readonly ready: number
  readonly delayed: number
  readonly in_flight: number
  readonly failed: number
  readonly oldest_ms: number | null
  readonly blocked_keys: number
}

/**
 * The claim call as text, as the worker's session sends it on its own connection: $1 queue, $2 lease in ms,
 * $3 batch size, $4 the ids to delete first (bigint[]), $5 relaxed commit (the claim is its own transaction),
 * $6 the floor of the unkeyed scan (epoch ms, NULL: from the start). The function is migration 13's
 * (`claimFunctionV13.ts`; the arguments are migration 9's).
 *
 * @internal
 */
export const claimCall = (table: string): string =>
  `SELECT * FROM ${quote(claimFunction(table))}($1, $2, $3, $4::bigint[], $5, $6::float8)`

/** The statements of one table. @internal */
export const make = (sql: SqlClient.SqlClient, table: string, options: { readonly channel: string | undefined }) => {
  const t = sql(table)
  const keys = sql(keyStates(table))
  const waiting = sql(waitingWorkers(table))
  const ids = (values: ReadonlyArray<string>) => sql`${values}::bigint[]`
  const columns = sql.literal(
    "id::text AS id, message_id::text AS message_id, body, headers, " +
      "(extract(epoch FROM created_at) * 1000)::float8 AS created_ms, " +
      "(extract(epoch FROM available_at) * 1000)::float8 AS available_ms, " +
      "(extract(epoch FROM delivered_at) * 1000)::float8 AS delivered_ms, delivery_count, ordering_key, " +
      // The key table has no `id` column: `id` is the row's.
      `EXISTS (SELECT 1 FROM ${quote(keyStates(table))} WHERE blocked_by = id) AS blocks_key`
  )
  /** Makes the keys of the rows a statement returned (`ordering_key`) due now: their next message may go. */
  const keysDue = (queue: string, statement: Statement.Fragment) =>
    sql`WITH changed AS (${statement} RETURNING ordering_key)
      UPDATE ${keys} SET due_at = now()
      WHERE queue_name = ${queue} AND ordering_key IN (SELECT ordering_key FROM changed WHERE ordering_key IS NOT NULL)`
  /**
   * `pg_notify` once per statement, piggy-backed on it (no extra round trip), and only while a worker waits on the
   * queue: a notifying transaction's commit takes a lock every notifying commit of the cluster waits for, and a
   * worker that is not waiting claims again without a hint. Evaluated once per statement (an init plan). For the
   * operator's and the worker's UPDATEs that make rows ready; INSERTs wake workers through the table's trigger
   * (migration 12), whose plans, unlike this statement's, are not made again at every send.
   */
  const wake = (queue: string, channel: string) =>
    sql`CASE WHEN EXISTS (SELECT 1 FROM ${waiting} WHERE queue_name = ${queue} AND expires_at > now())
      THEN pg_notify(${channel}, ${queue}) END`
  const notifying = (queue: string, statement: Statement.Fragment) =>
    options.channel !== undefined
      ? sql`WITH changed AS (${statement} RETURNING 1)
          SELECT count(*)::int AS n, ${wake(queue, options.channel)} FROM changed HAVING count(*) > 0`
      : sql`${statement} RETURNING 1`
  const lease = (leaseMs: number) => sql`now() - ${leaseMs}::float8 * interval '1 millisecond'`

  return {
    insertOne: (queue: string, m: Insert) =>
      sql`INSERT INTO ${t} (message_id, body, headers, queue_name, created_at, available_at)
        VALUES (${m.messageId}, ${m.body}, ${m.headers}, ${queue}, now(),
                now() + ${m.delayMs}::float8 * interval '1 millisecond')`,
    insertMany: (queue: string, messages: ReadonlyArray<Insert>) =>
      sql`INSERT INTO ${t} (message_id, body, headers, queue_name, created_at, available_at)
        SELECT m, b, h, ${queue}, now(), now() + d * interval '1 millisecond'
        FROM unnest(${messages.map((m) => m.messageId)}::uuid[], ${messages.map((m) => m.body)}::text[],
                    ${messages.map((m) => m.headers)}::text[], ${messages.map((m) => m.delayMs)}::float8[])
             WITH ORDINALITY AS x(m, b, h, d, n)
        ORDER BY n`,
    /**
     * One message with an ordering key: a plain INSERT, whose row trigger (migration 14) takes the key's next place
     * under the lock of its sequence row and adds the key's row if missing — with the table owner's rights, so the
     * producer needs INSERT on the table only.
     */
    insertOneKeyed: (queue: string, m: Insert & { readonly orderingKey: string }) =>
      sql`INSERT INTO ${t} (message_id, body, headers, queue_name, created_at, available_at, ordering_key)
        VALUES (${m.messageId}, ${m.body}, ${m.headers}, ${queue}, now(),
                now() + ${m.delayMs}::float8 * interval '1 millisecond', ${m.orderingKey})`,
    /**
     * Messages with ordering keys (and any without, in the same statement), each keyed row placed by the row trigger
     * (migration 14) as it is inserted. The keyed rows go in key order (a key's in the order sent), so two producers
     * take the locks of their keys' sequence rows in the same order and never wait on each other in a cycle; they
     * fill the keyed rows' slots of the batch, so unkeyed rows keep their place (their ids follow the order sent).
     */
    insertKeyed: (queue: string, messages: ReadonlyArray<Insert>) =>
      sql`WITH input AS (
          SELECT m, b, h, d, k, n FROM unnest(${messages.map((m) => m.messageId)}::uuid[],
            ${messages.map((m) => m.body)}::text[], ${messages.map((m) => m.headers)}::text[],
            ${messages.map((m) => m.delayMs)}::float8[], ${messages.map((m) => m.orderingKey ?? null)}::text[])
            WITH ORDINALITY AS x(m, b, h, d, k, n)
        ), slots AS (
          SELECT n AS slot, row_number() OVER (ORDER BY n) AS r FROM input WHERE k IS NOT NULL
        ), keyed AS (
          SELECT m, b, h, d, k, row_number() OVER (ORDER BY k, n) AS r FROM input WHERE k IS NOT NULL
        )
        INSERT INTO ${t} (message_id, body, headers, queue_name, created_at, available_at, ordering_key)
        SELECT x.m, x.b, x.h, ${queue}, now(), now() + x.d * interval '1 millisecond', x.k
        FROM (
          SELECT m, b, h, d, k, n AS slot FROM input WHERE k IS NULL
          UNION ALL
          SELECT keyed.m, keyed.b, keyed.h, keyed.d, keyed.k, slots.slot FROM keyed JOIN slots USING (r)
        ) AS x
        ORDER BY x.slot`,
    claim: (
      queue: string,
      leaseMs: number,
      batchSize: number,
      acked: ReadonlyArray<string>,
      relaxed: boolean,
      floorMs: number | null
    ) =>
      sql<ClaimedRow>`SELECT * FROM ${sql(claimFunction(table))}(${queue}, ${leaseMs}, ${batchSize}, ${
        ids(acked)
      }, ${relaxed}, ${floorMs}::float8)`,
    ack: (queue: string, values: ReadonlyArray<string>) =>
      keysDue(queue, sql`DELETE FROM ${t} WHERE id = ANY(${ids(values)}) AND queue_name = ${queue}`),
    retry: (queue: string, id: string, delayMs: number, headers: string) =>
      sql`WITH changed AS (
            UPDATE ${t} SET available_at = now() + ${delayMs}::float8 * interval '1 millisecond',
              delivered_at = NULL, headers = ${headers}
            WHERE id = ${id}::bigint AND queue_name = ${queue}
            RETURNING ordering_key, available_at)
          UPDATE ${keys} AS k SET due_at = changed.available_at FROM changed
          WHERE k.queue_name = ${queue} AND k.ordering_key = changed.ordering_key`,
    /** With `blocksKey`, a keyed message's key stays blocked while it is in the failure queue. */
    fail: (queue: string, id: string, failureQueue: string, headers: string, blocksKey: boolean) =>
      sql`WITH changed AS (
            UPDATE ${t} SET queue_name = ${failureQueue}, available_at = now(), delivered_at = NULL, headers = ${headers}
            WHERE id = ${id}::bigint AND queue_name = ${queue}
            RETURNING id, ordering_key)
          UPDATE ${keys} AS k SET
            blocked_by = CASE WHEN ${blocksKey} THEN changed.id ELSE k.blocked_by END, due_at = now()
          FROM changed WHERE k.queue_name = ${queue} AND k.ordering_key = changed.ordering_key`,
    /**
     * The handler of a redelivered message starts (`lease_state` 2, see `claimFunctionV13.ts`), while its lease is
     * the caller's: claimed as a redelivery, not started yet, not run out. Returns the row when it was marked.
     */
    start: (queue: string, id: string, leaseMs: number) =>
      sql`UPDATE ${t} SET lease_state = 2
        WHERE id = ${id}::bigint AND queue_name = ${queue} AND lease_state = 1
          AND delivered_at >= ${lease(leaseMs)} AND delivered_at <> 'infinity'
        RETURNING 1`,
    keepalive: (queue: string, values: ReadonlyArray<string>) =>
      sql`UPDATE ${t} SET delivered_at = now()
          WHERE id = ANY(${ids(values)}) AND queue_name = ${queue} AND delivered_at IS NOT NULL`,
    release: (queue: string, values: ReadonlyArray<string>) =>
      notifying(
        queue,
        sql`UPDATE ${t} SET delivered_at = NULL, delivery_count = greatest(delivery_count - 1, 0)
          WHERE id = ANY(${ids(values)}) AND queue_name = ${queue} AND delivered_at IS NOT NULL`
      ),
    /** The keys of released rows are due at once (their heads are back). */
    releaseKeys: (queue: string, values: ReadonlyArray<string>) =>
      sql`UPDATE ${keys} SET due_at = now() WHERE queue_name = ${queue} AND ordering_key IN (
        SELECT ordering_key FROM ${t} WHERE id = ANY(${ids(values)}) AND ordering_key IS NOT NULL)`,
    /**
     * `worker` waits on `queues` for `ms` (its announcement renewed if it has one), listening on the channel the
     * table's trigger notifies it on; announcements that lapsed a minute ago (killed workers') go. Committed relaxed: an announcement lost in a server crash costs a poll.
     * Answers the transactions that may have been in progress when it ran (`open`): those of its snapshot, and those
     * that took their ids between its snapshot and its own (a snapshot lists none at or above its `xmax`). A
     * producer's statement among them may have written before it and not notified.
     */
    announce: (queues: ReadonlyArray<string>, worker: string, ms: number) =>
      sql<{ readonly open: ReadonlyArray<string> | null }>`WITH relaxed AS (
            SELECT set_config('synchronous_commit', 'off', true)),
          lapsed AS (DELETE FROM ${waiting}
            WHERE queue_name = ANY(${queues}::text[]) AND expires_at < now() - interval '1 minute'),
          announced AS (INSERT INTO ${waiting} (queue_name, worker, expires_at, channel)
            SELECT q, ${worker}::uuid, now() + ${ms}::float8 * interval '1 millisecond', ${options.channel ?? null}
            FROM unnest(${queues}::text[]) AS q, relaxed
            ON CONFLICT (queue_name, worker) DO UPDATE SET expires_at = EXCLUDED.expires_at, channel = EXCLUDED.channel
            RETURNING 1)
        SELECT ARRAY(
            SELECT x::text FROM pg_snapshot_xip(s) AS x
            UNION ALL
            SELECT g::text FROM generate_series(pg_snapshot_xmax(s)::text::bigint,
              least(pg_current_xact_id()::text::bigint, pg_snapshot_xmax(s)::text::bigint + 1000) - 1) AS g
          ) AS open
        FROM pg_current_snapshot() AS s, (SELECT count(*) FROM announced) AS done`,
    /** Which of these transactions (`xid8` as text) are still in progress. */
    stillOpen: (xids: ReadonlyArray<string>) =>
      sql<{ readonly xid: string }>`SELECT x AS xid FROM unnest(${xids}::text[]) AS x
        WHERE pg_xact_status(x::xid8) = 'in progress'`,
    /** `worker` no longer waits (relaxed, as `announce`). */
    retract: (worker: string) =>
      sql`DELETE FROM ${waiting} USING (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed
        WHERE worker = ${worker}::uuid`,
    /** Keyset paging; `${t}.id` is the bigint column (a bare `id` would be the text column of `columns`). */
    listPage: (queue: string, after: string, size: number) =>
      sql<StoredRow>`SELECT ${columns} FROM ${t}
        WHERE queue_name = ${queue} AND id > ${after}::bigint ORDER BY ${t}.id LIMIT ${size}`,
    find: (queue: string, id: string) =>
      sql<StoredRow>`SELECT ${columns} FROM ${t} WHERE id = ${id}::bigint AND queue_name = ${queue}`,
    remove: (queue: string, values: ReadonlyArray<string>) =>
      sql`WITH removed AS (DELETE FROM ${t} WHERE id = ANY(${ids(values)}) AND queue_name = ${queue} RETURNING id),
          unblocked AS (UPDATE ${keys} SET blocked_by = NULL, due_at = now()
            WHERE blocked_by IN (SELECT id FROM removed))
        SELECT id FROM removed`,
    move: (fromQueue: string, id: string, toQueue: string, headers: string) =>
      notifying(
        toQueue,
        sql`UPDATE ${t} SET queue_name = ${toQueue}, available_at = now(),
          delivered_at = NULL, delivery_count = 0, crash_count = 0, lease_state = 0, headers = ${headers}
        WHERE id = ${id}::bigint AND queue_name = ${fromQueue}`
      ),
    /** A moved message no longer blocks its key (run before `dueWhereMoved`). */
    unblock: (id: string) => sql`UPDATE ${keys} SET blocked_by = NULL, due_at = now() WHERE blocked_by = ${id}::bigint`,
    /** A moved keyed message's key is due where it went (its row added if missing). */
    dueWhereMoved: (id: string, toQueue: string) =>
      sql`INSERT INTO ${keys} (queue_name, ordering_key, due_at)
        SELECT ${toQueue}, ordering_key, now() FROM ${t} WHERE id = ${id}::bigint AND ordering_key IS NOT NULL
        ON CONFLICT (queue_name, ordering_key) DO UPDATE SET due_at = now()`,
    stats: (queue: string, failureQueue: string, leaseMs: number) =>
      // As the claim counts them (migration 5): a lease until 'infinity' is over; epochs are subtracted, not
      // timestamps, so an infinite `available_at` gives an infinite age instead of an error.
      sql<StatsRow>`SELECT
          count(*) FILTER (WHERE queue_name = ${queue} AND available_at <= now()
            AND (delivered_at IS NULL OR delivered_at < ${lease(leaseMs)} OR delivered_at = 'infinity'))::int AS ready,
          count(*) FILTER (WHERE queue_name = ${queue} AND available_at > now()
            AND delivered_at IS NULL)::int AS delayed,
          count(*) FILTER (WHERE queue_name = ${queue} AND delivered_at >= ${lease(leaseMs)}
            AND delivered_at <> 'infinity')::int AS in_flight,
          count(*) FILTER (WHERE queue_name = ${failureQueue})::int AS failed,
          ((extract(epoch FROM now()) - extract(epoch FROM min(available_at) FILTER (WHERE queue_name = ${queue}
            AND available_at <= now()
            AND (delivered_at IS NULL OR delivered_at < ${
        lease(leaseMs)
      } OR delivered_at = 'infinity')))) * 1000)::float8
            AS oldest_ms,
          (SELECT count(*) FROM ${keys} WHERE queue_name = ${queue} AND blocked_by IS NOT NULL)::int AS blocked_keys
        FROM ${t} WHERE queue_name IN (${queue}, ${failureQueue})`
  }
}

/**
 * The queue names a table holds, each once and in order, at most `limit`: a skip scan of the unkeyed and the ordering
 * indexes (migration 15 left no index of every row), one probe of each per queue, so the number of rows does not
 * matter.
 *
 * @internal
 */
export const queueNames = (sql: SqlClient.SqlClient, table: string, limit: number) => {
  const t = sql(table)
  const after = (bound: Statement.Fragment | undefined) =>
    sql`least(
      (SELECT queue_name FROM ${t} WHERE ordering_key IS NULL ${
      bound === undefined ? sql`` : sql`AND queue_name > ${bound}`
    } ORDER BY queue_name LIMIT 1),
      (SELECT queue_name FROM ${t} WHERE ordering_key IS NOT NULL ${
      bound === undefined ? sql`` : sql`AND queue_name > ${bound}`
    } ORDER BY queue_name LIMIT 1))`
  return sql<{ readonly queue_name: string }>`WITH RECURSIVE queues AS (
      SELECT ${after(undefined)} AS queue_name
      UNION ALL
      SELECT ${after(sql`queues.queue_name`)} FROM queues WHERE queues.queue_name IS NOT NULL)
    SELECT queue_name FROM queues WHERE queue_name IS NOT NULL LIMIT ${limit}`
}

/**
 * The part of a failed message's headers text before its `custom` record, which `Headers.encode` writes last: a
 * custom header named `originalTransport` is never read as the transport the message failed from.
 */
const beforeCustom = String.raw`"custom":\{.*$`

/**
 * The transport a failed message came from, as `Headers.encode` writes it at the top level of the headers; inside
 * any JSON string the quotes are escaped, so only the key itself matches. Transport names are
 * `[A-Za-z0-9_.:-]{1,190}` (`Identifier.validateQueueName`): nothing to unescape.
 */
const originalTransport = String.raw`"originalTransport":"([A-Za-z0-9_.:-]{1,190})"`

/**
 * How many messages of a failure queue came from each transport (`origin` NULL: headers that record none, or
 * that are not the JSON `Headers.encode` writes), read from the headers text — corrupt headers never fail the count.
 *
 * @internal
 */
export const failedFrom = (sql: SqlClient.SqlClient, table: string, failureQueue: string) =>
  sql<{ readonly origin: string | null; readonly n: number }>`
    SELECT substring(regexp_replace(headers, ${beforeCustom}, '') FROM ${originalTransport}) AS origin, count(*)::int AS n
    FROM ${sql(table)} WHERE queue_name = ${failureQueue} GROUP BY 1 ORDER BY 1`

/** The statements of one table. @internal */
export type Statements = ReturnType<typeof make>
