/**
 * Profiling aid for ordering keys (not part of `npm run bench`): a candidate claim for keyed messages, in raw SQL on
 * a fresh embedded PostgreSQL, drained the way a worker with prefetch drains (two claims in flight: the next one is
 * taken while the previous batch is "handled"), over 10, 1 000 and 50 000 keys.
 *
 * The candidate ("head probe"): keyed rows carry `ordering_key` and `ordering_seq` (a per-key sequence taken from a
 * producers-only key table under its row lock, so sequence order is commit order); a claim walks the ready rows in
 * `(available_at, id)` order as today and takes a keyed row only when no earlier row of its key is left in the
 * queue (one index probe per keyed candidate). Nothing is maintained per key by workers.
 *
 *   npx tsx bench/ordering-claims.ts [messages, default 100000] [batch, default 500]
 */
import pg from "pg"
import * as EmbeddedPostgres from "../src/programs/EmbeddedPostgres.js"

const [messagesText = "100000", batchText = "500"] = process.argv.slice(2)
const messages = Number(messagesText)
const batch = Number(batchText)

const schema = `
DROP TABLE IF EXISTS om, ok;
CREATE TABLE om (
  id bigserial PRIMARY KEY,
  body text NOT NULL,
  headers text NOT NULL,
  queue_name text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  available_at timestamptz NOT NULL DEFAULT now(),
  delivered_at timestamptz,
  delivery_count int NOT NULL DEFAULT 0,
  ordering_key text,
  ordering_seq bigint
);
CREATE INDEX om_claim ON om (queue_name, available_at, id);
CREATE UNIQUE INDEX om_key ON om (queue_name, ordering_key, ordering_seq) WHERE ordering_key IS NOT NULL;
CREATE TABLE ok (queue_name text NOT NULL, ordering_key text NOT NULL, next_seq bigint NOT NULL,
  PRIMARY KEY (queue_name, ordering_key));
`

/** The candidate claim: $1 queue, $2 batch, $3 acked ids (deleted first, in the same transaction). */
const claimSql = `
WITH done AS (DELETE FROM om WHERE id = ANY($3::bigint[])),
next AS MATERIALIZED (
  SELECT r.id FROM om r
  WHERE r.queue_name = $1 AND r.available_at <= now()
    AND (r.delivered_at IS NULL OR r.delivered_at < now() - interval '30 seconds')
    AND (r.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM om e
      WHERE e.queue_name = r.queue_name AND e.ordering_key = r.ordering_key AND e.ordering_seq < r.ordering_seq
        AND NOT (e.id = ANY($3::bigint[]))))
  ORDER BY r.available_at, r.id
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
UPDATE om SET delivered_at = now(), delivery_count = om.delivery_count + 1
WHERE om.id = ANY(ARRAY(SELECT id FROM next))
RETURNING om.id::text, om.ordering_key, om.ordering_seq::text`

const seed = async (client: pg.Client, keys: number) => {
  await client.query(schema)
  // Messages spread round-robin over the keys, in sequence per key, as producers committing in turn would leave them.
  await client.query(
    `INSERT INTO om (body, headers, queue_name, ordering_key, ordering_seq)
     SELECT '{"n":' || g || '}', '{"type":"T"}', 'outbox', 'k' || (g % $2), g / $2 + 1
     FROM generate_series(0, $1::int - 1) AS g`,
    [messages, keys]
  )
  await client.query(
    `INSERT INTO ok SELECT 'outbox', ordering_key, max(ordering_seq) + 1 FROM om GROUP BY ordering_key`
  )
  await client.query("VACUUM ANALYZE om")
  await client.query("VACUUM ANALYZE ok")
}

/** Drains with two claims in flight; checks per-key order; returns msg/s and claim times. */
const drain = async (client: pg.Client) => {
  const lastSeq = new Map<string, number>()
  let violations = 0
  let handled = 0
  const claimMs: Array<number> = []
  let inFlight: Array<string> = []
  const started = performance.now()
  let empty = 0
  while (true) {
    const t0 = performance.now()
    // The previous batch is still in flight (prefetch): it is acked by the claim after this one.
    const { rows } = await client.query<{ id: string; ordering_key: string; ordering_seq: string }>(claimSql, [
      "outbox",
      batch,
      []
    ])
    claimMs.push(performance.now() - t0)
    for (const row of rows) {
      const seq = Number(row.ordering_seq)
      if ((lastSeq.get(row.ordering_key) ?? 0) !== seq - 1) violations++
      lastSeq.set(row.ordering_key, seq)
    }
    // Now the previous batch finishes: its acks ride on the next claim (here, a plain delete).
    if (inFlight.length > 0) await client.query("DELETE FROM om WHERE id = ANY($1::bigint[])", [inFlight])
    handled += inFlight.length
    inFlight = rows.map((r) => r.id)
    if (rows.length === 0) {
      if (++empty > 1) break
    } else empty = 0
  }
  const seconds = (performance.now() - started) / 1000
  const sorted = [...claimMs].sort((a, b) => a - b)
  return {
    rate: handled / seconds,
    claims: claimMs.length,
    p50: sorted[Math.floor(sorted.length * 0.5)]!,
    p99: sorted[Math.floor(sorted.length * 0.99)]!,
    violations,
    handled
  }
}

const main = async () => {
  const server = await EmbeddedPostgres.start()
  const client = new pg.Client({ connectionString: server.url })
  await client.connect()
  try {
    console.log(`head-probe claim, ${messages} messages, batch ${batch}, two claims in flight (prefetch)`)
    console.log("| keys | msg/s | claims | claim p50 ms | claim p99 ms | order violations |")
    console.log("|---:|---:|---:|---:|---:|---:|")
    for (const keys of [10, 1000, 50_000]) {
      await seed(client, keys)
      const r = await drain(client)
      if (r.handled !== messages) throw new Error(`handled ${r.handled} of ${messages}`)
      console.log(
        `| ${keys} | ${Math.round(r.rate)} | ${r.claims} | ${r.p50.toFixed(2)} | ${
          r.p99.toFixed(2)
        } | ${r.violations} |`
      )
    }
  } finally {
    await client.end()
    await server.stop()
  }
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
