/**
 * Low latency and fast recovery: NOTIFY wake-up with a reconnecting listener, delayed messages on time,
 * a dead worker's messages back about one lease later.
 *
 * Timing on a shared machine: a "not before" bound is exact (nothing may happen before it is due); a "within"
 * bound is generous (`promptly`, well under the 60 s poll interval that would otherwise be the only way the
 * worker finds the message), so a loaded machine slows a test down without failing it.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as MessageId from "../src/domain/MessageId.js"
import { claimCall } from "../src/layers/pg/sql/transport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { spawnScript } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable, workerConnections } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const db = testDatabase("wakeup")
const { withPg } = db

/** A generous "within" bound (ms): far below the 60 s poll, far above any scheduling hiccup. */
const promptly = 5_000

/** In a pool (`maxConnections`) smaller than this, a worker's session claims through the pool (PgTransport). */
const minPoolForOwnConnection = 4

/** The pids of the listener connections of this database (the signal that a worker is listening). */
const listeners = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ pid: number }>`SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = 'effect-outbox listener' AND state = 'idle'`).pipe(
    Effect.map((rows) => rows.map((r) => r.pid))
  )

/** Polls `pids` until it returns one not in `except`; that pid. */
const awaitPid = <E, R>(pids: Effect.Effect<ReadonlyArray<number>, E, R>, except: ReadonlyArray<number> = []) =>
  pids.pipe(
    Effect.map((found) => found.filter((p) => !except.includes(p))),
    Effect.filterOrFail((found) => found.length > 0, () => "not yet" as const),
    Effect.retry({ schedule: Schedule.spaced("20 millis"), while: (e) => e === "not yet" }),
    Effect.map((found) => found[0]!),
    Effect.timeout("20 seconds")
  )

const awaitListener = (except: ReadonlyArray<number> = []) => awaitPid(listeners, except)

/** Waits until a worker has announced its wait on the table's queue "outbox" (`<table>_waiting`). */
const awaitWaiting = (table: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM ${sql(`${table}_waiting`)}
      WHERE queue_name = 'outbox' AND expires_at > now()`
  ).pipe(
    Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (rows) => rows[0]!.n > 0 }),
    Effect.timeout("20 seconds")
  )

/** Waits until a worker's session connection has answered a claim and sits idle (the worker polled and went idle). */
const awaitIdleWorker = awaitPid(workerConnections("idle"))

describe("wake-up on commit", () => {
  it.live(
    "with polling at 60 s a committed message is handled at once; after the listener is killed it comes back",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("notify")
        const handled = yield* Deferred.make<number>()
        const second = yield* Deferred.make<number>()
        const stack = outboxStack({
          table,
          handlers: [
            Handlers.handler(OrderPaid, (m) =>
              Deferred.succeed(m.orderId === 1 ? handled : second, Date.now()).pipe(Effect.asVoid))
          ]
        })
        yield* Effect.gen(function*() {
          const worker = yield* Effect.forkScoped(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 2 }))
          const pid = yield* awaitListener()
          yield* awaitIdleWorker // its first (empty) poll answered: only a wake-up (or 60 s) brings it back
          const committed = Date.now()
          yield* sql.withTransaction(Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })))
          const at = yield* Deferred.await(handled).pipe(Effect.timeout("20 seconds"))
          expect(at - committed).toBeLessThan(promptly)

          yield* sql`SELECT pg_terminate_backend(${pid})`
          yield* awaitListener([pid])
          const committedAgain = Date.now()
          yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
          const atAgain = yield* Deferred.await(second).pipe(Effect.timeout("20 seconds"))
          expect(atAgain - committedAgain).toBeLessThan(promptly)
          expect(yield* Fiber.join(worker)).toMatchObject({ handled: 2, stoppedBy: "limit" })
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )

  it.live(
    "the notification arrives at commit, never before it; a rolled-back dispatch is never delivered",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("notify_tx")
        const seen: Array<number> = []
        const stack = outboxStack({
          table,
          handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => void seen.push(m.orderId)))]
        })
        yield* Effect.gen(function*() {
          const worker = yield* Effect.forkScoped(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 1 }))
          yield* awaitListener()
          // The worker waits (announced): the producer's statement, 300 ms before its commit, sees it and notifies.
          // A statement that ran before the announcement would leave the message to the 60 s poll.
          yield* awaitWaiting(table)
          yield* sql.withTransaction(
            Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })).pipe(Effect.zipRight(Effect.fail("no")))
          ).pipe(Effect.ignore)
          yield* sql.withTransaction(Effect.gen(function*() {
            yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
            yield* Effect.sleep("300 millis") // held open: a notification sent before COMMIT would find nothing
          }))
          expect(yield* Fiber.join(worker).pipe(Effect.timeout("20 seconds"))).toMatchObject({ handled: 1 })
          expect(seen).toEqual([2])
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )
})

describe("delayed messages and leases on time", () => {
  it.live(
    "a message delayed by 2 s is not handled before it is due, and promptly after",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("delayed")
        const handledAt = yield* Deferred.make<Date>()
        const stack = outboxStack({
          table,
          handlers: [Handlers.handler(OrderPaid, () =>
            sql<{ now: Date }>`SELECT clock_timestamp() AS now`.pipe(
              Effect.flatMap(([row]) => Deferred.succeed(handledAt, row!.now))
            ))]
        })
        yield* Effect.gen(function*() {
          const worker = yield* Effect.forkScoped(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 1 }))
          yield* awaitListener()
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }), { delay: "2 seconds" })
          const [row] = yield* sql<{ available_at: Date }>`SELECT available_at FROM ${sql(table)}`
          const at = yield* Deferred.await(handledAt).pipe(Effect.timeout("20 seconds"))
          const late = at.getTime() - row!.available_at.getTime()
          expect(late).toBeGreaterThanOrEqual(0) // never before it is due (both times are the database's)
          expect(late).toBeLessThan(promptly) // woken by the claim's due hint, not the 60 s poll
          yield* Fiber.join(worker)
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )

  it.live(
    "a worker killed while holding messages: they are redelivered about one lease later to an idle worker",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("recovery")
        const lease = 1_500
        const redelivered = yield* Deferred.make<number>()
        const stack = outboxStack({
          table,
          transports: { outbox: { redeliverTimeout: Duration.millis(lease) } },
          handlers: [Handlers.handler(OrderPaid, () => Deferred.succeed(redelivered, Date.now()).pipe(Effect.asVoid))]
        })
        yield* Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
          const doomed = spawnScript("test/fixtures/hanging-worker.ts", [db.url, table, String(lease)], {})
          yield* Effect.promise(() => doomed.waitFor(/^STARTED/))
          // The rival sleeps 60 s between polls: only the lease deadline can wake it.
          const rival = yield* Effect.forkScoped(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 1 }))
          yield* awaitListener()
          doomed.kill("SIGKILL")
          yield* Effect.promise(() => doomed.exited)
          const killedAt = Date.now()
          const at = yield* Deferred.await(redelivered).pipe(Effect.timeout("30 seconds"))
          expect(at - killedAt).toBeLessThan(lease + promptly) // the lease's end wakes the rival, not its 60 s poll
          expect(yield* Fiber.join(rival)).toMatchObject({ handled: 1 })
          const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`
          expect(row!.n).toBe(0)
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )
})

describe("a worker's own claim connection", () => {
  it.live("its claims run on one connection; killed, the next claim takes a fresh one and nothing fails", () => {
    const problems: Array<string> = []
    const recorder = Logger.make(({ logLevel, message }) => {
      if (LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)) problems.push(`${logLevel.label}: ${String(message)}`)
    })
    return withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("own")
      const handled = yield* Effect.makeSemaphore(0)
      const stack = outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, () => handled.release(1))]
      })
      yield* Effect.gen(function*() {
        // limit 5: the worker is still running (its connection still held) when the connections are checked after 4.
        const worker = yield* Effect.forkScoped(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 5 }))
        yield* awaitListener()
        for (const orderId of [1, 2]) {
          yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
          yield* handled.take(1).pipe(Effect.timeout("20 seconds"))
        }
        const [first, ...others] = yield* workerConnections()
        expect(first).toBeDefined()
        expect(others).toEqual([])
        yield* sql`SELECT pg_terminate_backend(${first!})`
        for (const orderId of [3, 4]) {
          const committed = Date.now()
          yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
          yield* handled.take(1).pipe(Effect.timeout("20 seconds"))
          expect(Date.now() - committed).toBeLessThan(promptly) // the notification path, not the 60 s poll
        }
        const after = yield* workerConnections()
        expect(after.length).toBe(1)
        expect(after[0]).not.toBe(first)
        yield* Outbox.dispatch(new OrderPaid({ orderId: 5, amount: 1 }))
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 5, failed: 0, stoppedBy: "limit" })
        expect(problems).toEqual([]) // the dead connection cost a retry, not a worker error
      }).pipe(Effect.scoped, Effect.provide(stack))
    })).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, recorder)))
  }, 60_000)

  it.live(
    `in a pool smaller than ${minPoolForOwnConnection} connections the claims take turns: a handler's transaction still gets one`,
    () =>
      withPg(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const table = uniqueTable("small_pool")
          const sessions: Array<ReadonlyArray<number>> = []
          const stack = outboxStack({
            table,
            handlers: [Handlers.handler(OrderPaid, (m) =>
              sql.withTransaction(sql`SELECT ${m.orderId}::int`).pipe(
                Effect.zipRight(workerConnections()),
                Effect.map((pids) => void sessions.push(pids)),
                Effect.orDie
              ))]
          })
          yield* Effect.gen(function*() {
            for (const orderId of [1, 2, 3]) yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
            const summary = yield* Worker.run({ transports: ["outbox"], sleep: "50 millis", limit: 3 }).pipe(
              Effect.timeout("20 seconds")
            )
            expect(summary).toMatchObject({ handled: 3, failed: 0 })
            // The session held no connection of its own while the handlers ran.
            expect(sessions).toEqual([[], [], []])
          }).pipe(Effect.provide(stack))
        }),
        1
      ),
    60_000
  )

  it.live("a stopped worker gives its connection back to the pool", () =>
    withPg(
      Effect.gen(function*() {
        const table = uniqueTable("give_back")
        const stack = outboxStack({ table, handlers: [Handlers.handler(OrderPaid, () => Effect.void)] })
        yield* Effect.gen(function*() {
          // Six workers one after another in a pool of four: a connection kept by a stopped worker starves the fifth.
          for (let orderId = 1; orderId <= 6; orderId++) {
            yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
            const summary = yield* Worker.run({ transports: ["outbox"], sleep: "50 millis", limit: 1 }).pipe(
              Effect.timeout("20 seconds")
            )
            expect(summary).toMatchObject({ handled: 1 })
            // Given back under its pool name: no connection is left marked as a worker's.
            expect(yield* workerConnections()).toEqual([])
          }
        }).pipe(Effect.provide(stack))
      }),
      minPoolForOwnConnection
    ), 60_000)
})

describe("an empty claim says when the next message is due", () => {
  it.live(
    "the claim function's row of nothing; a session's empty claim answers from it, counted from its send",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("due_hint")
        const transport = yield* PgTransport.make({ table, autoSetup: true })
        const send = (delayMs: number) =>
          transport.send("outbox", [{ messageId: MessageId.make(), type: "Test", body: "{}", headers: "{}", delayMs }])
        // The call as a worker's session sends it (`claimCall`), its commit not relaxed.
        const claimOnce = sql.unsafe<{ id: string | null; available_ms: number | null }>(claimCall(table), [
          "outbox",
          30000,
          10,
          [],
          false,
          null
        ]).pipe(Effect.map((rows) => rows.map(({ available_ms, id }) => ({ id, available_ms }))))
        const dueOf = (claimed: { readonly nextDue: Option.Option<Duration.Duration> }) =>
          Duration.toMillis(Option.getOrThrow(claimed.nextDue))

        // Nothing waits: one row, id and due both NULL; a session's claim says None.
        expect(yield* claimOnce).toEqual([{ id: null, available_ms: null }])
        yield* Effect.scoped(Effect.gen(function*() {
          const session = yield* transport.open(["outbox"])
          const claimed = yield* session.claim("outbox", 10, [])
          expect(claimed).toEqual({ messages: [], nextDue: Option.none() })
        }))

        // A delayed message: the row says when it is due; so does a session's empty claim (a little early: the worker
        // then claims again and is told what is left).
        yield* send(5_000)
        const [row] = yield* claimOnce
        expect(row!.id).toBeNull()
        expect(row!.available_ms).toBeGreaterThan(4_000)
        expect(row!.available_ms).toBeLessThanOrEqual(5_000)
        yield* Effect.scoped(Effect.gen(function*() {
          const session = yield* transport.open(["outbox"])
          const claimed = yield* session.claim("outbox", 10, [])
          expect(claimed.messages).toEqual([])
          expect(dueOf(claimed)).toBeGreaterThan(4_000)
          expect(dueOf(claimed)).toBeLessThanOrEqual(5_000)
        }))

        // Another claimer's lease: its end is when the message may be claimed again.
        yield* sql`UPDATE ${sql(table)} SET available_at = now() + interval '1 hour'`
        yield* send(0)
        yield* Effect.scoped(Effect.gen(function*() {
          const holder = yield* transport.open(["outbox"])
          const [held] = (yield* holder.claim("outbox", 10, [])).messages
          expect(held).toBeDefined()
          const rival = yield* Effect.scoped(
            Effect.flatMap(transport.open(["outbox"]), (session) => session.claim("outbox", 10, []))
          )
          expect(rival.messages).toEqual([])
          expect(dueOf(rival)).toBeGreaterThan(25_000)
          expect(dueOf(rival)).toBeLessThanOrEqual(30_000)

          // The answer is counted from the claim's send: a claim that waited (its ack blocked on a row lock) does
          // not sleep that time again.
          yield* sql`UPDATE ${sql(table)} SET available_at = now() + interval '10 seconds' WHERE id <> ${
            held!.id
          }::bigint`
          const locked = yield* Deferred.make<void>()
          const lock = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
            yield* sql`SELECT id FROM ${sql(table)} WHERE id = ${held!.id}::bigint FOR UPDATE`
            yield* Deferred.succeed(locked, undefined)
            yield* Effect.sleep("1500 millis") // holds the row (real time, on purpose): the ack below waits for it
          })))
          yield* Deferred.await(locked)
          const sentAt = performance.now()
          const acked = yield* holder.claim("outbox", 10, [held!.id])
          const waited = performance.now() - sentAt
          yield* Fiber.join(lock)
          expect(waited).toBeGreaterThanOrEqual(500) // the lock was in the way
          expect(acked.messages).toEqual([])
          // About 10 s less the wait (and the early margin); counted from the answer it would be about 9.5 s.
          expect(dueOf(acked)).toBeLessThanOrEqual(9_000)
          expect(dueOf(acked)).toBeGreaterThan(5_000)
          const [left] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`
          expect(left!.n).toBe(1) // the ack went through
        }))
      })),
    60_000
  )
})
