/**
 * Crash recovery against a real PostgreSQL and a real worker process killed with SIGKILL.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as PgSession from "../src/layers/pg/PgSession.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { spawnScript } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable, workerConnections } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"
import { createTestMysqlDatabase, mysqlLayer, mysqlOutboxStack } from "./support/mysql.js"

const db = testDatabase("crash")
const { withPg } = db

/**
 * A batch of 20 whose first message kills every worker that runs it (budget: 2 retries), consumed by worker processes
 * started one after the other, each until it dies or finds nothing to claim; after each death the leases are moved
 * past their end (no waiting). Returns the deaths, the orders handled and the rows left.
 */
const crashLoop = (options: {
  readonly url: string
  readonly table: string
  readonly run: <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.Effect<A, E>
  readonly expire: (sql: SqlClient.SqlClient, table: string) => Effect.Effect<unknown, unknown>
}) =>
  Effect.gen(function*() {
    const { table, url } = options
    const handled = new Set<number>()
    let deaths = 0
    for (let round = 1; round <= 12; round++) {
      const worker = spawnScript("test/fixtures/crash-loop-worker.ts", [url, table, "60000", "1", "2"], {})
      const exit = yield* Effect.promise(() => worker.exited)
      for (const line of worker.lines) if (line.startsWith("HANDLED ")) handled.add(Number(line.slice(8)))
      if (exit.signal !== "SIGKILL") {
        expect(exit.code, worker.stderr.join("")).toBe(0)
        break
      }
      deaths++
      yield* options.run(Effect.flatMap(SqlClient.SqlClient, (sql) => options.expire(sql, table)))
    }
    const rows = yield* options.run(Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql<{ queue_name: string; headers: string }>`SELECT queue_name, headers FROM ${sql(table)}`
    ))
    return { deaths, handled, rows }
  })

/** What the crash loop must end with: the 19 batch-mates handled and gone, the killer alone in the failure queue. */
const innocentsSurvive = (result: Effect.Effect.Success<ReturnType<typeof crashLoop>>) => {
  expect([...result.handled].sort((a, b) => a - b)).toEqual(Array.from({ length: 19 }, (_, i) => i + 2))
  expect(result.rows.map((row) => [row.queue_name, JSON.parse(row.headers).errorDetails?.tag])).toEqual([
    ["failed", "WorkerDiedError"]
  ])
  expect(JSON.parse(result.rows[0]!.headers).errorDetails.message).toContain("alone")
  // Its first death is charged to nobody (it ran beside others, unmarked); then one per start, alone: a budget of
  // 2 retries allows 3 such starts, and the fifth delivery moves it to the failure queue without running it.
  expect(result.deaths).toBe(4)
}

/** Starts the hanging worker and resolves with the process once its handler has started a message. */
const startHangingWorker = (table: string, leaseMs: number) =>
  Effect.acquireRelease(
    Effect.sync(() => spawnScript("test/fixtures/hanging-worker.ts", [db.url, table, String(leaseMs)], {})),
    (proc) => Effect.sync(() => proc.kill("SIGKILL"))
  ).pipe(
    Effect.flatMap((proc) =>
      Effect.map(Effect.promise(() => proc.waitFor(/^STARTED \S+/)), (line) => ({
        proc,
        messageId: line.slice("STARTED ".length)
      }))
    )
  )

describe("crash recovery", () => {
  it.live(
    "a message held by a worker killed with SIGKILL is redelivered after redeliverTimeout, nothing lost",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("crash")
        const lease = 5_000
        const handled: Array<string> = []
        const stack = outboxStack({
          table,
          transports: { outbox: { redeliverTimeout: Duration.millis(lease) } },
          handlers: [Handlers.handler(OrderPaid, (_m, envelope) => Effect.sync(() => handled.push(envelope.messageId)))]
        })
        yield* Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          const ids = yield* outbox.dispatchAll([1, 2, 3].map((orderId) => new OrderPaid({ orderId, amount: 1 })))
          const worker = yield* startHangingWorker(table, lease)
          expect(worker.messageId).toBe(ids[0])
          worker.proc.kill("SIGKILL")
          expect(yield* Effect.promise(() => worker.proc.exited)).toEqual({ code: null, signal: "SIGKILL" })

          // The dead worker's claim still holds all three messages: nothing is claimable yet.
          expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({
            handled: 0,
            retried: 0,
            failed: 0
          })
          const held = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
            sql(table)
          } WHERE delivered_at IS NOT NULL`
          expect(held[0]!.n).toBe(3)

          // Fake the passage of one lease.
          yield* sql`UPDATE ${sql(table)} SET delivered_at = delivered_at - ${
            lease + 100
          }::float8 * interval '1 millisecond'`
          expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({
            handled: 3,
            retried: 0,
            failed: 0
          })
          expect(handled).toEqual(ids)
          const left = yield* sql`SELECT 1 FROM ${sql(table)}`
          expect(left.length).toBe(0)
        }).pipe(Effect.provide(stack), Effect.scoped)
      })),
    60_000
  )

  it.live(
    "a message that kills every worker ends in the failure queue; its 19 batch-mates are handled, none failed",
    () =>
      withPg(Effect.gen(function*() {
        const table = uniqueTable("crash_loop")
        yield* Outbox.Outbox.pipe(
          Effect.flatMap((outbox) =>
            outbox.dispatchAll(Array.from({ length: 20 }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 })))
          ),
          Effect.provide(outboxStack({ table, handlers: [] }))
        )
        innocentsSurvive(
          yield* crashLoop({
            url: db.url,
            table,
            run: withPg,
            expire: (sql, table) =>
              sql`UPDATE ${sql(table)} SET delivered_at = delivered_at - interval '1 hour'
                WHERE delivered_at IS NOT NULL`
          })
        )
      })),
    180_000
  )

  it.live(
    "on MariaDB too: a message that kills every worker ends in the failure queue, its batch-mates are handled",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => createTestMysqlDatabase("crash_loop"))
        const withMysql = <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) =>
          Effect.provide(self, Layer.orDie(mysqlLayer(url)))
        const table = uniqueTable("crash_loop")
        yield* withMysql(
          Outbox.Outbox.pipe(
            Effect.flatMap((outbox) =>
              outbox.dispatchAll(Array.from({ length: 20 }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 })))
            ),
            Effect.provide(mysqlOutboxStack({ table, handlers: [] }))
          )
        )
        innocentsSurvive(
          yield* crashLoop({
            url,
            table,
            run: withMysql,
            expire: (sql, table) =>
              sql`UPDATE ${sql(table)} SET delivered_at = delivered_at - INTERVAL 1 HOUR
                WHERE delivered_at IS NOT NULL`
          })
        )
      }),
    180_000
  )

  it.live(
    "a healthy handler running several leases long is never redelivered (lease heartbeat)",
    () =>
      withPg(Effect.gen(function*() {
        const table = uniqueTable("heartbeat")
        // Renewed every third of the lease: a renewal must be a whole lease late to lose it (a busy machine stalls).
        const lease = 1200
        let calls = 0
        // The slow worker has claimed the batch (both messages) once its first handler runs.
        const claimed = yield* Deferred.make<void>()
        const stack = outboxStack({
          table,
          transports: { outbox: { redeliverTimeout: Duration.millis(lease) } },
          handlers: [Handlers.handler(OrderPaid, () =>
            Effect.sync(() => calls++).pipe(
              Effect.zipRight(Deferred.succeed(claimed, undefined)),
              Effect.zipRight(Effect.sleep(Duration.millis(lease * 3)))
            ))]
        })
        yield* Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
          yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
          const slow = yield* Effect.forkScoped(
            Worker.run({ transports: ["outbox"], batchSize: 2, stopWhenEmpty: true })
          )
          yield* Deferred.await(claimed)
          // A second worker polls all along; it must never get either message (the second one waits in the batch).
          const rival = yield* Worker.run({ transports: ["outbox"], sleep: "50 millis", limit: 1 }).pipe(
            Effect.timeout(Duration.millis(lease * 6)),
            Effect.option
          )
          expect(rival._tag).toBe("None")
          expect(yield* slow.await.pipe(Effect.flatten)).toMatchObject({ handled: 2, retried: 0, failed: 0 })
          expect(calls).toBe(2)
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )

  it.live(
    "the next batch, claimed while one runs, is leased and renewed like it; a rival never gets it",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("prefetch")
        const lease = 600
        const started = yield* Deferred.make<void>()
        const handled: Array<number> = []
        const stack = outboxStack({
          table,
          transports: { outbox: { redeliverTimeout: Duration.millis(lease) } },
          handlers: [Handlers.handler(OrderPaid, (paid) =>
            Effect.gen(function*() {
              if (paid.orderId === 1) {
                yield* Deferred.succeed(started, undefined)
                yield* Effect.sleep(Duration.millis(lease * 4))
              }
              handled.push(paid.orderId)
            }))]
        })
        yield* Effect.gen(function*() {
          yield* (yield* Outbox.Outbox).dispatchAll(
            [1, 2, 3, 4].map((orderId) => new OrderPaid({ orderId, amount: 1 }))
          )
          const slow = yield* Effect.forkScoped(
            Worker.run({ transports: ["outbox"], batchSize: 2, stopWhenEmpty: true })
          )
          yield* Deferred.await(started).pipe(
            Effect.timeoutFail({
              duration: "20 seconds",
              onTimeout: () => new Error("the first handler never started")
            })
          )
          // The batch [1, 2] runs and [3, 4] is claimed: the prefetch is sent before the handlers start, but on a
          // busy machine its answer may come after the first handler started.
          const leased = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${
            sql(table)
          } WHERE delivered_at IS NOT NULL`.pipe(
            Effect.map((rows) => rows[0]!.n),
            Effect.filterOrFail((n) => n === 4, () => "not yet" as const),
            Effect.retry({
              schedule: Schedule.spaced("10 millis").pipe(Schedule.upTo("10 seconds")),
              while: (e) => e === "not yet"
            }),
            Effect.catchIf((e) => e === "not yet", () => Effect.succeed(-1))
          )
          expect(leased).toBe(4)
          const rival = yield* Worker.run({ transports: ["outbox"], sleep: "50 millis", limit: 1 }).pipe(
            Effect.timeout(Duration.millis(lease * 3)),
            Effect.option
          )
          expect(rival._tag).toBe("None")
          expect(
            yield* slow.await.pipe(
              Effect.flatten,
              Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the worker did not finish") })
            )
          ).toMatchObject({ handled: 4, retried: 0, failed: 0 })
          expect(handled).toEqual([1, 2, 3, 4])
          expect((yield* sql`SELECT 1 FROM ${sql(table)}`).length).toBe(0)
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )

  it.live(
    "while a long batch runs, the messages it finished are acked (not at its end)",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("longbatch")
        const blocking = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const stack = outboxStack({
          table,
          handlers: [Handlers.handler(OrderPaid, (paid) =>
            paid.orderId === 10
              ? Deferred.succeed(blocking, undefined).pipe(Effect.zipRight(Deferred.await(release)))
              : Effect.void)]
        })
        yield* Effect.gen(function*() {
          yield* (yield* Outbox.Outbox).dispatchAll(
            Array.from({ length: 10 }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 }))
          )
          const worker = yield* Effect.forkScoped(
            Worker.run({ transports: ["outbox"], batchSize: 10, stopWhenEmpty: true, shutdownTimeout: "1 second" })
          )
          yield* Deferred.await(blocking)
          // The nine finished messages are deleted while the tenth still runs.
          const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`.pipe(
            Effect.map((rows) => rows[0]!.n),
            Effect.filterOrFail((n) => n === 1, (n) => new Error(`${n} messages left`)),
            Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds"))),
            Effect.ensuring(Deferred.succeed(release, undefined))
          )
          expect(left).toBe(1)
          expect(yield* worker.await.pipe(Effect.flatten)).toMatchObject({ handled: 10 })
          expect((yield* sql`SELECT 1 FROM ${sql(table)}`).length).toBe(0)
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )

  it.live("a worker that stops mid-stream gives the claimed-ahead and unstarted messages back at once", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("giveback")
      const stack = outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (paid) => paid.orderId === 5 ? Effect.fail("boom") : Effect.void)]
      })
      yield* Effect.gen(function*() {
        yield* (yield* Outbox.Outbox).dispatchAll(
          Array.from({ length: 30 }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 }))
        )
        const summary = yield* Worker.run({ transports: ["outbox"], batchSize: 10, failureLimit: 1 })
        expect(summary).toMatchObject({ handled: 4, retried: 1, failed: 0, stoppedBy: "failure-limit" })
        const rows = yield* sql<{ ready: number; untouched: number; total: number }>`
          SELECT count(*) FILTER (WHERE delivered_at IS NULL AND available_at <= now())::int AS ready,
                 count(*) FILTER (WHERE delivery_count = 0)::int AS untouched,
                 count(*)::int AS total
          FROM ${sql(table)}`
        // 4 acked; the failed one waits for its retry; the other 25 are claimable now and count no delivery.
        expect(rows[0]).toEqual({ ready: 25, untouched: 25, total: 26 })
      }).pipe(Effect.provide(stack))
    })))

  it.live(
    "the worker survives its connections being killed and handles everything",
    () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("terminate")
        const total = 300
        const handled = new Map<number, number>()
        const stack = outboxStack({
          table,
          handlers: [Handlers.handler(OrderPaid, (m) =>
            Effect.sync(() =>
              handled.set(m.orderId, (handled.get(m.orderId) ?? 0) + 1)
            ).pipe(
              Effect.zipRight(Effect.sleep("5 millis"))
            ))]
        })
        yield* Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          yield* outbox.dispatchAll(Array.from({ length: total }, (_, i) =>
            new OrderPaid({ orderId: i, amount: 1 })))
          const worker = yield* Effect.forkScoped(
            Worker.run({ transports: ["outbox"], batchSize: 10, sleep: "20 millis", limit: total })
          )
          // The worker is at work: its session holds its connection and it has handled a message.
          yield* workerConnections().pipe(
            Effect.filterOrFail((pids) => pids.length > 0 && handled.size > 0, () => "not yet" as const),
            Effect.retry({ schedule: Schedule.spaced("10 millis"), while: (e) => e === "not yet" }),
            Effect.timeout("20 seconds")
          )
          const before = handled.size
          const killed = yield* sql<{ application_name: string; killed: boolean }>`
          SELECT application_name, pg_terminate_backend(pid) AS killed FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()`
          expect(before).toBeLessThan(total) // the kill landed mid-run
          expect(killed.filter((r) => r.killed).length).toBeGreaterThan(0)
          expect(killed.filter((r) => r.killed && r.application_name === PgSession.applicationName).length).toBe(1)
          const summary = yield* worker.await.pipe(Effect.flatten, Effect.timeout("30 seconds"))
          expect(summary.handled).toBe(total)
          expect(handled.size).toBe(total)
          expect((yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`)[0]!.n).toBe(0)
        }).pipe(Effect.scoped, Effect.provide(stack))
      })),
    60_000
  )
})
