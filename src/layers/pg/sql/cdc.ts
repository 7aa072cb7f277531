/**
 * The statements of the CDC transport (PgCdcTransport): the event table in the shape Debezium's Outbox Event Router
 * reads, the trigger that keeps it empty, its publication, the dispatch (a row inserted, or a transactional logical
 * decoding message), and the server's readiness and the replication slot's lag.
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
  /** Epoch milliseconds when the message is due: its dispatch time, or later when delayed. */
  readonly availableAt: number
}

/**
 * The event table: Debezium's Outbox Event Router columns (`id`, `aggregatetype`, `aggregateid`, `type`,
 * `payload`), plus the stored headers, the trace context and the due time, which the connector places in Kafka
 * headers. `payload` is text, not jsonb: the record's value is then the message body exactly as encoded (jsonb
 * would reorder its keys and spaces, and costs a parse and more WAL). It stays empty (`createForgetTrigger`).
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
 * The trigger that keeps the event table empty: after each INSERT statement it deletes the statement's rows (a
 * transition table), with the table owner's rights — the producer needs INSERT only, and sends one statement. The
 * WAL keeps the inserts, which is what the connector reads; the publication does not publish deletes. @internal
 */
export const createForgetTrigger = (sql: SqlClient.SqlClient, table: string) => {
  const t = quote(table)
  const fn = quote(`${table}_forget`)
  const trigger = quote(`${table.split(".").pop()!}_forget`)
  return sql.unsafe(`CREATE OR REPLACE FUNCTION ${fn}() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  DELETE FROM ${t} AS e USING inserted AS i WHERE e.id = i.id;
  RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION ${fn}() FROM PUBLIC;
DROP TRIGGER IF EXISTS ${trigger} ON ${t};
CREATE TRIGGER ${trigger} AFTER INSERT ON ${t} REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION ${fn}()`)
}

/** The events written as rows (the trigger deletes them in the same statement). @internal */
export const insertEvents = (sql: SqlClient.SqlClient, table: string, events: ReadonlyArray<Event>) =>
  sql`INSERT INTO ${sql(table)}
      (id, aggregatetype, aggregateid, type, payload, headers, traceparent, tracestate, available_at)
    SELECT * FROM unnest(${events.map((e) => e.id)}::uuid[], ${events.map((e) => e.aggregateType)}::text[],
                         ${events.map((e) => e.aggregateId)}::text[], ${events.map((e) => e.type)}::text[],
                         ${events.map((e) => e.payload)}::text[], ${events.map((e) => e.headers)}::text[],
                         ${events.map((e) => e.traceparent)}::text[], ${events.map((e) => e.tracestate)}::text[],
                         ${events.map((e) => e.availableAt)}::bigint[])`

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
