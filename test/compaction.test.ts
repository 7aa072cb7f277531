/**
 * Index compaction (`PgCompaction.compactIndexes`, `outbox storage:compact`): after a drain a vacuum empties the
 * table but leaves its indexes at their largest; compaction rebuilds the mostly empty ones without blocking producers
 * or workers, cleans up after a rebuild that was interrupted, and runs one at a time per table.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestServices from "effect/TestServices"
import pg from "pg"
import * as PgCompaction from "../src/layers/PgCompaction.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Cli from "../src/programs/Cli.js"
import { runCli } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"
import { outgoing } from "./support/messages.js"

const db = testDatabase("compaction")
const { withPg } = db

/** A table that held `n` messages, all deleted and vacuumed: an empty file, indexes at their largest. */
const drained = (n: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const table = uniqueTable("compact")
    const transport = yield* PgTransport.make({ table, autoSetup: true })
    for (let i = 0; i < n; i += 5000) yield* transport.send("outbox", Array.from({ length: 5000 }, () => outgoing(i)))
    yield* sql.unsafe(`DELETE FROM ${table}`)
    yield* sql.unsafe(`VACUUM ${table}`)
    return { table, transport }
  })

const invalidIndexes = (table: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ name: string }>`SELECT i.relname AS name FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
      WHERE x.indrelid = to_regclass(${table}) AND NOT x.indisvalid`.pipe(Effect.map((rows) => rows.map((r) => r.name)))
  )

/** A producer's transaction that wrote a row and stays open until `commit`: a rebuild waits for it. */
const openWriter = (table: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: db.url })
      await client.connect()
      await client.query("BEGIN")
      await client.query(
        `INSERT INTO ${table} (message_id, body, headers, queue_name, available_at)
         VALUES (gen_random_uuid(), '{}', '{}', 'elsewhere', now())`
      )
      return client
    }),
    (client) => Effect.promise(() => client.end())
  ).pipe(Effect.map((client) => ({ commit: Effect.promise(() => client.query("COMMIT")) })))

/** Until a `REINDEX CONCURRENTLY` of this database waits for writers; its backend's pid. On real time. */
const awaitRebuildWaiting = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (let i = 0; i < 1000; i++) {
    const rows = yield* sql<{ pid: number }>`SELECT pid FROM pg_stat_progress_create_index
      WHERE datname = current_database() AND command = 'REINDEX CONCURRENTLY' AND phase LIKE 'waiting for%'`
    if (rows.length > 0) return rows[0]!.pid
    yield* Effect.sleep("10 millis")
  }
  return yield* Effect.dieMessage("no rebuild ever waited")
}).pipe(TestServices.provideLive)

describe("index compaction", () => {
  it.live("rebuilds the indexes a drain left mostly empty, and only those", () =>
    withPg(Effect.gen(function*() {
      const { table } = yield* drained(40_000)
      const done = Option.getOrThrow(yield* PgCompaction.compactIndexes({ table, minBytes: 256 * 1024 }))
      expect(done.dropped).toEqual([])
      const byName = new Map(done.indexes.map((index) => [index.index, index]))
      for (const name of [`${table}_pkey`, `${table}_message_id_idx`, `${table}_unkeyed_idx`]) {
        const index = byName.get(name)!
        expect(index.bytesBefore).toBeGreaterThan(256 * 1024)
        expect(index.rebuilt).toBe(true)
        expect(index.bytesAfter).toBeLessThanOrEqual(16 * 1024)
      }
      // The companion tables' indexes are small: left alone.
      for (const name of [`${table}_keys_pkey`, `${table}_waiting_pkey`]) expect(byName.get(name)!.rebuilt).toBe(false)
      // A second run finds nothing to do.
      const again = Option.getOrThrow(yield* PgCompaction.compactIndexes({ table }))
      expect(again.indexes.filter((index) => index.rebuilt)).toEqual([])
    })), 120_000)

  it.live("keeps an index its rows fill, however large", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("compact_full")
      const transport = yield* PgTransport.make({ table, autoSetup: true })
      for (let i = 0; i < 40_000; i += 5000) {
        yield* transport.send("outbox", Array.from({ length: 5000 }, () => outgoing(i)))
      }
      yield* sql.unsafe(`VACUUM ${table}`)
      const done = Option.getOrThrow(yield* PgCompaction.compactIndexes({ table }))
      const claim = done.indexes.find((index) => index.index === `${table}_unkeyed_idx`)!
      expect(claim.bytesBefore).toBeGreaterThan(1024 * 1024)
      expect(claim.rebuilt).toBe(false)
    })), 120_000)

  it.live("blocks neither producers nor workers while it rebuilds", () =>
    withPg(Effect.scoped(Effect.gen(function*() {
      const { table, transport } = yield* drained(5000)
      const writer = yield* openWriter(table)
      const compaction = yield* Effect.fork(PgCompaction.compactIndexes({ table, force: true }))
      yield* awaitRebuildWaiting
      // The rebuild waits for the open writer; meanwhile a producer commits and a worker claims and acks.
      yield* transport.send("outbox", [outgoing(1)])
      const session = yield* transport.open(["outbox"])
      const claimed = yield* session.claim("outbox", 10, [])
      expect(claimed.messages.length).toBe(1)
      yield* session.claim("outbox", 10, [claimed.messages[0]!.id])
      expect(compaction.unsafePoll()).toBeNull()
      yield* writer.commit
      const done = Option.getOrThrow(yield* Fiber.join(compaction))
      expect(done.indexes.every((index) => index.rebuilt)).toBe(true)
      expect(yield* invalidIndexes(table)).toEqual([])
    }))), 120_000)

  it.live("drops what an interrupted rebuild left, then rebuilds", () =>
    withPg(Effect.scoped(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const { table } = yield* drained(5000)
      const writer = yield* openWriter(table)
      const compaction = yield* Effect.fork(PgCompaction.compactIndexes({ table, force: true }))
      const pid = yield* awaitRebuildWaiting
      yield* sql`SELECT pg_cancel_backend(${pid})`
      const cancelled = yield* Fiber.await(compaction)
      expect(Exit.isFailure(cancelled)).toBe(true)
      yield* writer.commit
      const left = yield* invalidIndexes(table)
      expect(left.length).toBe(1)
      expect(left[0]).toMatch(/_ccnew$/)
      // The cancelled compactor let go of its lock: the next one runs, drops the leftover, rebuilds.
      const done = Option.getOrThrow(yield* PgCompaction.compactIndexes({ table }))
      expect(done.dropped).toEqual(left)
      expect(yield* invalidIndexes(table)).toEqual([])
    }))), 120_000)

  it.live("runs one compactor per table at a time", () =>
    withPg(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { table } = yield* drained(5000)
        const held = yield* sql.reserve
        yield* held.execute("SELECT pg_advisory_lock(hashtext($1))", [`effect-outbox:compact:${table}`], undefined)
        expect(yield* PgCompaction.compactIndexes({ table, force: true })).toEqual(Option.none())
        yield* held.execute("SELECT pg_advisory_unlock(hashtext($1))", [`effect-outbox:compact:${table}`], undefined)
        expect(Option.isSome(yield* PgCompaction.compactIndexes({ table }))).toBe(true)
      }).pipe(Effect.scoped)
    ), 120_000)

  it.live("outbox storage:compact prints what it rebuilt", () =>
    withPg(Effect.gen(function*() {
      const { table } = yield* drained(40_000)
      const cli = Cli.make({ transport: { table } })
      const result = yield* runCli(cli, ["storage:compact", "--min-size", "256K", "--dsn", db.url])
      const lines = result.stdout.trim().split("\n")
      expect(lines[0]).toMatch(/^INDEX +\| BEFORE +\| AFTER +\|$/)
      expect(lines.find((line) => line.startsWith(`${table}_unkeyed_idx `))).toMatch(/MB \| (8|16) kB +\| rebuilt$/)
      expect(lines.find((line) => line.startsWith(`${table}_waiting_pkey `))).toMatch(/\| kept$/)
      expect(lines.at(-1)).toMatch(/^\[OK\] Rebuilt 3 of 9 index\(es\): [\d.]+ MB → [\d.]+ kB\.$/)
      const bad = yield* runCli(cli, ["storage:compact", "--min-size", "big", "--dsn", db.url])
      expect(bad.stderr + bad.stdout).toContain("--min-size: expected a size such as 1M, got big")
    })), 120_000)
})
