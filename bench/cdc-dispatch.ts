/**
 * CDC dispatch, measured before it is built (issue 37): what writing one event for Debezium costs the producer's
 * transaction, against today's polled outbox row. Each transaction inserts one business row and 1 (or 10) events of
 * a ~300-byte JSON payload, in one of these ways:
 *
 * - `none`: the business row alone;
 * - `outbox` (c): the row `PgTransport` stores (our migrations' `messenger_messages`), left in place for a poller, by
 *   a plain INSERT as bench/bare-insert.ts writes it (the "bare INSERT" of the 0.9× target);
 * - `insdel` (a): an INSERT into an Event Router table (`id`, `aggregatetype`, `aggregateid`, `type`, `payload`,
 *   `traceparent`), then a DELETE of the same ids: the table stays empty, the WAL keeps the insert;
 * - `trigger` (a'): the same INSERT, the DELETE done by a statement trigger (one statement for the producer);
 * - `message` (b): `pg_logical_emit_message(true, 'outbox', <event as JSON>)`, no table.
 *
 * Each run has a fresh database on one embedded cluster (`wal_level=logical`, autovacuum off so that the VACUUM after
 * the run does, and reports, all the cleaning). With `slot`, a pgoutput slot on a publication of the event table
 * (`publish = 'insert'`, `messages` on for `message`) is drained by a loop of `pg_logical_slot_get_binary_changes`
 * while the producers run, and the decoded inserts or messages are counted against the events committed.
 *
 *   npx tsx bench/cdc-dispatch.ts [seconds per run = 3] [repeats = 3] [--no-fsync]
 *
 * Prints progress on stderr and the markdown tables (medians of the repeats) on stdout.
 */
import { randomBytes } from "node:crypto"
import * as os from "node:os"
import pg from "pg"
import * as MessageId from "../src/domain/MessageId.js"
import { freshDatabase, serverInfo, startLogicalCluster } from "./cluster.js"
import { queue, table as outboxTable } from "./common.js"
import { setup as setupOutbox } from "./ours.js"

type Mode = "none" | "outbox" | "insdel" | "trigger" | "message"

/** One measured configuration: the mode, a slot drained during the run or not, events per transaction, producers. */
interface Case {
  readonly mode: Mode
  readonly slot: boolean
  readonly events: number
  readonly producers: number
}

const args = process.argv.slice(2).filter((a) => !a.startsWith("--"))
const seconds = Number(args[0] ?? 3)
const repeats = Number(args[1] ?? 3)
const noFsync = process.argv.includes("--no-fsync")
const log = (line: string) => process.stderr.write(`${line}\n`)

/** A 300-byte JSON body, as an application's encoded event would be. */
const payload = (order: string, n: number) =>
  `{"_tag":"OrderPlaced","orderId":"${order}","line":${n},"customer":{"id":"c-81734","name":"Ada Lovelace",` +
  `"email":"ada@example.org"},"items":[{"sku":"SKU-000123","qty":2,"price":"19.90"},{"sku":"SKU-004711",` +
  `"qty":1,"price":"249.00"}],"total":"288.80","currency":"EUR","placedAt":"2026-12-08T00:00:00.000Z"}`

const traceparent = () => `00-${randomBytes(16).toString("hex")}-${randomBytes(8).toString("hex")}-01`

/**
 * `payload` is `text`: the table stays empty, so jsonb's parse on every insert buys nothing, and text keeps the
 * encoded body byte for byte (the router forwards jsonb as normalised text: keys reordered, spaces changed).
 */
const schema = [
  "CREATE TABLE orders (id bigserial PRIMARY KEY, ref text NOT NULL, total numeric NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
  `CREATE TABLE outbox_event (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
    type text NOT NULL, payload text, traceparent text)`,
  "CREATE PUBLICATION cdc_bench FOR TABLE outbox_event WITH (publish = 'insert')"
]

/** The DELETE of `trigger`, run once per INSERT statement on the rows it inserted. */
const forgetTrigger = [
  `CREATE FUNCTION outbox_event_forget() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN DELETE FROM outbox_event AS e USING inserted AS i WHERE e.id = i.id; RETURN NULL; END $$`,
  `CREATE TRIGGER outbox_event_forget AFTER INSERT ON outbox_event REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_event_forget()`
]

/** The producer's transaction: BEGIN, the business row, the events the mode writes, COMMIT. */
const transaction = async (client: pg.Client, mode: Mode, ref: string, count: number): Promise<void> => {
  const trace = traceparent()
  const events = Array.from({ length: count }, (_, n) => ({
    id: MessageId.make() as string,
    aggregatetype: "Order",
    aggregateid: ref,
    type: "OrderPlaced",
    payload: payload(ref, n),
    traceparent: trace
  }))
  const column = (name: keyof typeof events[number]) => events.map((event) => event[name])
  const ids = column("id")
  await client.query("BEGIN")
  await client.query("INSERT INTO orders (ref, total) VALUES ($1, 288.80)", [ref])
  if (mode === "outbox") {
    await client.query(
      `INSERT INTO ${outboxTable} (message_id, body, headers, queue_name, created_at, available_at)
        SELECT m, b, $3, $4, now(), now() FROM unnest($1::uuid[], $2::text[]) AS x(m, b)`,
      [ids, column("payload"), JSON.stringify({ type: "OrderPlaced", traceparent: trace }), queue]
    )
  } else if (mode === "insdel" || mode === "trigger") {
    await client.query(
      `INSERT INTO outbox_event (id, aggregatetype, aggregateid, type, payload, traceparent)
        SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])`,
      [ids, column("aggregatetype"), column("aggregateid"), column("type"), column("payload"), column("traceparent")]
    )
    if (mode === "insdel") await client.query("DELETE FROM outbox_event WHERE id = ANY($1::uuid[])", [ids])
  } else if (mode === "message") {
    // The content is the Event Router's row as JSON (payload a JSON string, as in the table's text column).
    await client.query("SELECT pg_logical_emit_message(true, 'outbox', c) FROM unnest($1::text[]) AS c", [
      events.map((event) => JSON.stringify(event))
    ])
  }
  await client.query("COMMIT")
}

/** Drains the slot: decoded inserts + messages of this call (pgoutput's first byte: 'I' = 73, 'M' = 77). */
const decode = async (client: pg.Client, messages: boolean): Promise<{ events: number; changes: number }> => {
  const { rows } = await client.query<{ events: number; changes: number }>(
    `SELECT count(*) FILTER (WHERE get_byte(data, 0) IN (73, 77))::int AS events, count(*)::int AS changes
      FROM pg_logical_slot_get_binary_changes('cdc_bench', NULL, 20000,
        'proto_version', '1', 'publication_names', 'cdc_bench', 'messages', $1)`,
    [String(messages)]
  )
  return rows[0]!
}

const connect = async (url: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  return client
}

const lsn = async (client: pg.Client) =>
  BigInt((await client.query<{ l: string }>("SELECT (pg_current_wal_lsn() - '0/0')::text AS l")).rows[0]!.l)

/** Waits until the producers' ended backends have flushed their table statistics (as many orders as committed). */
const statsFlushed = async (client: pg.Client, committed: number) => {
  for (let i = 0; i < 100; i++) {
    const { rows } = await client.query("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'orders'")
    if (Number(rows[0]?.n_tup_ins ?? 0) >= committed) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  log("  (statistics not flushed after 5 s: n_tup_* may be low)")
}

const relationBytes = async (client: pg.Client, rel: string) =>
  Number((await client.query("SELECT pg_total_relation_size($1) AS b", [rel])).rows[0]!.b)

/** VACUUM (VERBOSE) of the table the mode writes, with what it reports removed and the WAL it wrote. */
const vacuum = async (client: pg.Client, rel: string) => {
  const stat = (await client.query("SELECT n_tup_del, n_dead_tup FROM pg_stat_user_tables WHERE relname = $1", [rel]))
    .rows[0]!
  const bytesBefore = await relationBytes(client, rel)
  const notices: Array<string> = []
  const onNotice = (notice: { readonly message?: string | undefined }) => notices.push(notice.message ?? "")
  client.on("notice", onNotice)
  const before = await lsn(client)
  const start = performance.now()
  await client.query(`VACUUM (VERBOSE) ${rel}`)
  const ms = performance.now() - start
  const walBytes = Number((await lsn(client)) - before)
  client.off("notice", onNotice)
  const report = notices.find((n) => n.startsWith(`finished vacuuming`) && !n.includes("pg_toast")) ?? ""
  const number = (re: RegExp) => Number(re.exec(report)?.[1] ?? NaN)
  return {
    tupDel: Number(stat.n_tup_del),
    deadTup: Number(stat.n_dead_tup),
    removed: number(/tuples: (\d+) removed/),
    deadItems: number(/had (\d+) dead item identifiers removed/) || 0,
    walBytes,
    ms,
    bytesBefore,
    bytesAfter: await relationBytes(client, rel)
  }
}

/** One timed run of a case on a fresh database. */
const runCase = async (adminUrl: string, c: Case) => {
  const db = await freshDatabase(adminUrl, `cdc_${c.mode}`)
  try {
    if (c.mode === "outbox") await setupOutbox(db.url)
    const admin = await connect(db.url)
    try {
      for (const statement of [...schema, ...(c.mode === "trigger" ? forgetTrigger : [])]) await admin.query(statement)
      if (c.slot) await admin.query("SELECT pg_create_logical_replication_slot('cdc_bench', 'pgoutput')")
      await admin.query("VACUUM ANALYZE")
      await admin.query("CHECKPOINT")
      const producers = await Promise.all(Array.from({ length: c.producers }, () => connect(db.url)))
      const slotReader = c.slot ? await connect(db.url) : undefined
      let running = true
      let decoded = 0
      const reading = (async () => {
        while (slotReader !== undefined) {
          // Only a call that starts after the last commit is sure to see it: an empty answer ends the loop then.
          const last = !running
          const got = await decode(slotReader, c.mode === "message")
          decoded += got.events
          if (got.changes === 0 && last) return
          if (got.changes === 0) await new Promise((resolve) => setTimeout(resolve, 20))
        }
      })()
      const lsnBefore = await lsn(admin)
      let committed = 0
      const start = performance.now()
      const deadline = start + seconds * 1000
      await Promise.all(producers.map(async (client, p) => {
        for (let i = 0; performance.now() < deadline; i++) {
          await transaction(client, c.mode, `order-${p}-${i}`, c.events)
          committed++
        }
      }))
      const elapsed = (performance.now() - start) / 1000
      const walBytes = Number((await lsn(admin)) - lsnBefore)
      running = false
      await reading
      await Promise.all([...producers, ...(slotReader ? [slotReader] : [])].map((client) => client.end()))
      if (c.slot) await admin.query("SELECT pg_drop_replication_slot('cdc_bench')")
      await statsFlushed(admin, committed)
      const rel = c.mode === "outbox" ? outboxTable : c.mode === "insdel" || c.mode === "trigger" ? "outbox_event" : ""
      return {
        tps: committed / elapsed,
        walPerTx: walBytes / committed,
        events: committed * (c.mode === "none" ? 0 : c.events),
        decoded: c.slot ? decoded : undefined,
        vacuum: rel === "" || c.slot ? undefined : await vacuum(admin, rel)
      }
    } finally {
      await admin.end()
    }
  } finally {
    await db.drop()
  }
}

type Vacuum = Awaited<ReturnType<typeof vacuum>>
type Run = Awaited<ReturnType<typeof runCase>>

const spread = (values: ReadonlyArray<number>) => `${fmt(Math.min(...values))} – ${fmt(Math.max(...values))}`
/** How many runs' slots gave exactly the events committed, and the totals decoded / committed. */
const exact = (runs: ReadonlyArray<Run>) => {
  const sum = (f: (r: Run) => number) => runs.reduce((total, r) => total + f(r), 0)
  return `${runs.filter((r) => r.decoded === r.events).length} of ${runs.length} runs ` +
    `(${sum((r) => r.decoded ?? 0)} / ${sum((r) => r.events)})`
}
const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
const fmt = (n: number, digits = 0) => Number.isFinite(n) ? n.toFixed(digits) : "–"
const label: Record<Mode, string> = {
  none: "business row only",
  outbox: "(c) outbox row (polled)",
  insdel: "(a) insert + delete",
  trigger: "(a') insert, delete by trigger",
  message: "(b) pg_logical_emit_message"
}

const out = (line: string) => process.stdout.write(`${line}\n`)
const row = (cells: ReadonlyArray<string | number>) => out(`| ${cells.join(" | ")} |`)

/** Prints a markdown table: a column per `[heading, cell]`, a row per item. */
const table = <A>(columns: ReadonlyArray<readonly [string, (a: A) => string | number]>, items: ReadonlyArray<A>) => {
  row(columns.map(([heading]) => heading))
  row(columns.map((_, i) => i === 0 ? "---" : "--:"))
  for (const item of items) row(columns.map(([, cell]) => cell(item)))
}

const server = await startLogicalCluster({ noFsync, log, autovacuum: false })
try {
  const info = await serverInfo(server.url)
  const withSlot = new Set<Mode>(["insdel", "trigger", "message"])
  const cases: Array<Case> = [1, 10].flatMap((events) =>
    [1, 8].flatMap((producers) =>
      (["none", "outbox", "insdel", "trigger", "message"] as const).flatMap((mode) =>
        [false, ...(withSlot.has(mode) ? [true] : [])].map((slot) => ({ mode, slot, events, producers }))
      )
    )
  )
  const results = new Map<Case, Array<Run>>(cases.map((c) => [c, []]))
  // Round by round over every case, every other round backwards: a load that comes and goes on the shared machine
  // falls on all of them alike.
  for (let round = 1; round <= repeats; round++) {
    for (const c of round % 2 === 1 ? cases : [...cases].reverse()) {
      const run = await runCase(server.url, c)
      results.get(c)!.push(run)
      const decoded = run.decoded !== undefined ? `, decoded ${run.decoded}/${run.events}` : ""
      log(
        `${round} ${label[c.mode]}${c.slot ? " +slot" : ""} ${c.events}×${c.producers}: ${fmt(run.tps)} tx/s${decoded}`
      )
    }
  }
  const of = (c: Case, f: (r: Run) => number) => median(results.get(c)!.map(f))
  const find = (mode: Mode, c: Case) =>
    cases.find((x) => x.mode === mode && !x.slot && x.events === c.events && x.producers === c.producers)!
  const settings = Object.entries(info.settings).map(([k, v]) => `${k}=${v}`).join(", ")
  out(
    `PostgreSQL ${info.version}, ${settings}, autovacuum=off; ${os.cpus().length} cores, load at the end ` +
      `${os.loadavg().map((l) => l.toFixed(1)).join(" ")}; ${seconds} s per run, median of ${repeats}; pg 8.23.1\n`
  )
  const ratio = (c: Case, mode: Mode, f: (r: Run) => number) => fmt(of(c, f) / of(find(mode, c), f), 2)
  const perEvent = (c: Case, bytes: number) => c.mode === "none" ? "–" : fmt(bytes / c.events)
  const tps = (r: Run) => r.tps
  const wal = (r: Run) => r.walPerTx
  table<Case>([
    ["dispatch", (c) => label[c.mode]],
    ["slot drained", (c) => c.slot ? "yes" : "no"],
    ["events/tx", (c) => c.events],
    ["producers", (c) => c.producers],
    ["tx/s", (c) => fmt(of(c, tps))],
    ["min – max", (c) => spread(results.get(c)!.map(tps))],
    ["× (c)", (c) => ratio(c, "outbox", tps)],
    ["× business only", (c) => ratio(c, "none", tps)],
    ["WAL B/tx", (c) => fmt(of(c, wal))],
    ["WAL B/event", (c) => perEvent(c, of(c, wal))],
    ["net B/event", (c) => perEvent(c, of(c, wal) - of(find("none", c), wal))],
    ["WAL × (c)", (c) => ratio(c, "outbox", wal)],
    ["decoded = committed", (c) => c.slot ? exact(results.get(c)!) : "–"]
  ], cases)
  out("")
  const v = (c: Case, f: (v: Vacuum, r: Run) => number) => of(c, (r) => f(r.vacuum!, r))
  table<Case>([
    ["dispatch", (c) => label[c.mode]],
    ["events/tx", (c) => c.events],
    ["producers", (c) => c.producers],
    ["events", (c) => fmt(v(c, (_, r) => r.events))],
    ["n_tup_del", (c) => fmt(v(c, (x) => x.tupDel))],
    ["n_dead_tup", (c) => fmt(v(c, (x) => x.deadTup))],
    ["VACUUM: tuples removed", (c) => fmt(v(c, (x) => x.removed))],
    ["dead item ids removed", (c) => fmt(v(c, (x) => x.deadItems))],
    ["VACUUM WAL B/event", (c) => fmt(v(c, (x, r) => x.walBytes / r.events), 1)],
    ["VACUUM ms", (c) => fmt(v(c, (x) => x.ms))],
    [
      "table+indexes kB before → after",
      (c) => `${fmt(v(c, (x) => x.bytesBefore) / 1024)} → ${fmt(v(c, (x) => x.bytesAfter) / 1024)}`
    ],
    ["B/event before", (c) => fmt(v(c, (x, r) => x.bytesBefore / r.events), 1)]
  ], cases.filter((c) => !c.slot && c.mode !== "none" && c.mode !== "message"))
} finally {
  await server.stop()
}
