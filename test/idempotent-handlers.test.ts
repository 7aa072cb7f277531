/**
 * Idempotency wired in: the handler option, the worker's retention job, the command line.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import * as MessageId from "../src/domain/MessageId.js"
import * as MemoryIdempotencyStore from "../src/layers/MemoryIdempotencyStore.js"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Cli from "../src/programs/Cli.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { runCli, validationError } from "./support/cli.js"
import { query, testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const db = testDatabase("idem_wiring")
const { withPg } = db

describe("idempotent handlers", () => {
  it.live("{ idempotent: true } runs a handler's effect once per message; two consumers each run once", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("idem_handlers")
      const store = uniqueTable("idem_records")
      yield* sql`CREATE TABLE ${sql(`${table}_effects`)} (consumer text, message_id uuid)`
      const effect = (consumer: string) => (_m: OrderPaid, envelope: { readonly messageId: string }) =>
        sql`INSERT INTO ${sql(`${table}_effects`)} VALUES (${consumer}, ${envelope.messageId})`.pipe(Effect.asVoid)
      const stack = outboxStack({
        table,
        handlers: [
          Handlers.handler(OrderPaid, effect("invoices"), { name: "invoices", idempotent: true }),
          Handlers.handler(OrderPaid, effect("mailer"), { idempotent: "mailer" })
        ]
      }).pipe(Layer.provideMerge(PgIdempotencyStore.layer({ table: store, autoSetup: true })))
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        // Deliver the same message three times (a duplicate row, as after a crash before the ack).
        yield* sql`INSERT INTO ${sql(table)} (message_id, body, headers, queue_name, available_at)
          SELECT message_id, body, headers, queue_name, now() FROM ${sql(table)}`
        yield* sql`INSERT INTO ${sql(table)} (message_id, body, headers, queue_name, available_at)
          SELECT message_id, body, headers, queue_name, now() FROM ${sql(table)} LIMIT 1`
        expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({ handled: 3 })
      }).pipe(Effect.provide(stack))
      const effects = yield* sql<{ consumer: string; n: number }>`
        SELECT consumer, count(*)::int AS n FROM ${sql(`${table}_effects`)} GROUP BY consumer ORDER BY consumer`
      expect(effects).toEqual([{ consumer: "invoices", n: 1 }, { consumer: "mailer", n: 1 }])
      const records = yield* sql<{ consumer: string }>`SELECT consumer FROM ${sql(store)} ORDER BY consumer`
      expect(records.map((r) => r.consumer)).toEqual(["invoices", "mailer"])
    })))

  it.effect("an idempotent handler without an IdempotencyStore is a configuration error at build time", () =>
    Effect.gen(function*() {
      const options: Handlers.HandlerOptions = { idempotent: true }
      const error = yield* Effect.flip(Handlers.make([Handlers.handler(OrderPaid, () => Effect.void, options)]))
      expect(error.message).toContain("no IdempotencyStore")
      const badName = yield* Effect.flip(
        Handlers.make([
          Handlers.handler(OrderPaid, () => Effect.void, { idempotent: "x".repeat(300) })
        ]).pipe(Effect.provide(MemoryIdempotencyStore.layer()))
      )
      expect(badName._tag).toBe("OutboxConfigError")
    }))
})

describe("the worker's retention job", () => {
  it.effect("purges records older than the window every interval, on the Clock", () =>
    Effect.gen(function*() {
      const memory = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
      const old = MessageId.make()
      yield* memory.runOnce({ messageId: old, consumer: "c" }, Effect.void)
      yield* TestClock.adjust("2 hours")
      const recent = MessageId.make()
      yield* memory.runOnce({ messageId: recent, consumer: "c" }, Effect.void)
      const worker = yield* Effect.forkScoped(Worker.run({
        transports: ["outbox"],
        sleep: "1 minute",
        idempotencyPurge: { every: "10 minutes", olderThan: "1 hour" }
      }))
      yield* TestClock.adjust("5 minutes")
      expect((yield* memory.records).length).toBe(2)
      yield* TestClock.adjust("6 minutes")
      expect((yield* memory.records).map((r) => r.messageId)).toEqual([recent])
      yield* Fiber.interrupt(worker)
    }).pipe(
      Effect.scoped,
      Effect.provide(
        Layer.mergeAll(Outbox.layer(), Handlers.layer([]), ScheduleRetryStrategy.layerDefault).pipe(
          Layer.provideMerge(MemoryTransport.layer()),
          Layer.provideMerge(MemoryIdempotencyStore.layer())
        )
      )
    ))
})

describe("idempotency on the command line", () => {
  it.live("setup-transports creates the store; idempotency:purge deletes only old records, in batches", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_idem_outbox")
      const store = uniqueTable("cli_idem")
      const cli = Cli.make({ transport: { table }, idempotency: { table: store } })
      const setup = yield* runCli(cli, ["setup-transports", "--dsn", url])
      expect(setup.stdout).toContain("idempotency 1_")
      expect(setup.stdout).toContain("[OK] The idempotency store was set up successfully.")
      yield* Effect.promise(() =>
        query(
          url,
          `INSERT INTO ${store} (message_id, consumer, processed_at)
          SELECT gen_random_uuid(), 'c', now() - (g || ' days')::interval FROM generate_series(1, 25) g`
        )
      )
      const purge = yield* runCli(cli, [
        "idempotency:purge",
        "--older-than",
        "10.5d",
        "--batch-size",
        "4",
        "--dsn",
        url
      ])
      expect(purge.stdout).toContain("[OK] Deleted 15 record(s) older than 10d12h in 4 batch(es).")
      const left = yield* Effect.promise(() => query<{ n: number }>(url, `SELECT count(*)::int AS n FROM ${store}`))
      expect(left[0]!.n).toBe(10)
      const bad = yield* runCli(cli, ["idempotency:purge", "--older-than", "soon", "--dsn", url])
      expect(validationError(bad)).toContain("--older-than: expected a duration such as 30d, got soon")
    }))
})
