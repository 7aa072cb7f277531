/**
 * Low latency and fast recovery: NOTIFY wake-up with a reconnecting listener, delayed messages on time,
 * a dead worker's messages back about one lease later.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as LogLevel from "effect/LogLevel"
import * as Schedule from "effect/Schedule"
import * as MessageId from "../src/domain/MessageId.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Worker from "../src/programs/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { spawnScript } from "./support/cli.js"
import { createDatabase } from "./support/database.js"
import { outboxStack, pgLayer, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

let url = ""
beforeAll(async () => {
  url = await createDatabase("wakeup")
})

const withPg = <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.provide(self, Layer.orDie(pgLayer(url)))

/** The pids of the listener connections of this database (the signal that a worker is listening). */
const listeners = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ pid: number }>`SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = 'effect-outbox listener' AND state = 'idle'`).pipe(
    Effect.map((rows) => rows.map((r) => r.pid))
  )

const awaitListener = (except: ReadonlyArray<number> = []) =>
  listeners.pipe(
    Effect.map((pids) => pids.filter((p) => !except.includes(p))),
    Effect.filterOrFail((pids) => pids.length > 0, () => "no listener yet" as const),
    Effect.retry({ schedule: Schedule.spaced("20 millis"), while: (e) => e === "no listener yet" }),
    Effect.map((pids) => pids[0]!),
    Effect.timeout("10 seconds")
  )

describe("wake-up on commit", () => {
  it.live("with polling at 60 s a committed message is handled at once; after the listener is killed it comes back", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("notify")
      const handled = yield* Deferred.make<number>()
      const second = yield* Deferred.make<number>()
      const stack = outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) =>
          Deferred.succeed(m.orderId === 1 ? handled : second, Date.now()).pipe(Effect.asVoid))]
      })
      yield* Effect.gen(function*() {
        const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 2 }))
        const pid = yield* awaitListener()
        yield* Effect.sleep("50 millis") // let the worker finish its first (empty) poll and go idle
        const committed = Date.now()
        yield* sql.withTransaction(Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })))
        const at = yield* Deferred.await(handled).pipe(Effect.timeout("5 seconds"))
        expect(at - committed).toBeLessThan(1_000)

        yield* sql`SELECT pg_terminate_backend(${pid})`
        yield* awaitListener([pid])
        const committedAgain = Date.now()
        yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
        const atAgain = yield* Deferred.await(second).pipe(Effect.timeout("5 seconds"))
        expect(atAgain - committedAgain).toBeLessThan(1_000)
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 2, stoppedBy: "limit" })
      }).pipe(Effect.provide(stack))
    })), 60_000)

  it.live("the notification arrives at commit, never before it; a rolled-back dispatch is never delivered", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("notify_tx")
      const seen: Array<number> = []
      const stack = outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => void seen.push(m.orderId)))]
      })
      yield* Effect.gen(function*() {
        const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 1 }))
        yield* awaitListener()
        yield* sql.withTransaction(
          Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })).pipe(Effect.zipRight(Effect.fail("no")))
        ).pipe(Effect.ignore)
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
          yield* Effect.sleep("300 millis") // held open: a notification sent before COMMIT would find nothing
        }))
        expect(yield* Fiber.join(worker).pipe(Effect.timeout("5 seconds"))).toMatchObject({ handled: 1 })
        expect(seen).toEqual([2])
      }).pipe(Effect.provide(stack))
    })), 60_000)
})

describe("delayed messages and leases on time", () => {
  it.live("a message delayed by 2 s is not handled before it is due, and promptly after", () =>
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
        const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 1 }))
        yield* awaitListener()
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }), { delay: "2 seconds" })
        const [row] = yield* sql<{ available_at: Date }>`SELECT available_at FROM ${sql(table)}`
        const at = yield* Deferred.await(handledAt).pipe(Effect.timeout("10 seconds"))
        const late = at.getTime() - row!.available_at.getTime()
        expect(late).toBeGreaterThanOrEqual(0)
        expect(late).toBeLessThan(500)
        yield* Fiber.join(worker)
      }).pipe(Effect.provide(stack))
    })), 60_000)

  it.live("a worker killed while holding messages: they are redelivered about one lease later to an idle worker", () =>
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
        const doomed = spawnScript("test/fixtures/hanging-worker.ts", [url, table, String(lease)], {})
        yield* Effect.promise(() => doomed.waitFor(/^STARTED/))
        // The rival sleeps 60 s between polls: only the lease deadline can wake it.
        const rival = yield* Effect.fork(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 1 }))
        yield* awaitListener()
        doomed.kill("SIGKILL")
        yield* Effect.promise(() => doomed.exited)
        const killedAt = Date.now()
        const at = yield* Deferred.await(redelivered).pipe(Effect.timeout("20 seconds"))
        expect(at - killedAt).toBeLessThan(lease + 1_000)
        expect(yield* Fiber.join(rival)).toMatchObject({ handled: 1 })
        const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`
        expect(row!.n).toBe(0)
      }).pipe(Effect.provide(stack))
    })), 60_000)
})

/** Backends of this database whose last statement was a worker's claim or next-due query. */
const claimBackends = (table: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ pid: number }>`SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND (query LIKE ${`%${table}_claim"(%`} OR (query LIKE '%least(%' AND query LIKE ${`%${table}%`}))`).pipe(
      Effect.map((rows) => rows.map((r) => r.pid))
    )

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
        const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], sleep: "60 seconds", limit: 4 }))
        yield* awaitListener()
        for (const orderId of [1, 2]) {
          yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
          yield* handled.take(1).pipe(Effect.timeout("5 seconds"))
        }
        const [first, ...others] = yield* claimBackends(table)
        expect(others).toEqual([])
        yield* sql`SELECT pg_terminate_backend(${first!})`
        for (const orderId of [3, 4]) {
          const committed = Date.now()
          yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
          yield* handled.take(1).pipe(Effect.timeout("5 seconds"))
          expect(Date.now() - committed).toBeLessThan(1_000) // the notification path, not the 60 s poll
        }
        const after = yield* claimBackends(table)
        expect(after.length).toBe(1)
        expect(after[0]).not.toBe(first)
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 4, failed: 0, stoppedBy: "limit" })
        expect(problems).toEqual([]) // the dead connection cost a retry, not a worker error
      }).pipe(Effect.provide(stack))
    })).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, recorder)))
  }, 60_000)

  it.live(`in a pool smaller than ${PgTransport.minPoolForOwnConnection} connections the claims take turns: a handler's transaction still gets one`, () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("small_pool")
      const stack = outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) =>
          sql.withTransaction(sql`SELECT ${m.orderId}::int`).pipe(Effect.orDie, Effect.asVoid))]
      })
      yield* Effect.gen(function*() {
        for (const orderId of [1, 2, 3]) yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
        const summary = yield* Worker.run({ transports: ["outbox"], sleep: "50 millis", limit: 3 }).pipe(
          Effect.timeout("10 seconds")
        )
        expect(summary).toMatchObject({ handled: 3, failed: 0 })
      }).pipe(Effect.provide(stack))
    }).pipe(Effect.provide(Layer.orDie(pgLayer(url, 1)))), 60_000)

  it.live("a stopped worker gives its connection back to the pool", () =>
    Effect.gen(function*() {
      const table = uniqueTable("give_back")
      const stack = outboxStack({ table, handlers: [Handlers.handler(OrderPaid, () => Effect.void)] })
      yield* Effect.gen(function*() {
        // Six workers one after another in a pool of four: a connection kept by a stopped worker starves the fifth.
        for (let orderId = 1; orderId <= 6; orderId++) {
          yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
          const summary = yield* Worker.run({ transports: ["outbox"], sleep: "50 millis", limit: 1 }).pipe(
            Effect.timeout("10 seconds")
          )
          expect(summary).toMatchObject({ handled: 1 })
        }
      }).pipe(Effect.provide(stack))
    }).pipe(Effect.provide(Layer.orDie(pgLayer(url, PgTransport.minPoolForOwnConnection)))), 60_000)
})

describe("an empty claim says when the next message is due", () => {
  it.live("the claim function's row of nothing; a worker's next-due check answered from it", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("due_hint")
      const transport = yield* PgTransport.make({ table, autoSetup: true })
      const claimOnce = sql<{ id: string | null; available_ms: number | null }>`
        SELECT id, available_ms FROM ${sql(PgTransport.claimFunction(table))}('outbox', 30000, 10, '{}'::bigint[], false)`
      // Nothing waits: one row, id and due both NULL.
      expect(yield* claimOnce).toEqual([{ id: null, available_ms: null }])
      yield* transport.send("outbox", [{ messageId: MessageId.make(), type: "Test", body: "{}", headers: "{}", delayMs: 5_000 }])
      const [row] = yield* claimOnce
      expect(row!.id).toBeNull()
      expect(row!.available_ms).toBeGreaterThan(4_000)
      expect(row!.available_ms).toBeLessThanOrEqual(5_000)

      yield* Effect.scoped(Effect.gen(function*() {
        yield* transport.wakeups(["outbox"]) // this fiber now claims on a connection of its own
        expect(yield* transport.claim("outbox", 10)).toEqual([])
        // Answered from that claim: the message's due time, even after it changed in the table.
        yield* sql`UPDATE ${sql(table)} SET available_at = now() + interval '1 hour'`
        const hinted = yield* transport.nextDue("outbox")
        expect(Option.getOrThrow(hinted)).toBeGreaterThan(4_000)
        expect(Option.getOrThrow(hinted)).toBeLessThanOrEqual(5_000)
        // Once: the next check asks the database.
        expect(Option.getOrThrow(yield* transport.nextDue("outbox"))).toBeGreaterThan(3_500_000)
      }))

      // The answer is a deadline counted from the claim's send: time spent before the check is not slept again.
      yield* sql`UPDATE ${sql(table)} SET available_at = now() + interval '5 seconds'`
      yield* Effect.scoped(Effect.gen(function*() {
        yield* transport.wakeups(["outbox"])
        expect(yield* transport.claim("outbox", 10)).toEqual([])
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 300))) // real time, on purpose
        const hinted = Option.getOrThrow(yield* transport.nextDue("outbox"))
        expect(hinted).toBeGreaterThan(4_000)
        expect(hinted).toBeLessThanOrEqual(4_700)
      }))
    })), 60_000)
})
