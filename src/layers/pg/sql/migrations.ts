/**
 * The migrations of the transport table, each frozen in its own entry: editing one can never change what an
 * earlier one means on a fresh install. Each is idempotent on its own, so a table made by Symfony's Doctrine
 * transport is adopted and completed rather than replaced. Only the (validated, quoted) table name and the
 * names derived from it are interpolated.
 *
 * @internal
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import { claimFunction, quote } from "./identifiers.js"

/** Index names of migration 1: the table's name (dots as `_`) cut to fit 63 bytes with the suffix. */
const indexName = (table: string, suffix: string): string =>
  `${table.replace(/\./g, "_").slice(0, 63 - suffix.length)}${suffix}`

const schemaOf = (table: string): string | null => (table.includes(".") ? table.split(".")[0]! : null)
const nameOf = (table: string): string => (table.includes(".") ? table.split(".")[1]! : table)

/**
 * Migration 3: the claim as a function. PL/pgSQL keeps the plans of its statements for the session (no parse
 * and plan per claim), deletes `acked` and leases the next `batch_size` ready rows of `queue` (skipping rows
 * other claimers hold) in one transaction. With `relaxed`, the transaction commits without waiting for the WAL
 * flush (`synchronous_commit = off` for this transaction only): a server crash can then undo the claim or the
 * acks — the messages come back and are delivered again — but never lose or invent a message. The worker asks
 * for it only when the claim is its own transaction, never inside a caller's.
 */
const claimFunctionV3 = (t: string, fn: string) =>
  `CREATE OR REPLACE FUNCTION ${fn}(
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
    m.delivery_count;
END
$claim$`

/**
 * Migration 4: a claim that leases nothing also says when the next message is due — one row whose `id` is NULL
 * and whose `available_ms` is the number of milliseconds until the next message of `queue` becomes claimable
 * (NULL when none waits): the first unclaimed row (delayed, or already due: then "now") and the earliest lease
 * of the in-flight rows, both through the claim index. An idle worker's poll is one round trip.
 */
const claimFunctionV4 = (t: string, fn: string) =>
  `CREATE OR REPLACE FUNCTION ${fn}(
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
    m.delivery_count;
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::float8, (extract(epoch FROM least(
      (SELECT available_at FROM ${t} WHERE queue_name = queue AND delivered_at IS NULL ORDER BY available_at LIMIT 1),
      (SELECT min(delivered_at) FROM ${t} WHERE queue_name = queue AND available_at <= now()
        AND delivered_at IS NOT NULL) + lease_ms::float8 * interval '1 millisecond'
    ) - now()) * 1000)::float8, NULL::int;
  END IF;
END
$claim$`

/**
 * Migration 5: the claim holds against values no worker writes but another tool or a hand can. The next-due
 * answer subtracts epochs, not timestamps, so an `infinity` in `available_at` or `delivered_at` is an infinite
 * wait (`available_at = 'infinity'`: never due) instead of "cannot subtract infinite timestamps"; a row leased
 * until `'infinity'` is claimable, as if its lease had run out; and the delivery count stops at the largest
 * integer instead of overflowing, so a row at 2147483647 is still claimed (and judged poison by its count).
 */
const claimFunctionV5 = (t: string, fn: string) =>
  `CREATE OR REPLACE FUNCTION ${fn}(
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
      AND (ready.delivered_at IS NULL OR ready.delivered_at < now() - lease_ms * interval '1 millisecond'
        OR ready.delivered_at = 'infinity')
    ORDER BY ready.available_at, ready.id
    LIMIT batch_size
    FOR UPDATE SKIP LOCKED
  )
  UPDATE ${t} AS m SET delivered_at = now(),
    delivery_count = CASE WHEN m.delivery_count < 2147483647 THEN m.delivery_count + 1 ELSE m.delivery_count END
  WHERE m.id = ANY(ARRAY(SELECT next.id FROM next))
  RETURNING m.id::text, m.message_id::text, m.body, m.headers,
    (extract(epoch FROM m.created_at) * 1000)::float8, (extract(epoch FROM m.available_at) * 1000)::float8,
    m.delivery_count;
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::float8, ((extract(epoch FROM least(
      (SELECT available_at FROM ${t} WHERE queue_name = queue AND delivered_at IS NULL ORDER BY available_at LIMIT 1),
      (SELECT min(delivered_at) FROM ${t} WHERE queue_name = queue AND available_at <= now()
        AND delivered_at IS NOT NULL) + lease_ms::float8 * interval '1 millisecond'
    )) - extract(epoch FROM now())) * 1000)::float8, NULL::int;
  END IF;
END
$claim$`

/** The migrations of a table, in order, for `Migrator.make`. @internal */
export const loader = (table: string) => {
  const t = quote(table)
  const fn = quote(claimFunction(table))
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
      yield* sql`CREATE INDEX IF NOT EXISTS ${sql(indexName(table, "_claim_idx"))}
        ON ${sql(table)} (queue_name, available_at, id)`
      yield* sql`CREATE INDEX IF NOT EXISTS ${sql(indexName(table, "_message_id_idx"))} ON ${sql(table)} (message_id)`
    }),
    // Room on each page for the claim's and the lease's row versions: they stay on the page (HOT-friendly)
    // instead of spreading the table and its indexes. Applies to new pages; existing ones follow on rewrite.
    "2_claim_fillfactor": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.unsafe(`ALTER TABLE ${t} SET (fillfactor = 50)`)
    }),
    "3_claim_function": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.unsafe(claimFunctionV3(t, fn))
    }),
    "4_claim_next_due": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.unsafe(claimFunctionV4(t, fn))
    }),
    "5_claim_extreme_values": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.unsafe(claimFunctionV5(t, fn))
    })
  })
}
