/**
 * Every statement of the MySQL transport, in one place: built from the `SqlClient` (without transforms) and the
 * validated table, except the claim's, which the session sends as text (several statements in one round trip).
 * Times are the server's `UTC_TIMESTAMP(6)` — UTC, as Symfony stores them — and are read back as epoch
 * microseconds (`TIMESTAMPDIFF`), never as `DATETIME`s the driver would convert in the client's time zone.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { quote } from "./identifiers.js"

/** A stored row; times in epoch microseconds. @internal */
export interface StoredRow {
  readonly id: string
  readonly message_id: string
  readonly body: string
  readonly headers: string
  readonly created_us: number
  readonly available_us: number
  readonly delivered_us: number | null
  readonly delivery_count: number
  /** The crashes charged to the message before this claim (migration 2). */
  readonly crash_count: number
  /** 0 a first delivery, 1 a redelivery, 2 a redelivery whose handler started (migration 2). */
  readonly lease_state: number
}

/** One message to insert. @internal */
export interface Insert {
  readonly messageId: string
  readonly body: string
  readonly headers: string
  readonly delayMs: number
}

/** The counts of `stats` (sums arrive as decimal text). @internal */
export interface StatsRow {
  readonly ready: number | string | null
  readonly delayed: number | string | null
  readonly in_flight: number | string | null
  readonly failed: number | string | null
  readonly oldest_us: number | string | null
}

/** The largest `delivery_count` (an `INT`). @internal */
export const maxDeliveryCount = 2_147_483_647

/** The largest time a `Date` holds, in milliseconds. */
const maxDateMs = 8.64e15

/** A time read as epoch microseconds, as a `Date` (clamped: never an invalid one). @internal */
export const dateOf = (us: number | string): Date =>
  new Date(Math.min(maxDateMs, Math.max(-maxDateMs, Number(us) / 1000)))

/** A column as epoch microseconds (independent of the session's time zone). */
const epochUs = (column: string) => `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${column})`

/** The columns a claim and the operator reads return. @internal */
export const columns = `CAST(id AS CHAR) AS id, message_id, body, headers, ${epochUs("created_at")} AS created_us, ` +
  `${epochUs("available_at")} AS available_us, ${epochUs("delivered_at")} AS delivered_us, delivery_count, ` +
  "crash_count, lease_state"

/** Microseconds of a delay or a lease, as an integer the server takes in `INTERVAL … MICROSECOND`. */
const micros = (ms: number): number => Math.max(0, Math.round(ms * 1000))

/**
 * Ids as bound values: numbers while they are exact (every id an `AUTO_INCREMENT` makes in practice), text beyond.
 *
 * @internal
 */
export const idValues = (ids: ReadonlyArray<string>): Array<number | string> =>
  ids.map((id) => {
    const n = Number(id)
    return Number.isSafeInteger(n) ? n : id
  })

/**
 * The claim, as the texts of its two round trips on one connection. The first begins a READ COMMITTED transaction
 * (a locking read under REPEATABLE READ would also lock the gaps of the index it scans, and hold up the producers
 * inserting there), deletes the handled messages (`acks`) and locks the next ready ones, passing over those another
 * claimer holds. The second leases what it locked (`lease`) — or, when it locked none, answers when the next
 * message is due (`nextDue`) — and commits.
 *
 * The scan follows the claim index, Symfony's `(queue_name, available_at, delivered_at, id)`, in its order, so that
 * it stops after `limit` rows: a sort would lock every ready row before keeping `limit` of them, and concurrent
 * claimers would pass over rows nobody leases. (The columns are qualified: `id` alone is the text column of the
 * result.) Rows due at the same microsecond come by `delivered_at` before `id`; the session sorts what it leased
 * by availability and id.
 *
 * @internal
 */
export const claimTexts = (table: string) => {
  const t = quote(table)
  const begin = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION;"
  const select = (limit: number) =>
    `SELECT ${columns} FROM ${t}
      WHERE queue_name = ? AND available_at <= UTC_TIMESTAMP(6)
        AND (delivered_at IS NULL OR delivered_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
      ORDER BY ${t}.available_at, ${t}.delivered_at, ${t}.id LIMIT ${limit} FOR UPDATE SKIP LOCKED;`
  return {
    /**
     * `queue, leaseUs` (and `queue, ids` first with acks), begun as a transaction of its own (`own`) or in the
     * caller's; the last of its `statements` results is the locked rows.
     */
    lock: (limit: number, withAcks: boolean, own: boolean) => {
      const acks = withAcks ? `DELETE FROM ${t} WHERE queue_name = ? AND id IN (?); ` : ""
      return {
        text: `${own ? `${begin} ` : ""}${acks}${select(limit)}`,
        statements: (own ? 2 : 0) + (withAcks ? 1 : 0) + 1
      }
    },
    /**
     * `ids`; committed when the claim is its own transaction. `lease_state` says what the new lease is: 1 a
     * redelivery — the row's previous lease ended with no outcome (acks delete, retries, releases and failures clear
     * `delivered_at`) — else 0; the worker sets 2 when the handler of a redelivery starts, alone (`start`).
     * `crash_count` grows only when a lease that reached 2 ended with no outcome: a worker that only claimed the row,
     * or ran it beside others, charges it nothing. MySQL assigns left to right, each assignment seeing the ones
     * before it: the counts come before the columns they read.
     */
    lease: (commit: boolean) =>
      // The counts stop at the column's limit (a value written by hand): the claim never fails on it.
      `UPDATE ${t} SET
        crash_count = crash_count + (delivered_at IS NOT NULL AND lease_state = 2 AND crash_count < ${maxDeliveryCount}),
        lease_state = (delivered_at IS NOT NULL),
        delivered_at = UTC_TIMESTAMP(6),
        delivery_count = delivery_count + (delivery_count < ${maxDeliveryCount})
      WHERE id IN (?);${commit ? " COMMIT;" : ""}`,
    /**
     * `queue, queue, leaseUs`: microseconds until the next delayed message is due and until the oldest lease of a
     * ready message runs out (NULL: none). Rows another claimer locked and has not leased yet count in neither.
     */
    nextDue: (commit: boolean) =>
      `SELECT
        TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),
          (SELECT MIN(available_at) FROM ${t} WHERE queue_name = ? AND available_at > UTC_TIMESTAMP(6))) AS delayed_us,
        TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),
          (SELECT MIN(delivered_at) FROM ${t} WHERE queue_name = ? AND available_at <= UTC_TIMESTAMP(6)
            AND delivered_at IS NOT NULL)) + ? AS lease_us;${commit ? " COMMIT;" : ""}`
  }
}

/**
 * Ids for `IN (…)`, their count padded to the next power of two by repeating the last (the same rows match). The
 * driver keeps a server-side prepared statement per distinct text on each connection, and the server caps them for
 * all its clients: a list of every length would leave one per length behind.
 */
const paddedIds = (ids: ReadonlyArray<string>): Array<number | string> => {
  const values = idValues(ids)
  const length = 2 ** Math.ceil(Math.log2(Math.max(1, values.length)))
  while (values.length < length) values.push(values[values.length - 1]!)
  return values
}

/** The statements of one table. @internal */
export const make = (sql: SqlClient.SqlClient, table: string) => {
  const t = sql(table)
  const cols = sql.literal(columns)
  const ids = (values: ReadonlyArray<string>) => sql.in(paddedIds(values))
  return {
    /**
     * One message through a prepared statement; more as text (the driver escapes the values): a prepared statement
     * per batch size would stay behind on the connection (see `paddedIds`).
     */
    insert: (queue: string, messages: ReadonlyArray<Insert>) => {
      const statement = sql`INSERT INTO ${t} (message_id, body, headers, queue_name, created_at, available_at) VALUES ${
        sql.csv(messages.map((m) =>
          sql`(${m.messageId}, ${m.body}, ${m.headers}, ${queue}, UTC_TIMESTAMP(6),
            UTC_TIMESTAMP(6) + INTERVAL ${micros(m.delayMs)} MICROSECOND)`
        ))
      }`
      return messages.length === 1 ? statement.withoutTransform : statement.unprepared
    },
    ack: (queue: string, values: ReadonlyArray<string>) =>
      sql`DELETE FROM ${t} WHERE queue_name = ${queue} AND id IN ${ids(values)}`,
    retry: (queue: string, id: string, delayMs: number, headers: string) =>
      sql`UPDATE ${t} SET available_at = UTC_TIMESTAMP(6) + INTERVAL ${micros(delayMs)} MICROSECOND,
          delivered_at = NULL, headers = ${headers}
        WHERE id = ${idValues([id])[0]!} AND queue_name = ${queue}`,
    fail: (queue: string, id: string, failureQueue: string, headers: string) =>
      sql`UPDATE ${t} SET queue_name = ${failureQueue}, available_at = UTC_TIMESTAMP(6), delivered_at = NULL,
          headers = ${headers}
        WHERE id = ${idValues([id])[0]!} AND queue_name = ${queue}`,
    /** The handler of a redelivered message starts (`lease_state` 2), while its lease is the caller's. */
    start: (queue: string, id: string, leaseMs: number) =>
      sql`UPDATE ${t} SET lease_state = 2
        WHERE id = ${idValues([id])[0]!} AND queue_name = ${queue} AND lease_state = 1
          AND delivered_at >= UTC_TIMESTAMP(6) - INTERVAL ${micros(leaseMs)} MICROSECOND`,
    keepalive: (queue: string, values: ReadonlyArray<string>) =>
      sql`UPDATE ${t} SET delivered_at = UTC_TIMESTAMP(6)
        WHERE queue_name = ${queue} AND id IN ${ids(values)} AND delivered_at IS NOT NULL`,
    release: (queue: string, values: ReadonlyArray<string>) =>
      sql`UPDATE ${t} SET delivered_at = NULL, delivery_count = GREATEST(delivery_count - 1, 0)
        WHERE queue_name = ${queue} AND id IN ${ids(values)} AND delivered_at IS NOT NULL`,
    /** Keyset paging on the primary key. */
    listPage: (queue: string, after: string, size: number) =>
      sql<StoredRow>`SELECT ${cols} FROM ${t} WHERE queue_name = ${queue} AND id > ${idValues([after])[0]!}
        ORDER BY ${t}.id LIMIT ${sql.literal(String(size))}`,
    find: (queue: string, id: string) =>
      sql<StoredRow>`SELECT ${cols} FROM ${t} WHERE id = ${idValues([id])[0]!} AND queue_name = ${queue}`,
    remove: (queue: string, values: ReadonlyArray<string>) =>
      sql`DELETE FROM ${t} WHERE queue_name = ${queue} AND id IN ${ids(values)}`,
    move: (fromQueue: string, id: string, toQueue: string, headers: string) =>
      sql`UPDATE ${t} SET queue_name = ${toQueue}, available_at = UTC_TIMESTAMP(6), delivered_at = NULL,
          delivery_count = 0, crash_count = 0, lease_state = 0, headers = ${headers}
        WHERE id = ${idValues([id])[0]!} AND queue_name = ${fromQueue}`,
    /** As the claim counts them. */
    stats: (queue: string, failureQueue: string, leaseMs: number) => {
      const leaseStart = sql`UTC_TIMESTAMP(6) - INTERVAL ${micros(leaseMs)} MICROSECOND`
      const ready = sql`queue_name = ${queue} AND available_at <= UTC_TIMESTAMP(6)
        AND (delivered_at IS NULL OR delivered_at < ${leaseStart})`
      return sql<StatsRow>`SELECT
          SUM(${ready}) AS ready,
          SUM(queue_name = ${queue} AND available_at > UTC_TIMESTAMP(6) AND delivered_at IS NULL) AS \`delayed\`,
          SUM(queue_name = ${queue} AND delivered_at >= ${leaseStart}) AS in_flight,
          SUM(queue_name = ${failureQueue}) AS failed,
          TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN ${ready} THEN available_at END), UTC_TIMESTAMP(6)) AS oldest_us
        FROM ${t} WHERE queue_name IN (${queue}, ${failureQueue})`
    }
  }
}

/**
 * The queue names a table holds, each once and in order, at most `limit`: the claim index's first column, read
 * with a loose index scan.
 *
 * @internal
 */
export const queueNames = (sql: SqlClient.SqlClient, table: string, limit: number) =>
  sql<{ readonly queue_name: string }>`SELECT DISTINCT queue_name FROM ${sql(table)}
    ORDER BY queue_name LIMIT ${sql.literal(String(limit))}`

/**
 * How many messages of a failure queue came from each transport (`origin` NULL: headers that record none, or that
 * are not the JSON `Headers.encode` writes), read from the headers text — the `originalTransport` key at the top
 * level, before the `custom` record `Headers.encode` writes last — so corrupt headers never fail the count.
 *
 * @internal
 */
export const failedFrom = (sql: SqlClient.SqlClient, table: string, failureQueue: string) =>
  sql<{ readonly origin: string | null; readonly n: number }>`SELECT
      NULLIF(REGEXP_REPLACE(
        REGEXP_SUBSTR(REGEXP_REPLACE(headers, '"custom":[{].*$', ''), '"originalTransport":"[A-Za-z0-9_.:-]{1,190}"'),
        '^"originalTransport":"|"$', ''), '') AS origin,
      COUNT(*) AS n
    FROM ${sql(table)} WHERE queue_name = ${failureQueue} GROUP BY 1 ORDER BY 1`

/** The statements of one table. @internal */
export type Statements = ReturnType<typeof make>
