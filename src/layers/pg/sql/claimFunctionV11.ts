/**
 * The text of migration 11's claim function: migration 9's, with plans that stay cheap whatever the table's
 * statistics say. Kept apart from the earlier versions (`claimFunctions.ts`), whose fragments it shares.
 *
 * @internal
 */
import { claimSignature, keyedClaim, nextDue } from "./claimFunctions.js"

/**
 * Migration 11's unkeyed fill and next-due answer: migration 9's, with the rows found leased by a statement of its
 * own, through a join on their ids (by primary key).
 */
const unkeyedFillAndNextDueV11 = (t: string, keys: string) =>
  `  IF keyed < batch_size THEN
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
      UPDATE ${t} AS m SET delivered_at = now(),
        delivery_count = CASE WHEN m.delivery_count < 2147483647 THEN m.delivery_count + 1 ELSE m.delivery_count END
      FROM unnest(found) AS f(id) WHERE m.id = f.id
      RETURNING m.id::text, m.message_id::text, m.body, m.headers,
        (extract(epoch FROM m.created_at) * 1000)::float8, (extract(epoch FROM m.available_at) * 1000)::float8,
        m.delivery_count, NULL::text;
      GET DIAGNOSTICS unkeyed = ROW_COUNT;
    END IF;
  END IF;

${nextDue(t, keys, true)}`

/**
 * The plan settings of migration 11's claim, for the call only (a caller's transaction keeps its own): index scans
 * and nested loops only. A queue's statistics and sizes change faster than autovacuum refreshes them, and each plan
 * the planner found cheapest on them read the whole table or one of its indexes at each claim:
 *
 * - under a steady load the table holds a few live rows and the index entries of every row deleted since the last
 *   vacuum, and its statistics say it is nearly empty: the next rows were looked up with a bitmap scan, which reads
 *   every entry of the range and the heap page of each, and never marks the entries of deleted rows dead as an
 *   ordered index scan does the first time it meets them — every claim read them all again;
 * - on a table never analyzed (a backlog written before the first autovacuum), acked rows were found by a hash join
 *   with every row of their queue.
 *
 * Every statement of the claim has an index that serves it; without these paths, it is the one taken. So each
 * statement is planned once per session (a generic plan: the planner would otherwise plan again at every call each
 * statement whose parameters it estimates better than its generic plan does — the lease's join on the ids found,
 * at half the cost of a claim of one message). A plan made while the table was small stays right as it grows: the
 * statements that find rows by id can use the primary key alone.
 */
const claimSettings = [
  "plan_cache_mode = force_generic_plan",
  "enable_seqscan = off",
  "enable_bitmapscan = off",
  "enable_hashjoin = off",
  "enable_mergejoin = off"
].map((setting) => `\nSET ${setting}`).join("")

/**
 * Migration 11's claim: migration 9's, with plans that stay cheap whatever the table's statistics say and however its
 * size changed since they were made (`claimSettings`); the rows found, and the heads of keys, are leased through a
 * join on their ids, which only the primary key serves.
 */
export const claimFunctionV11 = (t: string, fn: string, seq: string, keys: string) =>
  `${claimSignature(fn, true, claimSettings)}  found bigint[];
${keyedClaim(t, seq, keys, ackedByPrimaryKey(t), true)}${unkeyedFillAndNextDueV11(t, keys)}`

/**
 * The acked rows of `queue`, deleted through a join on their ids that only the primary key can serve (migration
 * 11): the queue's check is written so that no index takes it (`IS TRUE`) — on a table never analyzed, the planner
 * took it to the claim index and compared every row of the queue with every acked id.
 */
const ackedByPrimaryKey = (t: string) =>
  `    WITH done AS (DELETE FROM ${t} AS d USING unnest(acked) AS a(id)
      WHERE d.id = a.id AND (d.queue_name = queue) IS TRUE RETURNING d.ordering_key)`
