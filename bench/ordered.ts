/**
 * Profiling aid for ordering keys (not yet part of `npm run bench`): burn-downs of ours (batch 500, concurrency 8)
 * over 50 000 messages spread on 10, 1 000 and 50 000 ordering keys, against the same messages without keys, on
 * fresh databases of one embedded PostgreSQL (or DATABASE_URL). Rows are seeded in the shape a keyed dispatch
 * writes (places per key, the keys' rows), round-robin over the keys.
 *
 *   npx tsx --import ./bench/compiled-library.mjs bench/ordered.ts [messages, default 50000]
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Worker from "../src/programs/worker/Worker.js"
import { freshDatabase, settle, startCluster, withClient } from "./cluster.js"
import { clock, queue, table } from "./common.js"
import * as Ours from "./ours.js"

const messages = Number(process.argv[2] ?? "50000")

const seed = (url: string, keys: number | undefined) =>
  keys === undefined ? Ours.seed(url, 1, messages) : withClient(url, async (client) => {
    await client.query(
      `INSERT INTO "${table}" (message_id, body, headers, queue_name, created_at, available_at, ordering_key,
         ordering_seq)
       SELECT gen_random_uuid(), ${Ours.bodySql("g")}, ${Ours.headersSql}, $3, now(), now(), 'k' || (g % $2),
         g / $2 + 1
       FROM generate_series(0, $1::int - 1) AS g`,
      [messages, keys, queue]
    )
    await client.query(
      `INSERT INTO "${table}_key_seq" SELECT queue_name, ordering_key, max(ordering_seq) + 1 FROM "${table}"
       GROUP BY queue_name, ordering_key`
    )
    await client.query(
      `INSERT INTO "${table}_keys" SELECT queue_name, ordering_key, now(), NULL FROM "${table}_key_seq"`
    )
  })

const run = async (adminUrl: string, keys: number | undefined) => {
  const db = await freshDatabase(adminUrl, `ordered_${keys ?? "none"}`)
  try {
    await Ours.setup(db.url)
    await seed(db.url, keys)
    await settle(db.url)
    let handled = 0
    const time = clock()
    await Effect.runPromise(
      Worker.run({ transports: [queue], batchSize: 500, concurrency: 8, stopWhenEmpty: true }).pipe(
        Effect.provide(Ours.stack(db.url, {
          maxConnections: 4,
          onHandled: () => {
            handled++
            time.start()
          }
        })),
        Effect.timeout(Duration.minutes(5)),
        Effect.scoped,
        Logger.withMinimumLogLevel(LogLevel.Error)
      )
    )
    const seconds = time.seconds()
    if (handled !== messages) throw new Error(`keys ${keys}: handled ${handled} of ${messages}`)
    return messages / seconds
  } finally {
    await db.drop()
  }
}

const main = async () => {
  const cluster = await startCluster({ noFsync: process.env["NO_FSYNC"] === "1", log: (line) => console.error(line) })
  try {
    const unordered = await run(cluster.adminUrl, undefined)
    console.log(
      `burn-down, ${messages} messages, batch 500, concurrency 8 (${cluster.origin}), Node ${process.version}`
    )
    console.log("| keys | msg/s | ÷ without keys |")
    console.log("|---:|---:|---:|")
    console.log(`| none | ${Math.round(unordered)} | 1.000 |`)
    for (const keys of (process.env["KEYS"] ?? "10,1000,50000").split(",").map(Number)) {
      const rate = await run(cluster.adminUrl, keys)
      console.log(`| ${keys} | ${Math.round(rate)} | ${(rate / unordered).toFixed(3)} |`)
    }
  } finally {
    await cluster.stop()
  }
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
