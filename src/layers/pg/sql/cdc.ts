/**
 * The statements of the CDC transport (PgCdcTransport): the event table in the shape Debezium's Outbox Event Router
 * reads, its publication, the dispatch (a row inserted and deleted in the caller's transaction, or a transactional
 * logical decoding message), and the server's readiness and the replication slot's lag.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { quote } from "./identifiers.js"

/** One event as written for Debezium. @internal */
export interface Event {
  readonly id: string
  readonly aggregateType: string
  readonly aggregateId: string
  readonly type: string
  readonly payload: string
  readonly headers: string
  readonly traceparent: string | null
  readonly tracestate: string | null
  /** Epoch milliseconds when the message is due, or null when due at once. */
  readonly availableAt: number | null
}

/**
 * The event table: Debezium's Outbox Event Router columns (`id`, `aggregatetype`, `aggregateid`, `type`,
 * `payload`), plus the stored headers, the trace context and the due time, which the connector places in Kafka
 * headers. `payload` is text, not jsonb: the record's value is then the message body exactly as encoded (jsonb
 * would reorder its keys and spaces). It stays empty: each row is deleted in the transaction that inserted it.
 *
 * @internal
 */
export const createTable = (sql: SqlClient.SqlClient, table: string) =>
  sql.unsafe(`CREATE TABLE IF NOT EXISTS ${quote(table)} (
  id uuid PRIMARY KEY,
  aggregatetype text NOT NULL,
  aggregateid text NOT NULL,
  type text NOT NULL,
  payload text NOT NULL,
  headers text NOT NULL,
  traceparent text,
  tracestate text,
  available_at bigint
)`)

/** Whether the table exists. @internal */
export const tableExists = (sql: SqlClient.SqlClient, table: string) =>
  sql<{ readonly n: number }>`SELECT (to_regclass(${quote(table)}) IS NOT NULL)::int AS n`

/** Whether a publication of that name exists. @internal */
export const publicationExists = (sql: SqlClient.SqlClient, publication: string) =>
  sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_publication WHERE pubname = ${publication}`

/** A publication of the table's inserts only: the deletes that keep the table empty are not published. @internal */
export const createPublication = (sql: SqlClient.SqlClient, publication: string, table: string) =>
  sql.unsafe(`CREATE PUBLICATION ${quote(publication)} FOR TABLE ${quote(table)} WITH (publish = 'insert')`)

/** What the server and a role allow: `wal_level`, and whether the role may replicate. @internal */
export const readiness = (sql: SqlClient.SqlClient, role: string) =>
  sql<{ readonly walLevel: string; readonly replication: boolean | null; readonly major: number }>`
    SELECT current_setting('wal_level') AS "walLevel",
           (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = ${role}) AS replication,
           current_setting('server_version_num')::int / 10000 AS major`

/**
 * The events written as rows, inserted then deleted: the WAL keeps the inserts, the table nothing. Two statements,
 * run in order in the caller's transaction (a DELETE in the INSERT's statement would not see its rows). @internal
 */
export const insertThenDelete = (sql: SqlClient.SqlClient, table: string, events: ReadonlyArray<Event>) => {
  const t = sql(table)
  const ids = events.map((e) => e.id)
  return {
    insert: sql`INSERT INTO ${t}
        (id, aggregatetype, aggregateid, type, payload, headers, traceparent, tracestate, available_at)
      SELECT * FROM unnest(${ids}::uuid[], ${events.map((e) => e.aggregateType)}::text[],
                           ${events.map((e) => e.aggregateId)}::text[], ${events.map((e) => e.type)}::text[],
                           ${events.map((e) => e.payload)}::text[], ${events.map((e) => e.headers)}::text[],
                           ${events.map((e) => e.traceparent)}::text[], ${events.map((e) => e.tracestate)}::text[],
                           ${events.map((e) => e.availableAt)}::bigint[])`,
    remove: sql`DELETE FROM ${t} WHERE id = ANY(${ids}::uuid[])`
  }
}

/** The JSON content of a logical decoding message: the event's columns by the Event Router's names. @internal */
export const messageContent = (event: Event): string =>
  JSON.stringify({
    id: event.id,
    aggregatetype: event.aggregateType,
    aggregateid: event.aggregateId,
    type: event.type,
    payload: event.payload,
    headers: event.headers,
    traceparent: event.traceparent,
    tracestate: event.tracestate,
    available_at: event.availableAt
  })

/** The events as transactional logical decoding messages under `prefix`, in order. @internal */
export const emitMessages = (sql: SqlClient.SqlClient, prefix: string, events: ReadonlyArray<Event>) =>
  sql`SELECT pg_logical_emit_message(true, ${prefix}, c)::text AS lsn
      FROM unnest(${events.map(messageContent)}::text[]) WITH ORDINALITY AS x(c, n) ORDER BY n`

/**
 * A replication slot: whether a connector reads it now, and the WAL it retains — from its restart point, what
 * the server must keep — and behind its confirmed position, what the connector has yet to acknowledge. @internal
 */
export const slotLag = (sql: SqlClient.SqlClient, slot: string) =>
  sql<
    {
      readonly active: boolean
      readonly retainedBytes: string | null
      readonly pendingBytes: string | null
      readonly walStatus: string | null
    }
  >`SELECT active,
           pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::text AS "retainedBytes",
           pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::text AS "pendingBytes",
           wal_status AS "walStatus"
    FROM pg_replication_slots WHERE slot_name = ${slot}`
