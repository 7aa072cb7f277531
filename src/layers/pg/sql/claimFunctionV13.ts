/**
 * The text of migration 13's claim function: migration 11's, charging a message only the crashes it caused. Kept
 * apart from the earlier versions, whose text is frozen; the fragments here are its own.
 *
 * @internal
 */

/**
 * What a lease writes on the rows it takes (migration 13), besides its start. `delivery_count` counts every claim
 * (as before; a release takes it back). `lease_state` says what the new lease is: 1 a redelivery — the row's
 * previous lease ended with no outcome (acks delete, retries, releases and failures clear `delivered_at`) — else 0;
 * the worker sets 2 when the handler of a redelivery starts, alone (`start` in `transport.ts`). `crash_count` grows
 * only when a lease that reached 2 ended with no outcome: the handler ran alone and its worker died or lost the
 * lease. A worker that only claimed the row, or ran it beside others, charges it nothing. Every count stops at the
 * largest integer.
 */
const leaseColumns = `delivered_at = now(),
      delivery_count = CASE WHEN m.delivery_count < 2147483647 THEN m.delivery_count + 1 ELSE m.delivery_count END,
      crash_count = CASE WHEN m.delivered_at IS NOT NULL AND m.lease_state = 2 AND m.crash_count < 2147483647
        THEN m.crash_count + 1 ELSE m.crash_count END,
      lease_state = CASE WHEN m.delivered_at IS NULL THEN 0 ELSE 1 END`

/** What a lease returns for each row it takes; `key` is the ordering key's expression. */
const leasedRow = (key: string) =>
  `m.id::text, m.message_id::text, m.body, m.headers,
      (extract(epoch FROM m.created_at) * 1000)::float8, (extract(epoch FROM m.available_at) * 1000)::float8,
      m.delivery_count, ${key}, m.crash_count, m.lease_state = 1`

/**
 * The plan settings of migration 11's claim, unchanged (see `claimFunctionV11.ts` for why each is there).
 */
const claimSettings = [
  "plan_cache_mode = force_generic_plan",
  "enable_seqscan = off",
  "enable_bitmapscan = off",
  "enable_hashjoin = off",
  "enable_mergejoin = off"
].map((setting) => `\nSET ${setting}`).join("")

/**
 * Migration 13's claim: migration 11's, whose result also has each message's `crash_count` and whether it is a
 * `redelivered` one, and whose leases write `leaseColumns`. Same arguments; a new result type, so the migration
 * drops the function first (workers of the previous version read the columns they know by name).
 */
export const claimFunctionV13 = (t: string, fn: string, seq: string, keys: string) =>
  `CREATE FUNCTION ${fn}(
  queue text, lease_ms float8, batch_size int, acked bigint[], relaxed boolean, floor_ms float8
) RETURNS TABLE (
  id text, message_id text, body text, headers text, created_ms float8, available_ms float8, delivery_count int,
  ordering_key text, crash_count int, redelivered boolean
) LANGUAGE plpgsql${claimSettings} AS $claim$
#variable_conflict use_column
DECLARE
  lease interval := lease_ms * interval '1 millisecond';
  keyed int := 0;
  floor_at timestamptz := coalesce('epoch'::timestamptz + floor_ms * interval '1 millisecond', '-infinity');
  found bigint[];
  leased int := 0;
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
    WITH done AS (DELETE FROM ${t} AS d USING unnest(acked) AS a(id)
      WHERE d.id = a.id AND (d.queue_name = queue) IS TRUE RETURNING d.ordering_key)
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
    UPDATE ${keys} AS k SET due_at = CASE
        WHEN m.id IS NULL THEN now() + interval '100 milliseconds'
        WHEN m.available_at > now() THEN m.available_at
        WHEN m.delivered_at IS NOT NULL AND m.delivered_at >= now() - lease AND m.delivered_at <> 'infinity'
          THEN m.delivered_at + lease
        ELSE now() + lease END
    FROM unnest(candidates, heads) AS c(k, h)
    LEFT JOIN ${t} AS m ON m.id = c.h
    WHERE k.queue_name = queue AND k.ordering_key = c.k;

    RETURN QUERY
    UPDATE ${t} AS m SET ${leaseColumns}
    FROM unnest(heads) AS h(id) WHERE m.id = h.id AND m.available_at <= now()
      AND (m.delivered_at IS NULL OR m.delivered_at < now() - lease OR m.delivered_at = 'infinity')
    RETURNING ${leasedRow("m.ordering_key")};
    GET DIAGNOSTICS leased = ROW_COUNT;
    keyed := keyed + leased;
    candidates := NULL;
    EXIT WHEN keyed >= batch_size OR rounds >= 3;
  END LOOP;

  IF keyed < batch_size THEN
    SELECT array_agg(next.id) INTO found FROM (
      SELECT ready.id FROM ${t} AS ready
      WHERE ready.queue_name = queue AND ready.ordering_key IS NULL
        AND ready.available_at >= floor_at AND ready.available_at <= now()
        AND (ready.delivered_at IS NULL OR ready.delivered_at < now() - lease OR ready.delivered_at = 'infinity')
      ORDER BY ready.available_at, ready.id
      LIMIT batch_size - keyed
      FOR UPDATE SKIP LOCKED
    ) AS next;
    IF found IS NOT NULL THEN
      RETURN QUERY
      UPDATE ${t} AS m SET ${leaseColumns}
      FROM unnest(found) AS f(id) WHERE m.id = f.id
      RETURNING ${leasedRow("NULL::text")};
      GET DIAGNOSTICS unkeyed = ROW_COUNT;
    END IF;
  END IF;

  IF keyed + unkeyed = 0 THEN
    RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::float8, ((extract(epoch FROM least(
      (SELECT available_at FROM ${t} WHERE queue_name = queue AND ordering_key IS NULL AND delivered_at IS NULL
        AND available_at >= floor_at
        ORDER BY available_at LIMIT 1),
      (SELECT min(delivered_at) FROM ${t} WHERE queue_name = queue AND ordering_key IS NULL AND available_at >= floor_at
        AND available_at <= now()
        AND delivered_at IS NOT NULL) + lease,
      (SELECT min(k.due_at) FROM ${keys} AS k WHERE k.queue_name = queue AND k.blocked_by IS NULL)
    )) - extract(epoch FROM now())) * 1000)::float8, NULL::int, NULL::text, NULL::int, NULL::boolean;
  END IF;
END
$claim$`
