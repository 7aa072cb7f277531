/**
 * The text of the table's claim function as each migration creates it (migrations 3 to 9), kept apart from the
 * migrations that run them. A version that ran once must keep its text, so each is its own constant and only the
 * fragments later versions share are factored out.
 *
 * @internal
 */

/**
 * Migration 3: the claim as a function. PL/pgSQL keeps the plans of its statements for the session (no parse
 * and plan per claim), deletes `acked` and leases the next `batch_size` ready rows of `queue` (skipping rows
 * other claimers hold) in one transaction. With `relaxed`, the transaction commits without waiting for the WAL
 * flush (`synchronous_commit = off` for this transaction only): a server crash can then undo the claim or the
 * acks — the messages come back and are delivered again — but never lose or invent a message. The worker asks
 * for it only when the claim is its own transaction, never inside a caller's.
 */
export const claimFunctionV3 = (t: string, fn: string) =>
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
export const claimFunctionV4 = (t: string, fn: string) =>
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
export const claimFunctionV5 = (t: string, fn: string) =>
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

/**
 * The claim function's signature and first variables, from migration 6 on (the result has `ordering_key`); with
 * `floor` (migration 9), a sixth argument, the floor of the unkeyed scan (epoch ms, NULL: from the start). These
 * fragments are shared by the claims of migrations 6, 7, 9 and 11 and must keep their text: a migration that ran once
 * must create the same function when it runs on a new database.
 *
 * @internal
 */
export const claimSignature = (fn: string, floor = false, settings = "") =>
  `CREATE OR REPLACE FUNCTION ${fn}(
  queue text, lease_ms float8, batch_size int, acked bigint[], relaxed boolean${floor ? ", floor_ms float8" : ""}
) RETURNS TABLE (
  id text, message_id text, body text, headers text, created_ms float8, available_ms float8, delivery_count int,
  ordering_key text
) LANGUAGE plpgsql${settings} AS $claim$
#variable_conflict use_column
DECLARE
  lease interval := lease_ms * interval '1 millisecond';
  keyed int := 0;
${
    floor
      ? "  floor_at timestamptz := coalesce('epoch'::timestamptz + floor_ms * interval '1 millisecond', '-infinity');\n"
      : ""
  }`

/**
 * Leases the claimable heads among `heads`, returning them (migrations 6, 7 and 9). `byJoin` (migration 11) finds
 * them through a join on their ids, as the unkeyed rows of `unkeyedFillAndNextDueV11` are.
 */
const leaseHeads = (t: string, byJoin = false) =>
  `    RETURN QUERY
    UPDATE ${t} AS m SET delivered_at = now(),
      delivery_count = CASE WHEN m.delivery_count < 2147483647 THEN m.delivery_count + 1 ELSE m.delivery_count END
    ${byJoin ? "FROM unnest(heads) AS h(id) WHERE m.id = h.id" : "WHERE m.id = ANY(heads)"} AND m.available_at <= now()
      AND (m.delivered_at IS NULL OR m.delivered_at < now() - lease OR m.delivered_at = 'infinity')
    RETURNING m.id::text, m.message_id::text, m.body, m.headers,
      (extract(epoch FROM m.created_at) * 1000)::float8, (extract(epoch FROM m.available_at) * 1000)::float8,
      m.delivery_count, m.ordering_key;
`

/** Makes the keys of `list` due again by their heads in `heads` (migrations 6 and 7). */
const keysDueAgain = (t: string, keys: string, list: "due_keys" | "candidates") =>
  `    UPDATE ${keys} AS k SET due_at = CASE
        WHEN m.id IS NULL THEN now() + interval '100 milliseconds'
        WHEN m.available_at > now() THEN m.available_at
        WHEN m.delivered_at IS NOT NULL AND m.delivered_at >= now() - lease AND m.delivered_at <> 'infinity'
          THEN m.delivered_at + lease
        ELSE now() + lease END
    FROM unnest(${list}, heads) AS c(k, h)
    LEFT JOIN ${t} AS m ON m.id = c.h
    WHERE k.queue_name = queue AND k.ordering_key = c.k;
`

/** `column >= floor_at` and what follows it, when the looks start at the floor (migrations 9 and 11). */
const floorOf = (fromFloor: boolean) => (column: string, then: string) =>
  fromFloor ? `${column} >= floor_at${then}` : ""

/**
 * Unkeyed rows fill the batch; a claim that found nothing answers when the next row or key is due (6, 7 and 9).
 * `fromFloor` (migration 9) starts both looks at `floor_at`; without it the text is migrations 6 and 7's.
 */
const unkeyedFillAndNextDue = (t: string, keys: string, fromFloor = false) => {
  const floor = floorOf(fromFloor)
  return `  IF keyed < batch_size THEN
    RETURN QUERY
    WITH next AS MATERIALIZED (
      SELECT ready.id FROM ${t} AS ready
      WHERE ready.queue_name = queue AND ready.ordering_key IS NULL
        AND ${floor("ready.available_at", " AND ")}ready.available_at <= now()
        AND (ready.delivered_at IS NULL OR ready.delivered_at < now() - lease OR ready.delivered_at = 'infinity')
      ORDER BY ready.available_at, ready.id
      LIMIT batch_size - keyed
      FOR UPDATE SKIP LOCKED
    )
    UPDATE ${t} AS m SET delivered_at = now(),
      delivery_count = CASE WHEN m.delivery_count < 2147483647 THEN m.delivery_count + 1 ELSE m.delivery_count END
    WHERE m.id = ANY(ARRAY(SELECT next.id FROM next))
    RETURNING m.id::text, m.message_id::text, m.body, m.headers,
      (extract(epoch FROM m.created_at) * 1000)::float8, (extract(epoch FROM m.available_at) * 1000)::float8,
      m.delivery_count, NULL::text;
    GET DIAGNOSTICS unkeyed = ROW_COUNT;
  END IF;

${nextDue(t, keys, fromFloor)}`
}

/** A claim that found nothing answers when the next row or key is due (6, 7, 9 and 11), and the function ends. *
 * @internal
 */
export const nextDue = (t: string, keys: string, fromFloor: boolean) => {
  const floor = floorOf(fromFloor)
  return `  IF keyed + unkeyed = 0 THEN
    RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::float8, ((extract(epoch FROM least(
      (SELECT available_at FROM ${t} WHERE queue_name = queue AND ordering_key IS NULL AND delivered_at IS NULL
        ${floor("AND available_at", "\n        ")}ORDER BY available_at LIMIT 1),
      (SELECT min(delivered_at) FROM ${t} WHERE queue_name = queue AND ordering_key IS NULL ${
    floor("AND available_at", "\n        AND ")
  }${fromFloor ? "" : "AND "}available_at <= now()
        AND delivered_at IS NOT NULL) + lease,
      (SELECT min(k.due_at) FROM ${keys} AS k WHERE k.queue_name = queue AND k.blocked_by IS NULL)
    )) - extract(epoch FROM now())) * 1000)::float8, NULL::int, NULL::text;
  END IF;
END
$claim$`
}

/**
 * Migration 6's claim: acked keyed rows make their keys due at once; the heads of due, unblocked keys (at most
 * `batch_size`, keys locked `SKIP LOCKED`) are leased and their keys due at the lease's end; a key whose head is
 * leased or delayed is due again then; a key with no row left is deleted once no producer holds its sequence (a
 * second statement, with a fresh snapshot, looks again first) — otherwise it is due again in 100 ms. Then unkeyed
 * rows fill the batch, as migration 5's claim takes them.
 */
export const claimFunctionV6 = (t: string, fn: string, seq: string, keys: string) =>
  `${claimSignature(fn)}  unkeyed int := 0;
  due_keys text[];
  heads bigint[];
  empty text[];
BEGIN
  IF relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  IF cardinality(acked) > 0 THEN
    WITH done AS (DELETE FROM ${t} AS d WHERE d.id = ANY(acked) RETURNING d.queue_name, d.ordering_key)
    UPDATE ${keys} AS k SET due_at = now()
    FROM (SELECT DISTINCT done.queue_name, done.ordering_key FROM done WHERE done.ordering_key IS NOT NULL) AS a
    WHERE k.queue_name = a.queue_name AND k.ordering_key = a.ordering_key;
  END IF;

  -- The due keys (locked for this claim) and their heads (NULL: no row left).
  SELECT array_agg(due.ordering_key), array_agg(h.id) INTO due_keys, heads
  FROM (
    SELECT k.ordering_key FROM ${keys} AS k
    WHERE k.queue_name = queue AND k.blocked_by IS NULL AND k.due_at <= now()
    ORDER BY k.due_at
    LIMIT batch_size
    FOR UPDATE SKIP LOCKED
  ) AS due
  LEFT JOIN LATERAL (
    SELECT m.id FROM ${t} AS m
    WHERE m.queue_name = queue AND m.ordering_key = due.ordering_key
    ORDER BY m.ordering_seq
    LIMIT 1
  ) AS h ON true;

  IF cardinality(due_keys) > 0 THEN
    -- Keys with no row left: deleted once no producer holds their sequence, after a fresh look (this statement's).
    SELECT array_agg(s.ordering_key) INTO empty FROM (
      SELECT s.ordering_key FROM ${seq} AS s
      WHERE s.queue_name = queue AND s.ordering_key IN (
        SELECT c.k FROM unnest(due_keys, heads) AS c(k, h) WHERE c.h IS NULL)
      FOR UPDATE SKIP LOCKED
    ) AS s;
    DELETE FROM ${keys} AS k WHERE k.queue_name = queue AND k.ordering_key = ANY(coalesce(empty, '{}'))
      AND NOT EXISTS (SELECT 1 FROM ${t} AS m WHERE m.queue_name = queue AND m.ordering_key = k.ordering_key);

    -- Every other due key is due again: at its head's lease end once leased (below, or by another claimer), at its
    -- head's availability when delayed, in 100 ms when it had no row (a producer may be committing one).
${keysDueAgain(t, keys, "due_keys")}
${leaseHeads(t)}    GET DIAGNOSTICS keyed = ROW_COUNT;
  END IF;

${unkeyedFillAndNextDue(t, keys)}`

/**
 * Migration 7's claim: the keys of the rows it acks are its first candidates (their next heads are free now), so
 * a key's row is written once per message instead of twice; then due, unblocked keys, taken `SKIP LOCKED` in rounds
 * until the batch is full, no due key is left or three rounds ran — keys with no row left never use up the batch.
 * For each candidate: the head is leased and the key due at the lease's end; a key whose head is leased or delayed
 * is due again then; a key with no row left is deleted once no producer holds its sequence (a second statement,
 * with a fresh snapshot, looks again first) — otherwise it is due again in 100 ms. Then unkeyed rows fill the
 * batch, as migration 5's claim takes them.
 */
export const claimFunctionV7 = (t: string, fn: string, seq: string, keys: string) =>
  `${claimSignature(fn)}${keyedClaim(t, seq, keys, ackedByIds(t))}${unkeyedFillAndNextDue(t, keys)}`

/** The acked rows of `queue`, deleted by their ids (migration 7). */
const ackedByIds = (t: string) =>
  `    WITH done AS (DELETE FROM ${t} AS d WHERE d.id = ANY(acked) AND d.queue_name = queue RETURNING d.ordering_key)`

/**
 * Migration 7's claim up to its unkeyed fill: the acks (`ackedRows`, a `done` CTE returning the deleted rows'
 * keys), then the keys. Migration 9's claim differs only in its signature, its acks and its unkeyed fill.
 *
 * @internal
 */
export const keyedClaim = (t: string, seq: string, keys: string, ackedRows: string, byJoin = false) =>
  `  leased int := 0;
  unkeyed int := 0;
  rounds int := 0;
  acked_keys text[];
  candidates text[];
  heads bigint[];
  empty text[];
BEGIN
  IF relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  IF cardinality(acked) > 0 THEN
${ackedRows}
    SELECT array_agg(DISTINCT done.ordering_key) INTO acked_keys FROM done WHERE done.ordering_key IS NOT NULL;
  END IF;
  IF cardinality(acked_keys) > 0 THEN
    SELECT array_agg(a.ordering_key) INTO candidates FROM (
      SELECT k.ordering_key FROM ${keys} AS k
      WHERE k.queue_name = queue AND k.ordering_key = ANY(acked_keys) AND k.blocked_by IS NULL
      LIMIT batch_size
      FOR UPDATE SKIP LOCKED
    ) AS a;
    -- An acked key this claim does not take is due at once, for the next claimer — unless another claimer holds
    -- it, which settles it as it does any key it holds (waiting for it could deadlock on the acked row). Usually
    -- every acked key is taken; the look is skipped then (its filter compares each key with every one taken).
    IF coalesce(cardinality(candidates), 0) < cardinality(acked_keys) THEN
      UPDATE ${keys} AS k SET due_at = now()
      WHERE k.queue_name = queue AND k.ordering_key IN (
        SELECT r.ordering_key FROM ${keys} AS r
        WHERE r.queue_name = queue AND r.ordering_key = ANY(acked_keys)
          AND r.ordering_key <> ALL(coalesce(candidates, '{}'))
        FOR UPDATE SKIP LOCKED);
    END IF;
  END IF;

  LOOP
    IF candidates IS NULL THEN
      SELECT array_agg(due.ordering_key) INTO candidates FROM (
        SELECT k.ordering_key FROM ${keys} AS k
        WHERE k.queue_name = queue AND k.blocked_by IS NULL AND k.due_at <= now()
        ORDER BY k.due_at
        LIMIT batch_size - keyed
        FOR UPDATE SKIP LOCKED
      ) AS due;
      EXIT WHEN candidates IS NULL;
    END IF;
    rounds := rounds + 1;

    -- The candidates' heads (NULL: no row left).
    SELECT array_agg(h.id) INTO heads FROM unnest(candidates) AS c(k)
    LEFT JOIN LATERAL (
      SELECT m.id FROM ${t} AS m
      WHERE m.queue_name = queue AND m.ordering_key = c.k
      ORDER BY m.ordering_seq
      LIMIT 1
    ) AS h ON true;

    -- Keys with no row left: deleted once no producer holds their sequence, after a fresh look (this statement's).
    IF array_position(heads, NULL) IS NOT NULL THEN
      SELECT array_agg(s.ordering_key) INTO empty FROM (
        SELECT s.ordering_key FROM ${seq} AS s
        WHERE s.queue_name = queue AND s.ordering_key IN (
          SELECT c.k FROM unnest(candidates, heads) AS c(k, h) WHERE c.h IS NULL)
        FOR UPDATE SKIP LOCKED
      ) AS s;
      DELETE FROM ${keys} AS k WHERE k.queue_name = queue AND k.ordering_key = ANY(coalesce(empty, '{}'))
        AND NOT EXISTS (SELECT 1 FROM ${t} AS m WHERE m.queue_name = queue AND m.ordering_key = k.ordering_key);
    END IF;

    -- Every other candidate is due again: at its head's lease end once leased (below, or by another claimer), at
    -- its head's availability when delayed, in 100 ms when it had no row (a producer may be committing one).
${keysDueAgain(t, keys, "candidates")}
${leaseHeads(t, byJoin)}    GET DIAGNOSTICS leased = ROW_COUNT;
    keyed := keyed + leased;
    candidates := NULL;
    EXIT WHEN keyed >= batch_size OR rounds >= 3;
  END LOOP;

`

/**
 * The acked rows of `queue`, deleted through a join on their ids: a plan the function caches for its session
 * (PL/pgSQL's generic plan) then looks them up by primary key even on a table never analyzed, where `id =
 * ANY(acked) AND queue_name = queue` made it scan the claim index once per id.
 */
const ackedByJoin = (t: string) =>
  `    WITH done AS (DELETE FROM ${t} AS d USING unnest(acked) AS a(id)
      WHERE d.id = a.id AND d.queue_name = queue RETURNING d.ordering_key)`

/**
 * Migration 9's claim: migration 7's, with the floor of its unkeyed scan (`floor_ms`, from the worker: a little
 * below the oldest row its last claim took; NULL looks from the start, as the worker does every second for the
 * rows below any floor — released, redelivered after a lease, committed late) and its acks by primary key.
 */
export const claimFunctionV9 = (t: string, fn: string, seq: string, keys: string) =>
  `${claimSignature(fn, true)}${keyedClaim(t, seq, keys, ackedByJoin(t))}${unkeyedFillAndNextDue(t, keys, true)}`
