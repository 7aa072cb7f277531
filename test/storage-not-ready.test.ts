/**
 * An idempotency table that is not set up (the outbox table is): storage that is not ready is not the messages'
 * fault. A worker whose handlers are idempotent stops at its first message with a `StorageNotReadyError` naming the
 * table and the command to run, and every message is still queued as it was — not retried, not delivered, not in
 * the failure queue — on PostgreSQL and on MariaDB. The same for a failure transport on another backend whose table
 * is missing: the message it could not take is given back, not retried through the outage.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as MysqlIdempotencyStore from "../src/layers/MysqlIdempotencyStore.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import type { TransportBackend } from "../src/services/TransportAdmin.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"
import { freshMysqlDatabase, mysqlOutboxStack } from "./support/mysql.js"

const db = testDatabase("idem_not_ready")

/** Long enough for a loaded machine; a worker that retries instead of stopping is still running then. */
const atOnce = "20 seconds"

const messages = 20

/** What the rows of the outbox table look like afterwards: per queue, how many, delivered, retried, counted. */
interface Row {
  readonly queue_name: string
  readonly delivered: number | boolean
  readonly delivery_count: number
  readonly headers: string
}

const handlers = (ran: { count: number }) => [
  Handlers.handler(OrderPaid, () => Effect.sync(() => void ran.count++), { name: "invoices", idempotent: true }),
  Handlers.handler(OrderPaid, () => Effect.sync(() => void ran.count++), { name: "mailer", idempotent: true })
]

/** Dispatches the messages, runs a worker until it ends, and checks how it ended and what the table holds. */
const scenario = (options: {
  readonly table: string
  readonly store: string
  readonly rows: Effect.Effect<ReadonlyArray<Row>, unknown, SqlClient.SqlClient>
  readonly ran: { count: number }
  /** What the error says to do (default: run the setup with `--idempotency`). */
  readonly says?: ReadonlyArray<string>
}) => {
  const logs: Array<string> = []
  const recorder = Logger.make(({ message }) => void logs.push(String(message)))
  return Effect.gen(function*() {
    for (let orderId = 1; orderId <= messages; orderId++) {
      yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
    }
    const error = yield* Worker.run({ transports: ["outbox"], sleep: "10 millis", concurrency: 4, batchSize: 8 })
      .pipe(Effect.timeout(atOnce), Effect.flip)
    expect(error._tag).toBe("StorageNotReadyError")
    expect(error.message).toContain(options.store)
    for (const words of options.says ?? ["outbox setup-transports --idempotency"]) {
      expect(error.message).toContain(words)
    }
    expect(logs.filter((line) => line.includes(": retry #"))).toEqual([])
    expect(logs.filter((line) => line.includes("moved to the failure queue:"))).toEqual([])
    expect(logs.filter((line) => line.startsWith("outbox worker: stopped (failure: The idempotency")))
      .toHaveLength(1)
    const rows = yield* options.rows
    expect(rows).toHaveLength(messages)
    for (const row of rows) {
      expect(row.queue_name).toBe("outbox")
      expect(Boolean(row.delivered)).toBe(false)
      expect(row.delivery_count).toBe(0)
      expect(JSON.parse(row.headers).redeliveries).toBeUndefined()
    }
    // No handler body ran: the store's table is read before the effect it guards.
    expect(options.ran.count).toBe(0)
  }).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, recorder)))
}

describe("an idempotency table that is not set up", () => {
  it.live("PostgreSQL: the worker stops with a StorageNotReadyError; every message is still queued, untouched", () =>
    db.withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("idem_nr")
      const store = uniqueTable("idem_nr_records")
      const ran = { count: 0 }
      const stack = outboxStack({ table, handlers: handlers(ran) }).pipe(
        Layer.provideMerge(PgIdempotencyStore.layer({ table: store })),
        Layer.orDie
      )
      const rows = sql<Row>`SELECT queue_name, delivered_at IS NOT NULL AS delivered, delivery_count, headers
        FROM ${sql(table)} ORDER BY id`
      yield* scenario({ table, store, rows, ran }).pipe(Effect.provide(stack))
    })))

  it.live(
    "MariaDB: the worker stops with a StorageNotReadyError; every message is still queued, untouched",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("idem_nr")
        const store = uniqueTable("idem_nr_records")
        const ran = { count: 0 }
        const stack = mysqlOutboxStack({ table, handlers: handlers(ran) }).pipe(
          Layer.provideMerge(MysqlIdempotencyStore.layer({ table: store })),
          Layer.orDie
        )
        const rows = Effect.map(
          sql<Row>`SELECT queue_name, delivered_at IS NOT NULL AS delivered, delivery_count, headers
          FROM ${sql(table)} ORDER BY id`,
          (found) => found.map((row) => ({ ...row, delivery_count: Number(row.delivery_count) }))
        )
        yield* scenario({ table, store, rows, ran }).pipe(Effect.provide(stack))
      }).pipe(Effect.provide(freshMysqlDatabase("idem_not_ready"))),
    60_000
  )
})

describe("an idempotency table the role may not write", () => {
  // The role's missing grant, simulated for the superuser the tests connect as: the server answers the record's
  // INSERT with the error of a privilege the role lacks.
  it.live("PostgreSQL: the worker stops with a StorageNotReadyError naming the grant; every message is untouched", () =>
    db.withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("idem_denied")
      const store = uniqueTable("idem_denied_records")
      const ran = { count: 0 }
      const stack = outboxStack({ table, handlers: handlers(ran) }).pipe(
        Layer.provideMerge(PgIdempotencyStore.layer({ table: store, autoSetup: true })),
        Layer.orDie
      )
      const rows = sql<Row>`SELECT queue_name, delivered_at IS NOT NULL AS delivered, delivery_count, headers
        FROM ${sql(table)} ORDER BY id`
      yield* Effect.gen(function*() {
        yield* sql.unsafe(`CREATE FUNCTION ${store}_deny() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN RAISE EXCEPTION 'permission denied for table ${store}' USING ERRCODE = '42501'; END $$`)
        yield* sql.unsafe(`CREATE TRIGGER deny BEFORE INSERT ON ${store} FOR EACH ROW EXECUTE FUNCTION ${store}_deny()`)
        yield* scenario({ table, store, rows, ran, says: [`permission denied for table ${store}`, "Least privilege"] })
      }).pipe(Effect.provide(stack))
    })))

  it.live(
    "MariaDB: the worker stops with a StorageNotReadyError naming the grant; every message is untouched",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = uniqueTable("idem_denied")
        const store = uniqueTable("idem_denied_records")
        const ran = { count: 0 }
        const stack = mysqlOutboxStack({ table, handlers: handlers(ran) }).pipe(
          Layer.provideMerge(MysqlIdempotencyStore.layer({ table: store, autoSetup: true })),
          Layer.orDie
        )
        const rows = Effect.map(
          sql<Row>`SELECT queue_name, delivered_at IS NOT NULL AS delivered, delivery_count, headers
          FROM ${sql(table)} ORDER BY id`,
          (found) => found.map((row) => ({ ...row, delivery_count: Number(row.delivery_count) }))
        )
        yield* Effect.gen(function*() {
          // ER_TABLEACCESS_DENIED_ERROR, as the server answers a user without INSERT on the table.
          yield* sql.unsafe(`CREATE TRIGGER ${store}_deny BEFORE INSERT ON ${store} FOR EACH ROW
          SIGNAL SQLSTATE '42000' SET MYSQL_ERRNO = 1142, MESSAGE_TEXT = 'INSERT command denied to user for table ${store}'`)
          yield* scenario({ table, store, rows, ran, says: [`INSERT command denied`, "MySQL and MariaDB"] })
        }).pipe(Effect.provide(stack))
      }).pipe(Effect.provide(freshMysqlDatabase("idem_denied"))),
    60_000
  )
})

describe("a failure transport on another backend whose table is not set up", () => {
  it.live("the worker stops with its StorageNotReadyError; the message is given back, not retried", () =>
    db.withPg(Effect.gen(function*() {
      const table = uniqueTable("failed_nr")
      const memory = yield* MemoryTransport.make({ transports: { broker: {} } })
      // A broker-like backend whose failed messages go to the PostgreSQL transport's `failed`, not set up.
      const broker: TransportBackend = {
        ...memory,
        names: ["broker"],
        failureTransport: (name) => (name === "broker" ? Option.some("failed") : Option.none()),
        capabilities: (name) => (name === "broker" ? memory.capabilities(name) : Option.none())
      }
      const pg = yield* PgTransport.make({ table })
      const router = yield* TransportRouter.make(broker, pg)
      let ran = 0
      const stack = Layer.mergeAll(
        Handlers.layer([Handlers.handler(OrderPaid, () => Effect.suspend(() => (ran++, Effect.fail("refused"))))]),
        ScheduleRetryStrategy.layer({ default: { maxRetries: 0 } })
      ).pipe(Layer.provideMerge(Layer.succeed(Transport, router)))
      yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })).pipe(
        Effect.provide(Outbox.layer({ routes: { OrderPaid: ["broker"] } }).pipe(Layer.provide(stack)))
      )
      const error = yield* Worker.run({ transports: ["broker"], sleep: "10 millis", settleTimeout: "30 seconds" }).pipe(
        Effect.provide(stack),
        Effect.timeout(atOnce),
        Effect.flip
      )
      expect(error._tag).toBe("StorageNotReadyError")
      expect(error.message).toContain(table)
      expect(error.message).toContain("outbox setup-transports")
      expect(ran).toBe(1)
      const rows = yield* memory.messagesOf("broker")
      expect(rows).toHaveLength(1)
      expect(rows[0]).toMatchObject({ deliveredAt: null, deliveries: 0 })
      expect(JSON.parse(rows[0]!.headers).redeliveries).toBeUndefined()
    })))
})
