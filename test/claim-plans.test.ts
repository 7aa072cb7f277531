/**
 * The claim's plans on a table whose indexes hold the entries of thousands of deleted rows while it has a few live
 * ones — a queue under a steady load between two vacuums. A claim must read the index entries of those rows at most
 * (an ordered index scan marks them dead the first time it meets them, and later scans skip them), never the heap
 * page of each deleted row on every claim (a bitmap scan, which marks nothing), nor a whole index to find rows by id:
 * whether the table's statistics say it is nearly empty, or the connection's plans were made while it was. And a
 * session plans each statement of its claims once, not at every call.
 * The plans are read with `auto_explain`, whose output the server sends to this test's connection as notices; the
 * claims are the worker's own call (`claimCall`), on a connection of the test's.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import pg from "pg"
import { claimCall } from "../src/layers/pg/sql/transport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import { testDatabase } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"

const db = testDatabase("claim_plans")

/** A table set up by the transport's migrations. */
const setUp = (table: string) => db.withPg(Effect.scoped(Effect.asVoid(PgTransport.make({ table, autoSetup: true }))))

/** A connection whose statements' plans, and those of the functions they call, come back as notices. */
const explaining = async () => {
  const client = new pg.Client({ connectionString: db.url })
  await client.connect()
  await client.query("LOAD 'auto_explain'")
  for (
    const setting of [
      "auto_explain.log_min_duration = 0",
      "auto_explain.log_nested_statements = on",
      "auto_explain.log_analyze = on",
      "auto_explain.log_buffers = on",
      "auto_explain.log_level = notice"
    ]
  ) await client.query(`SET ${setting}`)
  return client
}

/** Adds `n` ready messages to the queue `outbox`, as the transport writes them. */
const send = (client: pg.Client, table: string, n: number) =>
  client.query(
    `INSERT INTO "${table}" (message_id, body, headers, queue_name, created_at, available_at)
     SELECT gen_random_uuid(), '{}', '{"type":"Test"}', 'outbox', now(), now() FROM generate_series(1, $1)`,
    [n]
  )

interface Claim {
  /** The ids it leased. */
  readonly ids: ReadonlyArray<string>
  /** The plans of the statements it ran inside the function. */
  readonly plans: ReadonlyArray<string>
}

/** One claim of `outbox` as a worker makes it (acks riding on it, relaxed, from the start of the index). */
const claim = async (client: pg.Client, table: string, size: number, acks: ReadonlyArray<string>): Promise<Claim> => {
  const text = claimCall(table)
  const plans: Array<string> = []
  const onNotice = (notice: { readonly message?: string | undefined }) => {
    // The call's own plan counts the buffers of every statement inside it again.
    if (notice.message?.includes("Query Text:") === true && !notice.message.includes(text)) plans.push(notice.message)
  }
  client.on("notice", onNotice)
  try {
    const { rows } = await client.query<{ id: string | null }>(text, ["outbox", 30_000, size, acks, true, null])
    return { ids: rows.flatMap((r) => (r.id === null ? [] : [r.id])), plans }
  } finally {
    client.off("notice", onNotice)
  }
}

/** Drains the queue in claims of 500, each acking the one before. */
const drain = async (client: pg.Client, table: string) => {
  let acks: ReadonlyArray<string> = []
  do {
    acks = (await claim(client, table, 500, acks)).ids
  } while (acks.length > 0)
}

/** Shared buffers (hit + read) of a plan's top node: the whole statement's. */
const buffersOf = (plan: string): number => {
  const line = plan.split("\n").find((l) => l.includes("Buffers:"))
  if (line === undefined) return 0
  const count = (kind: string) => Number(new RegExp(`${kind}=(\\d+)`).exec(line)?.[1] ?? 0)
  return count("hit") + count("read")
}

const heapPages = async (client: pg.Client, table: string) =>
  Number(
    (await client.query<{ pages: string }>(
      `SELECT pg_relation_size($1::regclass) / current_setting('block_size')::int AS pages`,
      [`"${table}"`]
    )).rows[0]!.pages
  )

/**
 * Waits until no transaction on the server holds a snapshot older than now. A scan marks an index entry dead only
 * when its row is dead to every snapshot, and on PostgreSQL 13 the snapshots of other databases (the other test
 * files') count too.
 */
const awaitOlderSnapshotsGone = async (client: pg.Client) => {
  const mark = (await client.query<{ xid: string }>(`SELECT (txid_current() % 4294967296)::text AS xid`)).rows[0]!.xid
  for (let polls = 0; polls < 600; polls++) {
    const { rows } = await client.query<{ older: string }>(
      `SELECT count(*) AS older FROM pg_stat_activity
       WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL AND age(backend_xmin) >= age($1::xid)`,
      [mark]
    )
    if (Number(rows[0]!.older) === 0) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error("a transaction older than the drain still holds its snapshot after 30 s")
}

/**
 * Two claims of 5 past the deleted rows' entries: the first meets them (and marks them dead), the second is
 * measured — it must read fewer buffers than half the table's pages (reading the heap page of each deleted row, or a
 * whole index per row found, is more).
 */
const expectCheapClaims = async (client: pg.Client, table: string) => {
  const bound = (await heapPages(client, table)) / 2
  let acks: ReadonlyArray<string> = []
  let buffers = Number.POSITIVE_INFINITY
  // On a busy machine a first claim may leave the entries unmarked — a snapshot the wait did not see (another test
  // file's transaction starting meanwhile) — and the second reads them all again: the pair runs again then (up to
  // four pairs of 5 on 40 live rows), and the second claim of the last pair must be cheap. A plan that reads the heap
  // per deleted row fails every pair.
  for (let attempt = 0; attempt < 4 && !(buffers < bound); attempt++) {
    await awaitOlderSnapshotsGone(client)
    const first = await claim(client, table, 5, acks)
    expect(first.ids).toHaveLength(5)
    const second = await claim(client, table, 5, first.ids)
    expect(second.ids).toHaveLength(5)
    if (process.env.SHOW_PLANS === "1") console.log(second.plans.join("\n"))
    const lookup = second.plans.find((p) => p.includes("ORDER BY ready.available_at, ready.id"))
    expect(lookup).toBeDefined()
    expect(lookup).not.toContain("Bitmap Heap Scan")
    buffers = second.plans.reduce((sum, p) => sum + buffersOf(p), 0)
    acks = second.ids
  }
  expect(buffers).toBeLessThan(bound)
}

/** A session's second claim of `size` (acking the first's rows), which must lease `size` rows. */
const secondClaim = async (client: pg.Client, table: string, size: number): Promise<Claim> => {
  const first = await claim(client, table, size, [])
  const second = await claim(client, table, size, first.ids)
  expect(second.ids).toHaveLength(size)
  if (process.env.SHOW_PLANS === "1") console.log(second.plans.join("\n"))
  return second
}

/** A fresh transport table, and an explaining connection to it for `f`. */
const onFreshTable = (prefix: string, f: (client: pg.Client, table: string) => Promise<void>) =>
  Effect.gen(function*() {
    const table = uniqueTable(prefix)
    yield* setUp(table)
    yield* Effect.promise(async () => {
      const client = await explaining()
      try {
        await f(client, table)
      } finally {
        await client.end()
      }
    })
  })

describe("the claim's plans", () => {
  it.live(
    "planned once per session: every statement of a claim runs a generic plan (the function's arguments as parameters)",
    () =>
      onFreshTable("plans_generic", async (client, table) => {
        await send(client, table, 20)
        const second = await secondClaim(client, table, 5)
        // A custom plan shows the queue's name and the ids as values; a generic one, the parameters they fill.
        const custom = second.plans.filter((p) => p.includes("'outbox'") || /'\{[0-9,]+\}'/.test(p))
        expect(custom).toEqual([])
        expect(second.plans.some((p) => p.includes("FROM unnest(found)"))).toBe(true)
      }),
    60_000
  )

  it.live(
    "statistics that say the table is nearly empty: a claim past 10 000 deleted rows reads their index entries, not their heap pages",
    () =>
      onFreshTable("plans_stats", async (client, table) => {
        await send(client, table, 10_000)
        await drain(client, table)
        await send(client, table, 40)
        // A few live rows on hundreds of pages, in new plans.
        await client.query(`ANALYZE "${table}"`)
        await expectCheapClaims(client, table)
      }),
    60_000
  )

  it.live(
    "a backlog never analyzed: a claim that acks 500 rows finds them by primary key, not among the whole queue",
    () =>
      onFreshTable("plans_never_analyzed", async (client, table) => {
        await send(client, table, 20_000)
        const second = await secondClaim(client, table, 500)
        // The acked rows are deleted, and the rows found leased, through the primary key, one probe per id.
        const byId = second.plans.filter((p) => p.includes("DELETE FROM") || p.includes("SET delivered_at = now()"))
        expect(byId).toHaveLength(2)
        for (const plan of byId) {
          expect(plan).toContain(`${table}_pkey`)
          expect(plan).not.toContain("Join Filter")
        }
      }),
    60_000
  )

  it.live(
    "plans made while the table was nearly empty: a claim past 10 000 deleted rows finds its rows by primary key",
    () =>
      onFreshTable("plans_kept", async (client, table) => {
        // A worker that started on a queue of a few messages: its connection has claimed often since.
        for (let i = 0; i < 10; i++) {
          await send(client, table, 2)
          await drain(client, table)
        }
        await send(client, table, 10_000)
        await drain(client, table)
        await send(client, table, 40)
        await expectCheapClaims(client, table)
      }),
    60_000
  )
})
