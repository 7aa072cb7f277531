/**
 * Ordering keys on a real PostgreSQL: commit order within a key (a producer that commits later never overtakes
 * one that committed earlier — it waits for it), several workers with concurrency 8 handling each key one message
 * at a time in that order through retries, and a terminal failure that blocks its key until the operator acts.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Cli from "../src/programs/Cli.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { runCli } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { awaitLockWaiter, outboxStack, uniqueTable } from "./support/harness.js"
import { orderedSteps, Step } from "./support/ordering.js"

const db = testDatabase("ordering")

const quiet = Logger.withMinimumLogLevel(LogLevel.None)

/** The places (`ordering_seq`) of a key's messages, and whether the key has a sequence row and a workers' row. */
const keyState = (table: string, key: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all({
      places: Effect.map(
        sql<{ seq: string }>`SELECT ordering_seq::text AS seq FROM ${sql(table)}
          WHERE ordering_key = ${key} ORDER BY ordering_seq`,
        (rows) => rows.map((row) => Number(row.seq))
      ),
      sequenceRows: Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${table}_key_seq`)} WHERE ordering_key = ${key}`,
        (rows) => rows[0]!.n
      ),
      workerRows: Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${table}_keys`)} WHERE ordering_key = ${key}`,
        (rows) => rows[0]!.n
      )
    }))

describe("ordering keys on PostgreSQL", () => {
  it.live(
    "a key's rows go once no message of it is left; its next message is placed above every earlier one",
    () =>
      db.withPg(Effect.gen(function*() {
        const table = uniqueTable("bounded")
        const order: Array<number> = []
        yield* Effect.gen(function*() {
          yield* (yield* Outbox.Outbox).dispatchAll(
            [1, 2, 3].map((n) => new Step({ key: "a", n })),
            { orderingKey: "a" }
          )
          const first = yield* keyState(table, "a")
          expect(first).toMatchObject({ sequenceRows: 1, workerRows: 1 })
          yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" })
          // The claim after the last ack found the key empty and no producer holding it: both rows are gone.
          expect(yield* keyState(table, "a")).toEqual({ places: [], sequenceRows: 0, workerRows: 0 })
          yield* Outbox.dispatch(new Step({ key: "a", n: 4 }), { orderingKey: "a" })
          const again = yield* keyState(table, "a")
          expect(again.places[0]!).toBeGreaterThan(Math.max(...first.places))
          yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" })
          expect(order).toEqual([1, 2, 3, 4])
        }).pipe(
          Effect.provide(outboxStack({
            table,
            handlers: [Handlers.handler(Step, (step) => Effect.sync(() => order.push(step.n)))]
          })),
          quiet
        )
      })),
    60_000
  )

  it.live(
    "a producer that waits for the key's row while a worker deletes it takes a place above every earlier one",
    () =>
      db.withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("forget_race")
        const order: Array<number> = []
        yield* Effect.gen(function*() {
          yield* (yield* Outbox.Outbox).dispatchAll(
            [1, 2].map((n) => new Step({ key: "a", n })),
            { orderingKey: "a" }
          )
          const before = yield* keyState(table, "a")
          yield* sql`DELETE FROM ${sql(table)}`
          // What the claim does with an empty key, in a transaction held open: lock its sequence row, delete its
          // workers' row (whose trigger deletes the sequence row).
          const deleted = yield* Deferred.make<void>()
          const commit = yield* Deferred.make<void>()
          const worker = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
            yield* sql`SELECT 1 FROM ${sql(`${table}_key_seq`)} WHERE ordering_key = 'a' FOR UPDATE SKIP LOCKED`
            yield* sql`DELETE FROM ${sql(`${table}_keys`)} WHERE ordering_key = 'a'`
            yield* Deferred.succeed(deleted, undefined)
            yield* Deferred.await(commit)
          })))
          yield* Deferred.await(deleted)
          const producer = yield* Effect.fork(sql.withTransaction(
            Outbox.dispatch(new Step({ key: "a", n: 3 }), { orderingKey: "a" })
          ))
          yield* awaitLockWaiter
          yield* Deferred.succeed(commit, undefined)
          yield* Fiber.join(worker)
          yield* Fiber.join(producer)
          // A second producer, after: the key's row is the first one's again.
          yield* Outbox.dispatch(new Step({ key: "a", n: 4 }), { orderingKey: "a" })
          const after = yield* keyState(table, "a")
          expect(after.sequenceRows).toBe(1)
          expect(after.workerRows).toBe(1)
          expect(after.places).toHaveLength(2)
          expect(after.places[0]!).toBeGreaterThan(Math.max(...before.places))
          expect(after.places[1]!).toBeGreaterThan(after.places[0]!)
          yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" })
          expect(order).toEqual([3, 4])
        }).pipe(
          Effect.provide(outboxStack({
            table,
            handlers: [Handlers.handler(Step, (step) => Effect.sync(() => order.push(step.n)))]
          })),
          quiet
        )
      })),
    60_000
  )

  it.live(
    "producers keep coming while workers empty and delete their keys: every key in commit order, no row left",
    () =>
      db.withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("forget_churn")
        const started = new Map<string, Array<number>>()
        const keys = 6
        const perKey = 40
        yield* Effect.gen(function*() {
          // Each key has one producer, one message per transaction: its commit order is 1, 2, 3, …
          const produce = Effect.forEach(
            Array.from({ length: keys }, (_, k) => `k${k}`),
            (key) =>
              Effect.forEach(
                Array.from({ length: perKey }, (_, i) => i + 1),
                (n) =>
                  sql.withTransaction(Outbox.dispatch(new Step({ key, n }), { orderingKey: key })).pipe(
                    Effect.zipLeft(Effect.sleep(`${n % 3} millis`))
                  ),
                { discard: true }
              ),
            { concurrency: "unbounded", discard: true }
          )
          const consume = Worker.run({ transports: ["outbox"], concurrency: 4, batchSize: 3, sleep: "5 millis" })
          const consumers = yield* Effect.fork(Effect.all([consume, consume], { concurrency: "unbounded" }))
          yield* produce
          yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" }).pipe(
            Effect.repeat({
              until: () => [...started.values()].reduce((total, steps) => total + steps.length, 0) >= keys * perKey
            })
          )
          yield* Fiber.interrupt(consumers)
          for (let k = 0; k < keys; k++) {
            expect(started.get(`k${k}`)).toEqual(Array.from({ length: perKey }, (_, i) => i + 1))
          }
          // Once every key is empty (a last claim looks at them), no key keeps a row.
          yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" })
          const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${table}_key_seq`)}`
          expect(left[0]!.n).toBe(0)
        }).pipe(
          Effect.provide(outboxStack({
            table,
            handlers: [Handlers.handler(Step, (step) =>
              Effect.sync(() =>
                started.set(step.key, [...(started.get(step.key) ?? []), step.n])
              ))]
          })),
          quiet
        )
      })),
    120_000
  )

  it.live(
    "a producer that commits later waits for the one holding the key, and its message comes after",
    () =>
      db.withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const order: Array<number> = []
        const table = uniqueTable("ordered")
        yield* Effect.gen(function*() {
          const first = yield* Deferred.make<void>()
          const dispatched = yield* Deferred.make<void>()
          const holding = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
            yield* Outbox.dispatch(new Step({ key: "a", n: 1 }), { orderingKey: "a" })
            yield* Deferred.succeed(dispatched, undefined)
            yield* Deferred.await(first)
          })))
          yield* Deferred.await(dispatched)
          // The second producer's message gets its place only once the first committed (a lower id changes nothing).
          const waiting = yield* Effect.fork(sql.withTransaction(
            Outbox.dispatch(new Step({ key: "a", n: 2 }), { orderingKey: "a" })
          ))
          yield* awaitLockWaiter
          yield* Deferred.succeed(first, undefined)
          yield* Fiber.join(holding)
          yield* Fiber.join(waiting)
          yield* Worker.run({ transports: ["outbox"], concurrency: 8, limit: 2 })
        }).pipe(
          Effect.provide(outboxStack({
            table,
            handlers: [Handlers.handler(Step, (step) => Effect.sync(() => order.push(step.n)))]
          }))
        )
        expect(order).toEqual([1, 2])
      })),
    60_000
  )

  it.live(
    "three workers, concurrency 8: per key one handler at a time, in commit order, through retries",
    () =>
      db.withPg(
        Effect.gen(function*() {
          const keys = 40
          const perKey = 25
          const steps = orderedSteps({ keys, perKey, failsFirst: (n) => (n % 6 === 0 ? 1 : 0) })
          const table = uniqueTable("ordered")
          const sql = yield* SqlClient.SqlClient
          yield* Effect.gen(function*() {
            // Concurrent producers, each committing a round of every key in its own transaction.
            yield* Effect.forEach(
              Array.from({ length: perKey }, (_, i) => i + 1),
              (n) =>
                sql.withTransaction(Effect.forEach(
                  Array.from({ length: keys }, (_, k) => k),
                  (k) => Outbox.dispatch(new Step({ key: `k${k}`, n }), { orderingKey: `k${k}` }),
                  { discard: true }
                )),
              { concurrency: 1, discard: true }
            )
            const total = steps.total
            let outcomes = 0
            const done = yield* Deferred.make<void>()
            const count = () =>
              Effect.suspend(() => (++outcomes >= total ? Deferred.succeed(done, undefined) : Effect.void))
            const workers = yield* Effect.forEach([1, 2, 3], () =>
              Effect.fork(Worker.run({
                transports: ["outbox"],
                concurrency: 8,
                batchSize: 20,
                sleep: "20 millis",
                onEvent: (
                  e
                ) => (e._tag === "Handled" || e._tag === "Retried" || e._tag === "Failed" ? count() : Effect.void)
              })))
            yield* Deferred.await(done).pipe(Effect.timeout("60 seconds"))
            yield* Effect.forEach(workers, Fiber.interrupt, { discard: true })
          }).pipe(
            Effect.provide(
              outboxStack({
                table,
                handlers: [steps.handler],
                retry: { default: { maxRetries: 3, delay: "5 millis" } }
              })
            )
          )
          steps.check()
        }),
        30
      ).pipe(quiet),
    120_000
  )

  /** Key a: steps 1, 2, 3 (1 fails for good the first time); key b: step 9. */
  const failingFirstStep = (table: string, transports: PgTransport.Options["transports"] = { outbox: {} }) => {
    const order: Array<number> = []
    let failOnce = true
    const stack = outboxStack({
      table,
      transports,
      handlers: [Handlers.handler(Step, (s) =>
        Effect.suspend(() => {
          if (s.n === 1 && failOnce) {
            failOnce = false
            return Effect.fail(new UnrecoverableMessageHandlingError({ message: "bad step" }))
          }
          order.push(s.n)
          return Effect.void
        }))]
    })
    const dispatchSteps = Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      yield* outbox.dispatchAll([1, 2, 3].map((n) => new Step({ key: "a", n })), { orderingKey: "a" })
      yield* outbox.dispatch(new Step({ key: "b", n: 9 }), { orderingKey: "b" })
    })
    return { order, stack, dispatchSteps }
  }

  /** The "Blocked keys" cell of the outbox transport's row in `stats`. */
  const blockedKeys = (cli: ReturnType<typeof Cli.make>) =>
    Effect.map(runCli(cli, ["stats", "--dsn", db.url]), (result) => {
      const row = result.stdout.split("\n").find((line) => line.startsWith("outbox "))
      return row?.split("|").at(-1)?.trim()
    })

  for (const operator of ["failed:retry", "failed:remove"] as const) {
    it.live(
      `a message in the failure queue blocks its key (stats and failed:show say so) until ${operator}, then the key resumes in order`,
      () =>
        db.withPg(
          Effect.gen(function*() {
            const table = uniqueTable("ordered")
            const cli = Cli.make({ transport: { table } })
            const steps = failingFirstStep(table)
            yield* Effect.gen(function*() {
              yield* steps.dispatchSteps
              // Message 1 fails for good; key a stops, key b goes on.
              expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({
                handled: 1,
                failed: 1
              })
              expect(steps.order).toEqual([9])
              expect(yield* blockedKeys(cli)).toBe("1")
              const [failed] = yield* (yield* TransportAdmin).list("failed", { max: 10 })
              const shown = yield* runCli(cli, ["failed:show", failed!.id, "--dsn", db.url])
              expect(shown.stdout).toMatch(/Ordering key\s+\| a \(blocked: its later messages wait for this one\)/)
              const json = JSON.parse(
                (yield* runCli(cli, ["failed:show", failed!.id, "--format", "json", "--dsn", db.url]))
                  .stdout
              )
              expect(json).toMatchObject({ orderingKey: "a", blocksKey: true })
              const acted = yield* runCli(cli, [operator, failed!.id, "--force", "--dsn", db.url])
              expect(acted.exit._tag, acted.stderr).toBe("Success")
              expect(yield* blockedKeys(cli)).toBe("0")
              expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({
                handled: operator === "failed:retry" ? 3 : 2
              })
              expect(steps.order).toEqual(operator === "failed:retry" ? [9, 1, 2, 3] : [9, 2, 3])
            }).pipe(Effect.provide(steps.stack))
          }).pipe(quiet)
        ),
      60_000
    )
  }

  it.live(
    `keyAfterFailure "skip": a terminal failure lets its key go on, and no key counts as blocked`,
    () =>
      db.withPg(
        Effect.gen(function*() {
          const table = uniqueTable("ordered")
          const cli = Cli.make({ transport: { table } })
          const steps = failingFirstStep(table, { outbox: { keyAfterFailure: "skip" } })
          yield* Effect.gen(function*() {
            yield* steps.dispatchSteps
            expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({
              handled: 3,
              failed: 1
            })
            expect(steps.order.filter((n) => n !== 9)).toEqual([2, 3])
            expect(yield* blockedKeys(cli)).toBe("0")
            const [failed] = yield* (yield* TransportAdmin).list("failed", { max: 10 })
            const shown = yield* runCli(cli, ["failed:show", failed!.id, "--dsn", db.url])
            expect(shown.stdout).toMatch(/Ordering key\s+\| a \(not blocked: its later messages went on\)/)
          }).pipe(Effect.provide(steps.stack))
        }).pipe(quiet)
      ),
    60_000
  )
})
