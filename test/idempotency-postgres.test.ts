/**
 * What only the PostgreSQL idempotency store has, beyond the conformance suite (idempotency-store.test.ts):
 * its schema and migrations, a missing table reported as StorageNotReadyError, the dedupe record committing
 * or rolling back with the side effect's own SQL (one transaction, savepoints, an ambiguous COMMIT, racing
 * connections), duplicates from the worker (requeue, lease expiry, failure-queue round trip) running the side
 * effect once, the messagesTable guard, and the advisory purge lock as another process sees it.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import pg from "pg"
import { UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import type * as PgTransport from "../src/layers/PgTransport.js"
import type * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as IdempotencyStore from "../src/services/IdempotencyStore.js"
import * as Outbox from "../src/services/Outbox.js"
import { createDatabase } from "./support/database.js"
import { awaitLockWaiter, outboxStack, pgLayer, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

let url = ""
beforeAll(async () => {
  url = await createDatabase("idempotency")
})

const withPg = <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.provide(self, Layer.orDie(pgLayer(url)))

/** A fresh store (set up) and its business table `<table>_invoices (order_id, message_id)`. */
const fixture = (options: Omit<PgIdempotencyStore.Options, "table"> = {}) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const table = uniqueTable("dedupe")
    const invoices = `${table}_invoices`
    yield* sql`CREATE TABLE ${sql(invoices)} (id serial PRIMARY KEY, order_id int NOT NULL, message_id uuid NOT NULL)`
    const store = yield* PgIdempotencyStore.make({ ...options, table, autoSetup: true })
    const issue = (orderId: number, messageId: string) =>
      sql`INSERT INTO ${sql(invoices)} (order_id, message_id) VALUES (${orderId}, ${messageId}::uuid)`
    const count = (what: string) =>
      Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(what)}`, (rows) => rows[0]!.n)
    return { sql, table, invoices, store, issue, count }
  })

const drain = (options: Partial<Worker.WorkerOptions> = {}) =>
  Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis", ...options })

class Boom {
  readonly _tag = "Boom"
}

describe("PostgreSQL idempotency store", () => {
  it.live("setup is explicit, idempotent and versioned; the table has the documented shape", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("dedupe_setup")
      const store = yield* PgIdempotencyStore.make({ table })
      const missing = yield* Effect.flip(store.isProcessed({ messageId: MessageId.make(), consumer: "c" }))
      expect(missing._tag).toBe("StorageNotReadyError")
      expect(yield* store.setup).toEqual(["1_create_idempotency"])
      expect(yield* store.setup).toEqual([])
      yield* Effect.all([store.setup, store.setup, store.setup], { concurrency: "unbounded" })
      const migrations = yield* sql<{ migration_id: number; name: string }>`
        SELECT migration_id, name FROM ${sql(`${table}_migrations`)}`
      expect(migrations.map((m) => [m.migration_id, m.name])).toEqual([[1, "create_idempotency"]])
      const columns = yield* sql<{ column_name: string; data_type: string; is_nullable: string; len: number | null }>`
        SELECT column_name, data_type, is_nullable, character_maximum_length AS len
        FROM information_schema.columns WHERE table_name = ${table} ORDER BY ordinal_position`
      expect(columns).toEqual([
        { column_name: "message_id", data_type: "uuid", is_nullable: "NO", len: null },
        { column_name: "consumer", data_type: "character varying", is_nullable: "NO", len: 190 },
        { column_name: "processed_at", data_type: "timestamp with time zone", is_nullable: "NO", len: null }
      ])
      const indexes = yield* sql<{ indexdef: string }>`SELECT indexdef FROM pg_indexes WHERE tablename = ${table}
        ORDER BY indexname`
      expect(indexes.map((i) => i.indexdef.replace(/^.* USING /, ""))).toEqual([
        "btree (message_id, consumer)",
        "btree (processed_at)"
      ])
    })))

  it.live("before setup, every operation fails with a one-line StorageNotReadyError that says what to run", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("dedupe_missing")
      const store = yield* PgIdempotencyStore.make({ table })
      const key = { messageId: MessageId.make(), consumer: "c" }
      let effects = 0
      const errors = [
        yield* Effect.flip(store.runOnce(key, Effect.sync(() => effects++))),
        yield* Effect.flip(store.isProcessed(key)),
        yield* Effect.flip(store.purge({ olderThan: 0 })),
        yield* Effect.flip(store.purgeExclusive({ olderThan: 0 }))
      ]
      for (const error of errors) {
        expect(error._tag).toBe("StorageNotReadyError")
        if (error._tag !== "StorageNotReadyError") continue
        expect(error.storage).toBe(table)
        expect(error.message).not.toContain("\n")
        expect(error.message).toContain(table)
        expect(error.message).toContain("`outbox setup-transports --idempotency`")
        expect(error.message).toContain("`IdempotencyStore.setup`")
        expect(error.message).toContain("autoSetup: true")
      }
      expect(effects).toBe(0)
      // Inside a caller's transaction: typed too, and only the store's savepoint is rolled back.
      const inCaller = yield* sql.withTransaction(Effect.gen(function*() {
        const error = yield* Effect.flip(store.runOnce(key, Effect.void))
        const rows = yield* sql<{ one: number }>`SELECT 1 AS one`
        return [error._tag, rows[0]!.one]
      }))
      expect(inCaller).toEqual(["StorageNotReadyError", 1])
      // Set up, the same store works.
      expect(yield* store.setup).toEqual(["1_create_idempotency"])
      expect(yield* store.runOnce(key, Effect.succeed(1))).toEqual(Option.some(1))
      // A missing messagesTable is named as what is missing, not the store's table.
      const messages = uniqueTable("dedupe_no_messages")
      const guarded = yield* PgIdempotencyStore.make({ table, messagesTable: messages })
      const noMessages = yield* Effect.flip(guarded.purge({ olderThan: 0 }))
      expect(noMessages._tag).toBe("StorageNotReadyError")
      expect(noMessages._tag === "StorageNotReadyError" && noMessages.storage).toBe(messages)
      expect(noMessages.message).toContain("`outbox setup-transports --idempotency`")
      expect(yield* store.isProcessed(key)).toBe(true)
    })))

  it.live("rejects hostile table names; an invalid key fails before any statement, so the caller's transaction goes on", () =>
    withPg(Effect.gen(function*() {
      const bad = yield* Effect.flip(PgIdempotencyStore.make({ table: "x; DROP TABLE y" }))
      expect(bad._tag).toBe("OutboxConfigError")
      const badMessages = yield* Effect.flip(PgIdempotencyStore.make({ messagesTable: "m WHERE true" }))
      expect(badMessages._tag).toBe("OutboxConfigError")
      const { sql, store, issue, count, invoices } = yield* fixture()
      // Inside a caller's transaction: a bad key fails typed and leaves the transaction usable.
      const errors = yield* sql.withTransaction(Effect.gen(function*() {
        const e1 = yield* Effect.flip(store.runOnce({ messageId: "not-a-uuid", consumer: "c" }, Effect.void))
        const e2 = yield* Effect.flip(store.runOnce({ messageId: MessageId.make(), consumer: "" }, Effect.void))
        const e3 = yield* Effect.flip(store.isProcessed({ messageId: MessageId.make(), consumer: "x".repeat(191) }))
        yield* issue(1, MessageId.make())
        return [e1, e2, e3]
      }))
      expect(errors.map((e) => e._tag)).toEqual(Array(3).fill("InvalidIdempotencyKeyError"))
      expect(yield* count(invoices)).toBe(1)
    })))

  it.live("runs once per (message id, consumer), in one transaction with the side effect", () =>
    withPg(Effect.gen(function*() {
      const { table, store, issue, count, invoices, sql } = yield* fixture()
      const id = MessageId.make()
      const first = yield* store.runOnce({ messageId: id, consumer: "invoices" }, Effect.as(issue(1, id), "issued"))
      const again = yield* store.runOnce({ messageId: id, consumer: "invoices" }, Effect.as(issue(1, id), "issued"))
      // An upper-case spelling of the id is the same message.
      const upper = yield* store.runOnce({ messageId: id.toUpperCase(), consumer: "invoices" }, issue(1, id))
      expect([first, again, upper]).toEqual([Option.some("issued"), Option.none(), Option.none()])
      // A second consumer of the same message runs once too.
      const other = yield* store.runOnce({ messageId: id, consumer: "ledger" }, issue(2, id))
      const otherAgain = yield* store.runOnce({ messageId: id, consumer: "ledger" }, issue(2, id))
      expect(Option.isSome(other)).toBe(true)
      expect(Option.isNone(otherAgain)).toBe(true)
      expect(yield* count(invoices)).toBe(2)
      expect(yield* count(table)).toBe(2)
      expect(yield* store.isProcessed({ messageId: id, consumer: "invoices" })).toBe(true)
      expect(yield* store.isProcessed({ messageId: id, consumer: "shipping" })).toBe(false)
      // The record and the side effect were written by one transaction.
      const xmins = yield* sql<{ same: boolean }>`
        SELECT (SELECT xmin::text FROM ${sql(table)} WHERE consumer = 'invoices') =
               (SELECT xmin::text FROM ${sql(invoices)} WHERE order_id = 1) AS same`
      expect(xmins[0]!.same).toBe(true)
    })))

  it.live("a failing side effect rolls back its record, so the retry runs it again; errors pass through intact", () =>
    withPg(Effect.gen(function*() {
      const { sql, table, store, issue, count, invoices } = yield* fixture()
      const key = { messageId: MessageId.make(), consumer: "invoices" }
      const failing = Effect.zipRight(issue(1, key.messageId), Effect.fail(new Boom()))
      const failed = yield* Effect.either(store.runOnce(key, failing))
      expect(Either.isLeft(failed) && failed.left).toBeInstanceOf(Boom)
      expect(yield* count(invoices)).toBe(0)
      expect(yield* count(table)).toBe(0)
      expect(yield* store.isProcessed(key)).toBe(false)
      // A defect and the effect's own SqlError are the effect's, not the store's.
      const dying = Effect.zipRight(issue(1, key.messageId), Effect.dieMessage("bug"))
      const died = yield* Effect.exit(store.runOnce(key, dying))
      expect(Exit.isFailure(died) && Exit.causeOption(died).pipe(Option.map((c) => c._tag))).toEqual(Option.some("Die"))
      const sqlFailure = yield* Effect.flip(store.runOnce(key, sql`INSERT INTO no_such_table VALUES (1)`))
      expect(sqlFailure._tag).toBe("SqlError")
      expect(yield* count(table)).toBe(0)
      // The retry runs it.
      expect(yield* store.runOnce(key, Effect.as(issue(1, key.messageId), 1))).toEqual(Option.some(1))
      expect(yield* store.runOnce(key, Effect.as(issue(1, key.messageId), 2))).toEqual(Option.none())
      expect(yield* count(invoices)).toBe(1)
    })))

  it.live("inside a caller's transaction it is a savepoint: rolls back with the caller, alone on its own failure", () =>
    withPg(Effect.gen(function*() {
      const { sql, table, store, issue, count, invoices } = yield* fixture()
      const key = { messageId: MessageId.make(), consumer: "invoices" }
      // The caller rolls back: the record goes with it.
      yield* sql.withTransaction(Effect.gen(function*() {
        expect(yield* store.runOnce(key, Effect.as(issue(1, key.messageId), 1))).toEqual(Option.some(1))
        // Seen as processed within the transaction; a nested run of the same key is skipped.
        expect(yield* store.isProcessed(key)).toBe(true)
        expect(yield* store.runOnce(key, issue(1, key.messageId))).toEqual(Option.none())
        return yield* Effect.fail(new Boom())
      })).pipe(Effect.ignore)
      expect(yield* count(table)).toBe(0)
      expect(yield* count(invoices)).toBe(0)
      // The effect fails: only its savepoint rolls back, the caller's transaction commits the rest.
      yield* sql.withTransaction(Effect.gen(function*() {
        yield* issue(100, MessageId.make())
        const failing = Effect.zipRight(issue(1, key.messageId), Effect.fail(new Boom()))
        const result = yield* Effect.either(store.runOnce(key, failing))
        expect(Either.isLeft(result)).toBe(true)
        expect(yield* store.runOnce({ ...key, consumer: "ledger" }, Effect.as(issue(2, key.messageId), 2))).toEqual(
          Option.some(2)
        )
      }))
      const orders = yield* sql<{ order_id: number }>`SELECT order_id FROM ${sql(invoices)} ORDER BY order_id`
      expect(orders.map((o) => o.order_id)).toEqual([2, 100])
      expect(yield* store.isProcessed(key)).toBe(false)
      expect(yield* store.isProcessed({ ...key, consumer: "ledger" })).toBe(true)
    })))

  it.live("a failed COMMIT is a typed TransportError, and the record is not kept", () =>
    withPg(Effect.gen(function*() {
      const { sql, table, store, count } = yield* fixture()
      const strict = `${table}_strict`
      yield* sql`CREATE TABLE ${sql(strict)} (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)`
      const key = { messageId: MessageId.make(), consumer: "c" }
      const error = yield* Effect.flip(store.runOnce(key, sql`INSERT INTO ${sql(strict)} VALUES (1), (1)`))
      expect(error._tag).toBe("TransportError")
      expect(error._tag === "TransportError" && error.operation).toBe("runOnce.commit")
      expect(yield* count(table)).toBe(0)
    })))

  for (const first of ["commits", "rolls back"] as const) {
    it.live(
      `two runs of one key racing on separate connections: the second waits for the first, which ${first}, then ${
        first === "commits" ? "skips" : "runs"
      }`,
      () =>
        withPg(Effect.gen(function*() {
          const { store, issue, count, invoices, table, sql } = yield* fixture()
          const key = { messageId: MessageId.make(), consumer: "invoices" }
          const inserted = yield* Deferred.make<void>()
          const gate = yield* Deferred.make<void>()
          const firstRun = yield* Effect.fork(store.runOnce(
            key,
            Effect.gen(function*() {
              yield* issue(1, key.messageId)
              yield* Deferred.succeed(inserted, undefined)
              yield* Deferred.await(gate)
              if (first === "rolls back") return yield* Effect.fail(new Boom())
              return "first"
            })
          ))
          yield* Deferred.await(inserted)
          const second = yield* Effect.fork(store.runOnce(key, Effect.as(issue(2, key.messageId), "second")))
          // The second transaction blocks on the first's uncommitted record…
          yield* awaitLockWaiter
          expect(Option.isNone(yield* Fiber.poll(second))).toBe(true)
          // …and, once the first commits, sees the conflict and skips; once it rolls back, inserts and runs.
          yield* Deferred.succeed(gate, undefined)
          const firstResult = yield* Effect.either(Fiber.join(firstRun))
          const secondResult = yield* Fiber.join(second)
          if (first === "commits") {
            expect(firstResult).toEqual(Either.right(Option.some("first")))
            expect(secondResult).toEqual(Option.none())
          } else {
            expect(Either.isLeft(firstResult)).toBe(true)
            expect(secondResult).toEqual(Option.some("second"))
          }
          const orders = yield* sql<{ order_id: number }>`SELECT order_id FROM ${sql(invoices)}`
          expect(orders.map((o) => o.order_id)).toEqual(first === "commits" ? [1] : [2])
          expect(yield* count(invoices)).toBe(1)
          expect(yield* count(table)).toBe(1)
        }))
    )
  }

  describe("with the worker", () => {
    /** Outbox + transport + handlers over the store, plus the fixture's tables. */
    const workerFixture = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(
      makeHandlers: (f: Effect.Effect.Success<ReturnType<typeof fixture>>) => Hs,
      options: {
        readonly transports?: PgTransport.Options["transports"]
        readonly retry?: ScheduleRetryStrategy.Options
      } = {}
    ) =>
      Effect.gen(function*() {
        const f = yield* fixture()
        const outboxTable = uniqueTable("dedupe_outbox")
        const stack = outboxStack({ table: outboxTable, handlers: makeHandlers(f), ...options }).pipe(
          Layer.provideMerge(Layer.succeed(IdempotencyStore.IdempotencyStore, f.store))
        )
        return { ...f, outboxTable, stack }
      })

    it.live("a message delivered twice — a duplicate row and a later replay — issues one invoice", () =>
      withPg(Effect.gen(function*() {
        let calls = 0
        const { sql, outboxTable, stack, count, invoices, table } = yield* workerFixture((f) => [
          Handlers.handler(
            OrderPaid,
            IdempotencyStore.idempotent("invoices")((paid, envelope) =>
              Effect.suspend(() => {
                calls++
                return f.issue(paid.orderId, envelope.messageId)
              })
            ),
            { name: "invoices" }
          )
        ])
        yield* Effect.gen(function*() {
          yield* sql.withTransaction(Outbox.dispatch(new OrderPaid({ orderId: 7, amount: 10 })))
          // A manual requeue: a second row with the same message id (another transport id).
          yield* sql`CREATE TABLE ${sql(`${outboxTable}_saved`)} AS SELECT * FROM ${sql(outboxTable)}`
          yield* sql`INSERT INTO ${sql(outboxTable)} (message_id, body, headers, queue_name, available_at)
            SELECT message_id, body, headers, queue_name, now() FROM ${sql(`${outboxTable}_saved`)}`
          expect(yield* drain()).toMatchObject({ handled: 2, retried: 0, failed: 0 })
          // A replay after both were acked.
          yield* sql`INSERT INTO ${sql(outboxTable)} (message_id, body, headers, queue_name, available_at)
            SELECT message_id, body, headers, queue_name, now() FROM ${sql(`${outboxTable}_saved`)}`
          expect(yield* drain()).toMatchObject({ handled: 1, retried: 0, failed: 0 })
        }).pipe(Effect.provide(stack))
        expect(calls).toBe(1)
        expect(yield* count(invoices)).toBe(1)
        expect(yield* count(table)).toBe(1)
        expect(yield* count(outboxTable)).toBe(0)
      })))

    it.live("a lease expiring under a running handler: the second worker blocks, then skips", () =>
      withPg(Effect.gen(function*() {
        let calls = 0
        const started = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        const { sql, outboxTable, stack, count, invoices } = yield* workerFixture((f) => [
          Handlers.handler(OrderPaid, (paid, envelope) =>
            Effect.suspend(() => {
              const call = ++calls
              return IdempotencyStore.once(
                envelope,
                "invoices",
                Effect.gen(function*() {
                  yield* f.issue(paid.orderId, envelope.messageId)
                  if (call === 1) {
                    yield* Deferred.succeed(started, undefined)
                    yield* Deferred.await(gate)
                  }
                })
              )
            }))
        ], { transports: { outbox: { redeliverTimeout: "1 hour" } } })
        yield* Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 10 }))
          const workerA = yield* Effect.fork(drain())
          yield* Deferred.await(started)
          // The lease expires while A's handler is still running (faked: its heartbeat is 20 minutes away).
          yield* sql`UPDATE ${sql(outboxTable)} SET delivered_at = now() - interval '2 hours'`
          const workerB = yield* Effect.fork(drain())
          yield* awaitLockWaiter
          const rows = yield* sql<{ delivery_count: number }>`SELECT delivery_count FROM ${sql(outboxTable)}`
          expect(rows.map((r) => r.delivery_count)).toEqual([2])
          expect(calls).toBe(2)
          yield* Deferred.succeed(gate, undefined)
          expect(yield* Fiber.join(workerA)).toMatchObject({ handled: 1, retried: 0, failed: 0 })
          expect(yield* Fiber.join(workerB)).toMatchObject({ handled: 1, retried: 0, failed: 0 })
        }).pipe(Effect.ensuring(Deferred.succeed(gate, undefined)), Effect.provide(stack))
        expect(yield* count(invoices)).toBe(1)
        expect(yield* count(outboxTable)).toBe(0)
      })))

    it.live("failed → moved back by the operator → retried: the committed side effect is not repeated", () =>
      withPg(Effect.gen(function*() {
        let calls = 0
        const { sql, outboxTable, stack, count, invoices } = yield* workerFixture((f) => [
          Handlers.handler(OrderPaid, (paid, envelope) =>
            Effect.gen(function*() {
              const call = ++calls
              yield* IdempotencyStore.once(envelope, "invoices", f.issue(paid.orderId, envelope.messageId))
              // A later, non-transactional step of the handler fails the first time.
              if (call === 1) return yield* new UnrecoverableMessageHandlingError({ message: "mailer down" })
            }))
        ])
        yield* Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 3, amount: 10 }))
          expect(yield* drain()).toMatchObject({ handled: 0, retried: 0, failed: 1 })
          const failed = yield* sql<{ queue_name: string }>`SELECT queue_name FROM ${sql(outboxTable)}`
          expect(failed.map((r) => r.queue_name)).toEqual(["failed"])
          yield* sql`UPDATE ${sql(outboxTable)} SET queue_name = 'outbox', available_at = now(), delivered_at = NULL`
          expect(yield* drain()).toMatchObject({ handled: 1, retried: 0, failed: 0 })
        }).pipe(Effect.provide(stack))
        expect(calls).toBe(2)
        expect(yield* count(invoices)).toBe(1)
        expect(yield* count(outboxTable)).toBe(0)
      })))

    it.live("a side effect failing inside runOnce is retried by the strategy and then runs exactly once", () =>
      withPg(Effect.gen(function*() {
        let calls = 0
        const { sql, outboxTable, stack, count, invoices, table } = yield* workerFixture((f) => [
          Handlers.handler(
            OrderPaid,
            IdempotencyStore.idempotent("invoices")((paid, envelope) =>
              Effect.gen(function*() {
                calls++
                yield* f.issue(paid.orderId, envelope.messageId)
                if (calls === 1) return yield* Effect.fail(new Boom())
              })
            )
          )
        ], { retry: { default: { delay: "1 millis", maxRetries: 3 } } })
        yield* Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 4, amount: 10 }))
          const first = yield* drain({ limit: 1 })
          expect(first).toMatchObject({ handled: 0, retried: 1, failed: 0 })
          expect(yield* count(invoices)).toBe(0)
          expect(yield* count(table)).toBe(0)
          yield* sql`UPDATE ${sql(outboxTable)} SET available_at = now()`
          expect(yield* drain()).toMatchObject({ handled: 1, retried: 0, failed: 0 })
        }).pipe(Effect.provide(stack))
        expect(calls).toBe(2)
        expect(yield* count(invoices)).toBe(1)
      })))
  })

  // Purge windows, batches and exclusivity are the suite's; here, what only SQL storage has.
  describe("purge", () => {
    /** Records `n` keys, then ages those whose index is below `old` by `days`. */
    const seed = (
      f: Effect.Effect.Success<ReturnType<typeof fixture>>,
      n: number,
      old: number,
      days: number
    ) =>
      Effect.gen(function*() {
        for (let i = 0; i < n; i++) {
          yield* f.store.runOnce({ messageId: MessageId.make(), consumer: i < old ? "old" : "new" }, Effect.void)
        }
        yield* f.sql`UPDATE ${f.sql(f.table)} SET processed_at = processed_at - ${days}::float8 * interval '1 day'
          WHERE consumer = 'old'`
      })

    it.live("with messagesTable, keeps the records of messages still stored (e.g. in the failure queue)", () =>
      withPg(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const messages = uniqueTable("dedupe_messages")
        yield* sql`CREATE TABLE ${sql(messages)} (id bigserial PRIMARY KEY, message_id uuid NOT NULL)`
        yield* sql`CREATE INDEX ON ${sql(messages)} (message_id)`
        const f = yield* fixture({ messagesTable: messages })
        yield* seed(f, 5, 5, 400)
        const kept = yield* sql<{ message_id: string }>`SELECT message_id::text FROM ${sql(f.table)} LIMIT 2`
        for (const row of kept) yield* sql`INSERT INTO ${sql(messages)} (message_id) VALUES (${row.message_id}::uuid)`
        expect(yield* f.store.purge({ batchSize: 2 })).toBe(3)
        const left = yield* sql<{ message_id: string }>`SELECT message_id::text FROM ${sql(f.table)} ORDER BY 1`
        expect(left.map((r) => r.message_id)).toEqual(kept.map((r) => r.message_id).sort())
      })))

    it.live("purgeExclusive: None while another purger holds the lock, Some(deleted) once it is free", () =>
      withPg(Effect.gen(function*() {
        const f = yield* fixture()
        yield* seed(f, 5, 5, 40)
        // Another purger (another process): the lock held by an open transaction on its own connection;
        // closing that connection releases it.
        yield* Effect.acquireUseRelease(
          Effect.promise(async () => {
            const other = new pg.Client({ connectionString: url })
            await other.connect()
            return other
          }),
          (other) =>
            Effect.gen(function*() {
              yield* Effect.promise(() => other.query("BEGIN"))
              const locked = yield* Effect.promise(() =>
                other.query("SELECT pg_try_advisory_xact_lock(hashtext($1)) AS locked", [
                  PgIdempotencyStore.purgeLockName(f.table)
                ])
              )
              expect(locked.rows[0].locked).toBe(true)
              expect(yield* f.store.purgeExclusive({ batchSize: 2 })).toEqual(Option.none())
              expect(yield* f.count(f.table)).toBe(5)
            }),
          (other) => Effect.promise(() => other.end())
        )
        const batches: Array<number> = []
        expect(yield* f.store.purgeExclusive({ batchSize: 2, onBatch: (n) => Effect.sync(() => batches.push(n)) }))
          .toEqual(Option.some(5))
        expect(batches).toEqual([2, 2, 1])
        expect(yield* f.count(f.table)).toBe(0)
      })))

    it.live("purgeExclusive: a purger that loses the lock between batches stops and leaves the rest", () =>
      withPg(Effect.gen(function*() {
        const f = yield* fixture()
        yield* seed(f, 6, 6, 40)
        const other = new pg.Client({ connectionString: url })
        yield* Effect.promise(() => other.connect())
        const lockName = PgIdempotencyStore.purgeLockName(f.table)
        const result = yield* f.store.purgeExclusive({
          batchSize: 2,
          // After the first batch, another purger takes the lock.
          onBatch: () =>
            Effect.promise(() =>
              other.query("BEGIN").then(() => other.query("SELECT pg_advisory_xact_lock(hashtext($1))", [lockName]))
            ).pipe(Effect.asVoid)
        }).pipe(Effect.ensuring(Effect.promise(() => other.query("COMMIT").then(() => other.end()))))
        expect(result).toEqual(Option.some(2))
        expect(yield* f.count(f.table)).toBe(4)
      })))
  })
})
