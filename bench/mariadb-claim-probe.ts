/**
 * A probe of the MySQL claim's shape, on a private MariaDB server: the transport's claim (its texts, two round trips
 * in one READ COMMITTED transaction) against the same claim as a stored procedure (one round trip: a cursor over the
 * locking read, the lease and the rows by a JSON list of ids), each draining the same pre-inserted messages through
 * one `mysql2` connection, twice, alternating. Usage: npx tsx bench/mariadb-claim-probe.ts [messages] [batch].
 * BENCHMARKS.md ("MariaDB") says what it found.
 */
import { createConnection } from "mysql2/promise"
import { claimTexts } from "../src/layers/mysql/sql/transport.js"
import { startPrivateMariadb } from "../test/support/mariadb.js"
const server = await startPrivateMariadb()
const N = Number(process.argv[2] ?? 30000), B = Number(process.argv[3] ?? 500)
try {
  const admin = await createConnection({ uri: server.url, multipleStatements: true })
  const run = async (name: string, kind: "two" | "proc") => {
    await admin.query(`CREATE DATABASE ${name}`)
    const c = await createConnection({ uri: `${server.url}/${name}`, multipleStatements: true })
    await c.query(
      `CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, body LONGTEXT NOT NULL, headers LONGTEXT NOT NULL,
      queue_name VARCHAR(190) NOT NULL, created_at DATETIME(6) NOT NULL, available_at DATETIME(6) NOT NULL, delivered_at DATETIME(6) NULL,
      message_id CHAR(36) CHARACTER SET ascii NOT NULL, delivery_count INT NOT NULL DEFAULT 0,
      INDEX t_claim_idx (queue_name, available_at, delivered_at, id)) ENGINE=InnoDB DEFAULT CHARSET utf8mb4`
    )
    await c.query(
      `CREATE PROCEDURE t_claim(IN p_queue VARCHAR(190), IN p_lease_us BIGINT, IN p_batch INT, IN p_acks LONGTEXT)
BEGIN
  DECLARE v_id BIGINT;
  DECLARE done INT DEFAULT 0;
  DECLARE ids LONGTEXT DEFAULT '[';
  DECLARE cur CURSOR FOR SELECT id FROM t WHERE queue_name = p_queue AND available_at <= UTC_TIMESTAMP(6)
    AND (delivered_at IS NULL OR delivered_at < UTC_TIMESTAMP(6) - INTERVAL p_lease_us MICROSECOND)
    ORDER BY t.available_at, t.delivered_at, t.id LIMIT p_batch FOR UPDATE SKIP LOCKED;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  IF p_acks <> '[]' THEN
    DELETE t FROM t JOIN JSON_TABLE(p_acks, '$[*]' COLUMNS (jid BIGINT PATH '$')) AS j ON t.id = j.jid WHERE t.queue_name = p_queue;
  END IF;
  OPEN cur;
  fetching: LOOP
    FETCH cur INTO v_id;
    IF done = 1 THEN LEAVE fetching; END IF;
    SET ids = CONCAT(ids, IF(ids = '[', '', ','), v_id);
  END LOOP;
  CLOSE cur;
  SET ids = CONCAT(ids, ']');
  UPDATE t JOIN JSON_TABLE(ids, '$[*]' COLUMNS (jid BIGINT PATH '$')) AS j ON t.id = j.jid
    SET t.delivered_at = UTC_TIMESTAMP(6), t.delivery_count = t.delivery_count + 1;
  SELECT CAST(t.id AS CHAR) AS id, t.message_id, t.body, t.headers, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', t.created_at) AS created_us, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', t.available_at) AS available_us, t.delivery_count FROM t JOIN JSON_TABLE(ids, '$[*]' COLUMNS (jid BIGINT PATH '$')) AS j ON t.id = j.jid;
  COMMIT;
END`
    )
    for (let lo = 0; lo < N; lo += 1000) {
      const vals = Array.from(
        { length: Math.min(1000, N - lo) },
        (_, i) =>
          `('{"_tag":"BenchNoop","n":${
            lo + i
          }}', '{"type":"BenchNoop"}', 'outbox', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UUID())`
      )
      await c.query(
        `INSERT INTO t (body, headers, queue_name, created_at, available_at, message_id) VALUES ${vals.join(",")}`
      )
    }
    const texts = claimTexts("t")
    const t0 = performance.now()
    let handled = 0, acks: Array<number> = []
    while (true) {
      let rows: Array<{ id: string }>
      if (kind === "proc") {
        const [res] = await c.query("CALL t_claim(?, ?, ?, ?)", ["outbox", 30_000_000, B, JSON.stringify(acks)])
        rows = (res as Array<unknown>)[0] as Array<{ id: string }>
        if (rows.length === 0) break
      } else {
        const [results] = await c.query(
          texts.lock(B, acks.length > 0, true).text,
          acks.length > 0 ? ["outbox", acks, "outbox", 30_000_000] : ["outbox", 30_000_000]
        )
        rows = (results as Array<unknown>).at(-1) as Array<{ id: string }>
        if (rows.length === 0) {
          await c.query("COMMIT")
          break
        }
        await c.query(texts.lease(true), [rows.map((r) => Number(r.id))])
      }
      acks = rows.map((r) => Number(r.id))
      handled += rows.length
    }
    const s = (performance.now() - t0) / 1000
    console.log(`${kind} batch ${B}: ${handled} in ${s.toFixed(2)} s = ${Math.round(handled / s)} msg/s`)
    await c.end()
  }
  for (let r = 0; r < 2; r++) {
    await run(`two${r}`, "two")
    await run(`proc${r}`, "proc")
  }
  await admin.end()
} finally {
  await server.stop()
}
