/**
 * Producers notify only while a worker waits (`<table>_waiting`): a busy queue's commits never take NOTIFY's
 * commit lock, and a worker that goes idle while a producer commits still finds the message.
 *
 * What a producer's statement notified is seen by a LISTEN connection of the test's own: notifications arrive in
 * commit order, so a marker notified after a dispatch arriving with nothing before it shows the dispatch sent none.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import pg from "pg"
import * as Identifier from "../src/domain/Identifier.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import type { TransportShape } from "../src/services/Transport.js"
import { testDatabase } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"

const db = testDatabase("waiting_workers")
const { withPg } = db

/** A LISTEN connection on `channel`: the payloads it received, in order. */
const listening = (channel: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: db.url })
      const payloads: Array<string> = []
      client.on("notification", (n) => payloads.push(n.payload ?? ""))
      await client.connect()
      await client.query(`LISTEN "${channel}"`)
      return { client, payloads }
    }),
    ({ client }) => Effect.promise(() => client.end())
  )

/** What the listener received up to a marker notified now (delivered after everything committed before it). */
const receivedBefore = (listener: { readonly payloads: Array<string> }, channel: string, marker: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`SELECT pg_notify(${channel}, ${marker})`
    yield* Effect.sync(() => listener.payloads.includes(marker)).pipe(
      Effect.repeat({ schedule: Schedule.spaced("10 millis"), until: (seen) => seen }),
      Effect.timeout("20 seconds")
    )
    const upTo = listener.payloads.splice(0, listener.payloads.indexOf(marker) + 1)
    return upTo.slice(0, -1)
  })

const waitingRows = (table: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ readonly queue_name: string }>`SELECT queue_name FROM ${sql(`${table}_waiting`)}`
  ).pipe(Effect.map((rows) => rows.map((r) => r.queue_name)))

/** Until the transport's LISTEN connection is up (the signal that its "look again" hint was given). */
const awaitSessionListener = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ readonly pid: number }>`SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = 'effect-outbox listener' AND state = 'idle'`
).pipe(
  Effect.repeat({ schedule: Schedule.spaced("10 millis"), until: (rows) => rows.length > 0 }),
  Effect.timeout("20 seconds")
)

/** Until no announcement is left (a retraction runs in the background). */
const awaitNoneWaiting = (table: string) =>
  waitingRows(table).pipe(
    Effect.repeat({ schedule: Schedule.spaced("10 millis"), until: (rows) => rows.length === 0 }),
    Effect.timeout("20 seconds")
  )

const message = () => ({ messageId: MessageId.make(), type: "Test", body: "{}", headers: "{}", delayMs: 0 })

/** A producer that dispatched one message in a transaction it keeps open until `commit` (which awaits the commit). */
const openProducer = (transport: { readonly send: TransportShape["send"] }) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const written = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
      yield* transport.send("outbox", [message()])
      yield* Deferred.succeed(written, undefined)
      yield* Deferred.await(release)
    })))
    yield* Deferred.await(written)
    return { commit: Effect.zipRight(Deferred.succeed(release, undefined), Fiber.join(fiber)) }
  })

describe("producers notify only while a worker waits", () => {
  it.live(
    "no notification while nobody waits; one while a session waits; none once its claim found work",
    () =>
      withPg(
        Effect.gen(function*() {
          const table = uniqueTable("waiting")
          const channel = Identifier.defaultChannel(table)
          const transport = yield* PgTransport.make({ table, autoSetup: true })
          const listener = yield* listening(channel)

          // Nobody waits: the dispatch commits without a notification.
          yield* transport.send("outbox", [message()])
          expect(yield* receivedBefore(listener, channel, "m1")).toEqual([])

          const session = yield* transport.open(["outbox"])
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(1)
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(0)
          // The first wait after work lingers a few milliseconds unannounced (a busy queue's next message is found
          // without a notification); the next one announces and ends at once (the caller claims again); the one after
          // that waits.
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))
          expect(yield* waitingRows(table)).toEqual([])
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))
          expect(yield* waitingRows(table)).toEqual(["outbox"])
          const waited = yield* Effect.fork(session.wait(Duration.minutes(1)))
          yield* transport.send("outbox", [message()])
          yield* Fiber.join(waited).pipe(Effect.timeout("20 seconds"))
          expect(yield* receivedBefore(listener, channel, "m2")).toEqual(["outbox"])

          // Its claim found the message, one: messages that come one at a time keep it announced (the next
          // dispatch notifies it again)...
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(1)
          yield* transport.send("outbox", [message()])
          expect(yield* receivedBefore(listener, channel, "m3")).toEqual(["outbox"])
          // ...and once two claims in a row found work it no longer waits: the next dispatch notifies nobody.
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(1)
          yield* awaitNoneWaiting(table)
          yield* transport.send("outbox", [message()])
          expect(yield* receivedBefore(listener, channel, "m4")).toEqual([])
        }).pipe(Effect.scoped)
      ),
    60_000
  )

  it.live(
    "a producer that wrote before the worker announced and commits before its next claim: that claim finds it",
    () =>
      withPg(
        Effect.gen(function*() {
          const table = uniqueTable("waiting_race")
          const channel = Identifier.defaultChannel(table)
          const transport = yield* PgTransport.make({ table, autoSetup: true })
          const listener = yield* listening(channel)
          const session = yield* transport.open(["outbox"])
          // The session's listener says "look again" once it is connected: taken first, so that no wait below
          // ends because of it. Then the session finds work twice in a row, so it no longer waits.
          yield* awaitSessionListener
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))
          yield* transport.send("outbox", [message(), message()])
          expect((yield* session.claim("outbox", 1, [])).messages).toHaveLength(1)
          expect((yield* session.claim("outbox", 1, [])).messages).toHaveLength(1)
          yield* awaitNoneWaiting(table)
          yield* receivedBefore(listener, channel, "m0")
          // The wait after that work lingers (unannounced, it ends by itself).
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(0)
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))

          const producer = yield* openProducer(transport)
          // The worker finds nothing yet and switches to waiting: the wait announces and ends at once (nothing else
          // would end it: no hint is pending, and the producer's statement ran before the announcement).
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(0)
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))
          yield* producer.commit
          expect(yield* receivedBefore(listener, channel, "m1")).toEqual([])
          // The claim after the announcement, before any wait, finds it.
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(1)
        }).pipe(Effect.scoped)
      ),
    60_000
  )

  it.live(
    "a producer that wrote before the worker announced and commits after the claims that followed: the wait ends once its transaction has",
    () =>
      withPg(
        Effect.gen(function*() {
          const table = uniqueTable("waiting_open")
          const channel = Identifier.defaultChannel(table)
          const transport = yield* PgTransport.make({ table, autoSetup: true })
          const listener = yield* listening(channel)
          // The producer writes while no worker waits (its statement notifies nobody) and keeps its transaction open.
          const producer = yield* openProducer(transport)
          const session = yield* transport.open(["outbox"])
          yield* awaitSessionListener
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(0)
          // The wait announces and ends at once; the next is the short recheck (or the listener's "look again").
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(0)
          yield* session.wait(Duration.minutes(1)).pipe(Effect.timeout("20 seconds"))
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(0)
          // A wait of a minute that no hint will end: it ends once the producer's transaction has.
          const waited = yield* Effect.fork(session.wait(Duration.minutes(1)))
          yield* producer.commit
          yield* Fiber.join(waited).pipe(Effect.timeout("20 seconds"))
          expect(yield* receivedBefore(listener, channel, "m1")).toEqual([])
          expect((yield* session.claim("outbox", 10, [])).messages).toHaveLength(1)
        }).pipe(Effect.scoped)
      ),
    60_000
  )

  it.live(
    "an announcement ends with its session and lapses with its time; lapsed ones are cleared by the next",
    () =>
      withPg(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const table = uniqueTable("waiting_lapse")
          const channel = Identifier.defaultChannel(table)
          const transport = yield* PgTransport.make({ table, autoSetup: true })
          const listener = yield* listening(channel)
          const waiting = sql(`${table}_waiting`)

          yield* Effect.scoped(Effect.gen(function*() {
            const session = yield* transport.open(["outbox"])
            yield* session.wait(Duration.seconds(30))
            expect(yield* waitingRows(table)).toEqual(["outbox"])
          }))
          expect(yield* waitingRows(table)).toEqual([])

          // A killed worker's announcement, lapsed: nobody is notified for it.
          yield* sql`INSERT INTO ${waiting} (queue_name, worker, expires_at)
          VALUES ('outbox', gen_random_uuid(), now() - interval '2 minutes')`
          yield* transport.send("outbox", [message()])
          expect(yield* receivedBefore(listener, channel, "m1")).toEqual([])
          // The next announcement on the queue clears it.
          yield* Effect.scoped(Effect.gen(function*() {
            const session = yield* transport.open(["outbox"])
            yield* session.wait(Duration.seconds(30))
            expect(yield* waitingRows(table)).toEqual(["outbox"])
          }))
          expect(yield* waitingRows(table)).toEqual([])
        }).pipe(Effect.scoped)
      ),
    60_000
  )

  it.live(
    "a wait inside a caller's transaction announces on a statement of its own: the caller's rollback keeps it",
    () =>
      withPg(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const table = uniqueTable("waiting_tx")
          const transport = yield* PgTransport.make({ table, autoSetup: true })
          const session = yield* transport.open(["outbox"])
          yield* sql.withTransaction(
            Effect.zipRight(session.wait(Duration.seconds(30)), Effect.fail("roll back" as const))
          ).pipe(Effect.flip)
          expect(yield* waitingRows(table)).toEqual(["outbox"])
        }).pipe(Effect.scoped)
      ),
    60_000
  )

  it.live(
    "an INSERT from anywhere notifies each queue it wrote to on the channels of the workers waiting on it, once",
    () =>
      withPg(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const table = uniqueTable("waiting_channels")
          const fallback = Identifier.defaultChannel(table)
          const transport = yield* PgTransport.make({
            table,
            autoSetup: true,
            channel: "custom_wake",
            transports: { outbox: {}, other: {} }
          })
          const custom = yield* listening("custom_wake")
          const plain = yield* listening(fallback)
          // A worker waiting on `outbox` announced with its channel; one of an earlier version announced without.
          const session = yield* transport.open(["outbox"])
          yield* session.wait(Duration.millis(50))
          expect(yield* waitingRows(table)).toEqual(["outbox"])
          yield* sql`INSERT INTO ${sql(`${table}_waiting`)} (queue_name, worker, expires_at)
            VALUES ('outbox', gen_random_uuid(), now() + interval '1 minute')`

          // Two messages for `outbox` in one statement of a producer's (the table's default channel): one
          // notification on each channel.
          const producer = yield* PgTransport.make({ table, transports: { outbox: {}, other: {} } })
          yield* producer.send("outbox", [message(), message()])
          expect(yield* receivedBefore(custom, "custom_wake", "c1")).toEqual(["outbox"])
          expect(yield* receivedBefore(plain, fallback, "p1")).toEqual(["outbox"])
          // A queue nobody waits on: nothing.
          yield* producer.send("other", [message()])
          expect(yield* receivedBefore(custom, "custom_wake", "c2")).toEqual([])
          expect(yield* receivedBefore(plain, fallback, "p2")).toEqual([])
          // A bare INSERT by another tool wakes the workers too.
          yield* sql`INSERT INTO ${sql(table)} (message_id, body, headers, queue_name, available_at)
            VALUES (gen_random_uuid(), '{}', '{}', 'outbox', now())`
          expect(yield* receivedBefore(custom, "custom_wake", "c3")).toEqual(["outbox"])
        }).pipe(Effect.scoped)
      ),
    60_000
  )

  it.live(
    "with `notify: false` nobody announces and nothing is notified",
    () =>
      withPg(
        Effect.gen(function*() {
          const table = uniqueTable("waiting_off")
          const channel = Identifier.defaultChannel(table)
          const transport = yield* PgTransport.make({ table, autoSetup: true, notify: false })
          const listener = yield* listening(channel)
          const session = yield* transport.open(["outbox"])
          yield* session.wait(Duration.millis(50))
          expect(yield* waitingRows(table)).toEqual([])
          yield* transport.send("outbox", [message()])
          expect(yield* receivedBefore(listener, channel, "m1")).toEqual([])
        }).pipe(Effect.scoped)
      ),
    60_000
  )
})
