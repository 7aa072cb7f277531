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
import { defaultChannel } from "../../../domain/Identifier.js"
import {
  claimFunctionV3,
  claimFunctionV4,
  claimFunctionV5,
  claimFunctionV6,
  claimFunctionV7,
  claimFunctionV9
} from "./claimFunctions.js"
import { claimFunctionV11 } from "./claimFunctionV11.js"
import { claimFunctionV13 } from "./claimFunctionV13.js"
import {
  claimFunction,
  forgetKeyFunction,
  keyPlaceFunction,
  keyPlaces,
  keySequences,
  keyStates,
  quote,
  waitingWorkers,
  wakeFunction
} from "./identifiers.js"

/** Index names of migration 1: the table's name (dots as `_`) cut to fit 63 bytes with the suffix. */
const indexName = (table: string, suffix: string): string =>
  `${table.replace(/\./g, "_").slice(0, 63 - suffix.length)}${suffix}`

const schemaOf = (table: string): string | null => (table.includes(".") ? table.split(".")[0]! : null)
const nameOf = (table: string): string => (table.includes(".") ? table.split(".")[1]! : table)

/**
 * Migration 6: ordering keys. A keyed row carries its key and its place in the key (`ordering_seq`), taken from the
 * producers' table `<table>_key_seq` under its row lock — held to the producer's commit, so places follow commit
 * order. The workers' table `<table>_keys` has a row for each key with messages: when it is next due (its head's
 * availability, its lease's end, or "look again") and the failed message that blocks it. Producers never lock a
 * row of it (they insert missing ones, `ON CONFLICT DO NOTHING`), so a producer's open transaction never holds up a
 * claim. The claim leases the heads of due keys through `<table>_keys` — as many round trips as before, a cost in
 * the keys claimed, not in the rows queued — and unkeyed rows through a partial index that leaves keyed rows out.
 */
const orderingKeysV6 = (
  t: string,
  seq: string,
  keys: string,
  unkeyedIndex: string,
  keyIndex: string,
  dueIndex: string
) => [
  `ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS ordering_key text NULL`,
  `ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS ordering_seq bigint NULL`,
  `CREATE UNIQUE INDEX IF NOT EXISTS ${keyIndex} ON ${t} (queue_name, ordering_key, ordering_seq)
     WHERE ordering_key IS NOT NULL`,
  `CREATE INDEX IF NOT EXISTS ${unkeyedIndex} ON ${t} (queue_name, available_at, id) WHERE ordering_key IS NULL`,
  `CREATE TABLE IF NOT EXISTS ${seq} (
     queue_name varchar(190) NOT NULL,
     ordering_key text NOT NULL,
     next_seq bigint NOT NULL,
     PRIMARY KEY (queue_name, ordering_key)
   )`,
  `CREATE TABLE IF NOT EXISTS ${keys} (
     queue_name varchar(190) NOT NULL,
     ordering_key text NOT NULL,
     due_at timestamptz NOT NULL,
     blocked_by bigint NULL,
     PRIMARY KEY (queue_name, ordering_key)
   )`,
  `CREATE INDEX IF NOT EXISTS ${dueIndex} ON ${keys} (queue_name, due_at) WHERE blocked_by IS NULL`
]

/** Migration 10: the storage settings of each table of a transport table (see the README, "Autovacuum"). */
const autovacuumV10 =
  "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_cost_delay = 0"

/**
 * Migration 12: the wake-up of waiting workers, from the table itself. A statement-level trigger after every INSERT
 * notifies each queue it wrote to on the channel of each worker waiting on it (`<table>_waiting`, whose `channel`
 * workers write when they announce; an announcement without one — a worker of an earlier version — gets the
 * table's default channel): one notification per statement, delivered at commit, only while a worker waits. The
 * function's plans are kept for the session, so a producer's INSERT is planned as a bare INSERT is — a statement
 * that carried the check itself cost the server half again as much CPU as the INSERT.
 */
const wakeTriggerV12 = (table: string, t: string, waiting: string) => {
  const fn = quote(wakeFunction(table))
  const trigger = quote(`${nameOf(table)}_wake`)
  return [
    `ALTER TABLE ${waiting} ADD COLUMN IF NOT EXISTS channel text NULL`,
    `CREATE OR REPLACE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $wake$
BEGIN
  PERFORM pg_notify(coalesce(w.channel, '${defaultChannel(table).replace(/'/g, "''")}'), w.queue_name)
  FROM (SELECT DISTINCT w.queue_name, w.channel FROM ${waiting} AS w
    WHERE w.queue_name IN (SELECT i.queue_name FROM inserted AS i) AND w.expires_at > now()) AS w;
  RETURN NULL;
END
$wake$`,
    `DROP TRIGGER IF EXISTS ${trigger} ON ${t}`,
    `CREATE TRIGGER ${trigger} AFTER INSERT ON ${t} REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION ${fn}()`
  ]
}

/**
 * Migration 14: a producer needs `INSERT` on the table and nothing else, whatever a later migration adds. The
 * wake-up trigger's function runs with its owner's rights (the role that ran the setup: `SECURITY DEFINER`), its
 * `search_path` pinned and every name qualified, so a producer's role needs no privilege on `<table>_waiting`. A
 * keyed message is a plain INSERT too: a row trigger of the same kind, only for rows with a key and no place yet
 * (`WHEN`: an unkeyed INSERT does not call it; a producer of an earlier version brings its place), takes the key's
 * next place from `<table>_key_seq` — under its row lock, held to the producer's commit, so places follow commit
 * order — then adds the key's row to `<table>_keys` if missing (after the lock: a claimer deleting the key as
 * empty holds it), due when the row is. `schema` is the table's (the current schema for an unqualified name).
 */
const producerInsertOnlyV14 = (table: string, schema: string) => {
  const qualified = (name: string) => quote(`${schema}.${nameOf(name)}`)
  const t = qualified(table)
  const definer = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
  const place = qualified(keyPlaceFunction(table))
  const placeTrigger = quote(`${nameOf(table)}_key_place`)
  return [
    `CREATE OR REPLACE FUNCTION ${qualified(wakeFunction(table))}() RETURNS trigger LANGUAGE plpgsql ${definer}
AS $wake$
BEGIN
  PERFORM pg_catalog.pg_notify(coalesce(w.channel, '${defaultChannel(table).replace(/'/g, "''")}'), w.queue_name)
  FROM (SELECT DISTINCT w.queue_name, w.channel FROM ${qualified(waitingWorkers(table))} AS w
    WHERE w.queue_name IN (SELECT i.queue_name FROM inserted AS i) AND w.expires_at > pg_catalog.now()) AS w;
  RETURN NULL;
END
$wake$`,
    `CREATE OR REPLACE FUNCTION ${place}() RETURNS trigger LANGUAGE plpgsql ${definer} AS $place$
BEGIN
  INSERT INTO ${qualified(keySequences(table))} AS s (queue_name, ordering_key, next_seq)
  VALUES (NEW.queue_name, NEW.ordering_key, 2)
  ON CONFLICT (queue_name, ordering_key) DO UPDATE SET next_seq = s.next_seq + 1
  RETURNING s.next_seq - 1 INTO NEW.ordering_seq;
  INSERT INTO ${qualified(keyStates(table))} AS k (queue_name, ordering_key, due_at)
  VALUES (NEW.queue_name, NEW.ordering_key, NEW.available_at)
  ON CONFLICT (queue_name, ordering_key) DO NOTHING;
  RETURN NEW;
END
$place$`,
    `DROP TRIGGER IF EXISTS ${placeTrigger} ON ${t}`,
    `CREATE TRIGGER ${placeTrigger} BEFORE INSERT ON ${t} FOR EACH ROW
  WHEN (NEW.ordering_key IS NOT NULL AND NEW.ordering_seq IS NULL) EXECUTE FUNCTION ${place}()`
  ]
}

/**
 * Migration 15: storage that does not only grow. A key's row in `<table>_key_seq` is deleted with its row in
 * `<table>_keys` — by the claim, once no message of the key is left and no producer holds the key (the claim holds
 * its sequence row's lock then: an AFTER DELETE trigger of `<table>_keys`, with the owner's rights, deletes it in the
 * claim's transaction). A key whose row went takes up again from a table-wide sequence (`<table>_places`) instead
 * of from 1: a place is drawn while the key's row is locked — by the producer that inserted it or waited for it —
 * so places still follow commit order, and every place is above every place drawn before, of every key, in every
 * queue: a message moved back from the failure queue never meets a place taken again, and deleting a key's row at
 * any moment can never make two places equal or out of order. The sequence starts above every place already taken.
 * Rows left by keys that emptied before are deleted. The claim index (migration 1) goes: its key is the unkeyed
 * index's, which the claims use for every unkeyed row, and a keyed row has the ordering index — every dispatch wrote
 * both. `schema` is the table's (as migration 14's).
 */
const boundedKeysV15 = (table: string, schema: string) => {
  const qualified = (name: string) => quote(`${schema}.${nameOf(name)}`)
  const t = qualified(table)
  const seq = qualified(keySequences(table))
  const keys = qualified(keyStates(table))
  const places = qualified(keyPlaces(table))
  const definer = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
  const forget = qualified(forgetKeyFunction(table))
  const forgetTrigger = quote(`${nameOf(keyStates(table))}_forget`)
  return [
    `CREATE SEQUENCE IF NOT EXISTS ${places} AS bigint`,
    `SELECT pg_catalog.setval('${places.replace(/'/g, "''")}', greatest(
      (SELECT max(next_seq) FROM ${seq}), (SELECT max(ordering_seq) + 1 FROM ${t}), 1))`,
    `CREATE OR REPLACE FUNCTION ${qualified(keyPlaceFunction(table))}() RETURNS trigger LANGUAGE plpgsql ${definer}
AS $place$
BEGIN
  INSERT INTO ${seq} AS s (queue_name, ordering_key, next_seq)
  VALUES (NEW.queue_name, NEW.ordering_key, pg_catalog.nextval('${places.replace(/'/g, "''")}') + 1)
  ON CONFLICT (queue_name, ordering_key)
    DO UPDATE SET next_seq = greatest(s.next_seq, pg_catalog.nextval('${places.replace(/'/g, "''")}')) + 1
  RETURNING s.next_seq - 1 INTO NEW.ordering_seq;
  INSERT INTO ${keys} AS k (queue_name, ordering_key, due_at)
  VALUES (NEW.queue_name, NEW.ordering_key, NEW.available_at)
  ON CONFLICT (queue_name, ordering_key) DO NOTHING;
  RETURN NEW;
END
$place$`,
    `CREATE OR REPLACE FUNCTION ${forget}() RETURNS trigger LANGUAGE plpgsql ${definer} AS $forget$
BEGIN
  DELETE FROM ${seq} AS s USING deleted AS d
  WHERE s.queue_name = d.queue_name AND s.ordering_key = d.ordering_key;
  RETURN NULL;
END
$forget$`,
    `DROP TRIGGER IF EXISTS ${forgetTrigger} ON ${keys}`,
    `CREATE TRIGGER ${forgetTrigger} AFTER DELETE ON ${keys} REFERENCING OLD TABLE AS deleted
  FOR EACH STATEMENT EXECUTE FUNCTION ${forget}()`,
    `DELETE FROM ${seq} AS s WHERE NOT EXISTS (
      SELECT 1 FROM ${keys} AS k WHERE k.queue_name = s.queue_name AND k.ordering_key = s.ordering_key)`,
    `DROP INDEX IF EXISTS ${quote(`${schema}.${indexName(table, "_claim_idx")}`)}`
  ]
}

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
    }),
    "6_ordering_keys": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const seq = quote(keySequences(table))
      const keys = quote(keyStates(table))
      for (
        const statement of orderingKeysV6(
          t,
          seq,
          keys,
          quote(indexName(table, "_unkeyed_idx")),
          quote(indexName(table, "_ordering_idx")),
          quote(indexName(keyStates(table), "_due_idx"))
        )
      ) yield* sql.unsafe(statement)
      // The claim's result has a new column: the function is replaced, not redefined.
      yield* sql.unsafe(`DROP FUNCTION IF EXISTS ${fn}(text, float8, int, bigint[], boolean)`)
      yield* sql.unsafe(claimFunctionV6(t, fn, seq, keys))
    }),
    "7_claim_acked_keys_first": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const keys = quote(keyStates(table))
      // Blocked keys are few: found by the message blocking them (unblock, remove) and counted by `stats`.
      yield* sql.unsafe(`CREATE INDEX IF NOT EXISTS ${quote(indexName(keyStates(table), "_blocked_idx"))}
        ON ${keys} (blocked_by) WHERE blocked_by IS NOT NULL`)
      yield* sql.unsafe(claimFunctionV7(t, fn, quote(keySequences(table)), keys))
    }),
    // The workers waiting on each queue, each until its announcement expires (a killed worker's lapses): a
    // producer's statement notifies only while one waits, so a busy queue's commits never take NOTIFY's lock.
    "8_waiting_workers": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${quote(waitingWorkers(table))} (
        queue_name varchar(190) NOT NULL,
        worker uuid NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (queue_name, worker)
      )`)
    }),
    // A new overload (a sixth argument): workers of the previous version go on calling the five-argument one.
    "9_claim_floor": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.unsafe(claimFunctionV9(t, fn, quote(keySequences(table)), quote(keyStates(table))))
    }),
    // Every message leaves a dead row version in each of these tables. The server's defaults vacuum a table once a
    // fifth of it is dead — never, for a table holding a large backlog — and throttle the vacuum: here a fixed
    // count of dead versions triggers it and nothing slows it down.
    "10_autovacuum": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      for (const name of [table, keySequences(table), keyStates(table), waitingWorkers(table)]) {
        yield* sql.unsafe(`ALTER TABLE ${quote(name)} SET (${autovacuumV10})`)
      }
    }),
    // Same signature: the function is replaced in place, so workers of the previous version call it as they did.
    "11_claim_plans": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.unsafe(claimFunctionV11(t, fn, quote(keySequences(table)), quote(keyStates(table))))
    }),
    "12_wake_trigger": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      for (const statement of wakeTriggerV12(table, t, quote(waitingWorkers(table)))) yield* sql.unsafe(statement)
    }),
    // Crashes charged only to the message that caused them (see `claimFunctionV13.ts`). The columns' defaults are
    // constants: adding them rewrites no row. The claim's result has new columns: the function is replaced, not
    // redefined, with the same arguments — workers of the previous version call it as they did — and the grants of
    // the one it replaces (the workers' EXECUTE; PUBLIC's taken away) are given to it again.
    "13_crash_count": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const signature = `${fn}(text, float8, int, bigint[], boolean, float8)`
      yield* sql.unsafe(`ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS crash_count integer NOT NULL DEFAULT 0`)
      yield* sql.unsafe(`ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS lease_state smallint NOT NULL DEFAULT 0`)
      // NULL: the default privileges (PUBLIC may execute), which the new function gets too.
      const [acl] = yield* sql<{ readonly explicit: boolean; readonly grantees: ReadonlyArray<string> | null }>`
        SELECT p.proacl IS NOT NULL AS explicit, (
            SELECT array_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END)
            FROM aclexplode(p.proacl) AS a LEFT JOIN pg_roles AS r ON r.oid = a.grantee
            WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner) AS grantees
        FROM pg_proc AS p WHERE p.oid = to_regprocedure(${signature})`
      yield* sql.unsafe(`DROP FUNCTION IF EXISTS ${signature}`)
      yield* sql.unsafe(claimFunctionV13(t, fn, quote(keySequences(table)), quote(keyStates(table))))
      if (acl?.explicit === true) {
        yield* sql.unsafe(`REVOKE EXECUTE ON FUNCTION ${signature} FROM PUBLIC`)
        for (const grantee of acl.grantees ?? []) {
          yield* sql.unsafe(`GRANT EXECUTE ON FUNCTION ${signature} TO ${grantee}`)
        }
      }
    }),
    "14_producer_insert_only": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const [current] = yield* sql<{ readonly schema: string }>`SELECT current_schema() AS schema`
      for (const statement of producerInsertOnlyV14(table, schemaOf(table) ?? current!.schema)) {
        yield* sql.unsafe(statement)
      }
    }),
    "15_bounded_keys": Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const [current] = yield* sql<{ readonly schema: string }>`SELECT current_schema() AS schema`
      for (const statement of boundedKeysV15(table, schemaOf(table) ?? current!.schema)) yield* sql.unsafe(statement)
    })
  })
}
