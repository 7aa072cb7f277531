/**
 * Profiling aid (not part of `npm run bench`): the dispatch statements of two versions of the transport, side by
 * side on one server — each version's migrations on a database of its own, then short rounds of its single-message
 * sends (unkeyed, and keyed over 1 000 keys) on one connection each, the two versions interleaved round by round so
 * that a busy machine slows both alike. Prints the median microseconds per send of each, and the size of each
 * table's indexes after the unkeyed sends.
 *
 *   npx tsx bench/dispatch-ab.ts <other checkout> [rounds] [sends per round]
 *
 * `<other checkout>` is a directory holding another version's `src/` (e.g. `git archive <commit> | tar -x -C dir`).
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as path from "node:path"
import pg from "pg"
import { freshDatabase, startCluster } from "./cluster.js"

const [other, roundsArg, sendsArg] = process.argv.slice(2)
if (other === undefined) throw new Error("usage: npx tsx bench/dispatch-ab.ts <other checkout> [rounds] [sends]")
const rounds = Number(roundsArg ?? "20")
const sends = Number(sendsArg ?? "500")
const table = "messenger_messages"

interface Version {
  readonly name: string
  readonly url: string
  readonly unkeyed: (n: number) => readonly [string, ReadonlyArray<unknown>]
  readonly keyed: (n: number) => readonly [string, ReadonlyArray<unknown>]
}

const load = async (name: string, root: string, adminUrl: string): Promise<Version> => {
  const Transport = await import(path.join(root, "src/layers/PgTransport.ts"))
  const Statements = await import(path.join(root, "src/layers/pg/sql/transport.ts"))
  const db = await freshDatabase(adminUrl, name)
  const layer = PgClient.layer({ url: Redacted.make(db.url), maxConnections: 1 })
  type Compiled = Pick<Version, "unkeyed" | "keyed">
  const compiled = await Effect.runPromise(Effect.scoped(
    Effect.gen(function*() {
      yield* (yield* Transport.make({ table })).setup
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const statements = Statements.make(sql, table, { channel: "bench" })
      const message = (n: number) => ({
        messageId: crypto.randomUUID(),
        body: `{"_tag":"BenchNoop","n":${n}}`,
        headers: `{"type":"BenchNoop"}`,
        delayMs: 0
      })
      return {
        unkeyed: (n: number) => statements.insertOne("outbox", message(n)).compile(),
        keyed: (n: number) =>
          statements.insertOneKeyed("outbox", { ...message(n), orderingKey: `account-${n % 1000}` }).compile()
      }
    }).pipe(Effect.provide(layer))
  ) as Effect.Effect<Compiled, unknown>)
  return { name, url: db.url, ...compiled }
}

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const cluster = await startCluster({ noFsync: true, log: console.error })
try {
  const versions = [
    await load("other", path.resolve(other), cluster.adminUrl),
    await load("this", path.resolve(import.meta.dirname, ".."), cluster.adminUrl)
  ]
  const clients = await Promise.all(versions.map(async (v) => {
    const client = new pg.Client({ connectionString: v.url })
    await client.connect()
    await client.query("SET synchronous_commit = off")
    return client
  }))
  for (const kind of ["unkeyed", "keyed"] as const) {
    const perSend = versions.map(() => [] as Array<number>)
    let n = 0
    for (let round = 0; round < rounds; round++) {
      // Each version goes first every other round: what one leaves the server doing must not fall on the other alone.
      for (const i of round % 2 === 0 ? [0, 1] : [1, 0]) {
        const version = versions[i]!
        const started = performance.now()
        for (let s = 0; s < sends; s++) {
          const [text, params] = version[kind](n++)
          await clients[i]!.query(text, params as Array<unknown>)
        }
        perSend[i]!.push(((performance.now() - started) * 1000) / sends)
      }
    }
    for (const [i, version] of versions.entries()) {
      console.log(`${kind.padEnd(8)} ${version.name.padEnd(6)} median ${median(perSend[i]!).toFixed(1)} µs per send`)
    }
    if (kind === "unkeyed") {
      for (const [i, version] of versions.entries()) {
        const { rows } = await clients[i]!.query(
          `SELECT indexrelid::regclass::text AS name, pg_relation_size(indexrelid) AS bytes FROM pg_index
           WHERE indrelid = $1::regclass ORDER BY 1`,
          [table]
        )
        const total = rows.reduce((sum, row) => sum + Number(row.bytes), 0)
        console.log(
          `indexes  ${version.name.padEnd(6)} ${(total / 1024 / 1024).toFixed(1)} MB after ${n} sends: ` +
            rows.map((row) => `${row.name} ${(Number(row.bytes) / 1024 / 1024).toFixed(1)} MB`).join(", ")
        )
      }
    }
  }
  // Claims of 500 (acking the previous 500) over the same backlog of unkeyed rows in each, interleaved.
  const claimTexts = await Promise.all(
    [path.resolve(other), path.resolve(import.meta.dirname, "..")].map(async (root) =>
      (await import(path.join(root, "src/layers/pg/sql/transport.ts"))).claimCall(table) as string
    )
  )
  for (const client of clients) {
    await client.query(
      `INSERT INTO ${table} (message_id, body, headers, queue_name, created_at, available_at)
       SELECT gen_random_uuid(), '{"_tag":"BenchNoop","n":' || g || '}', '{"type":"BenchNoop"}', 'bench', now(), now()
       FROM generate_series(1, $1::int) AS g`,
      [500 * rounds]
    )
    await client.query(`VACUUM ANALYZE ${table}`)
  }
  const perMessage = versions.map(() => [] as Array<number>)
  const acks = versions.map(() => [] as Array<string>)
  for (let round = 0; round < rounds; round++) {
    for (const i of round % 2 === 0 ? [0, 1] : [1, 0]) {
      const started = performance.now()
      const { rows } = await clients[i]!.query(claimTexts[i]!, ["bench", 30_000, 500, acks[i], true, null])
      perMessage[i]!.push(((performance.now() - started) * 1000) / Math.max(1, rows.length))
      acks[i] = rows.filter((row) => row.id !== null).map((row) => row.id)
    }
  }
  for (const [i, version] of versions.entries()) {
    console.log(`claim    ${version.name.padEnd(6)} median ${median(perMessage[i]!).toFixed(1)} µs per message claimed`)
  }
  for (const client of clients) await client.end()
} finally {
  await cluster.stop()
}
