/**
 * Rows and conditions that must not stop, hang or wedge a worker (contract 6): JSON nested past the stack, a
 * reason that would copy a huge value, a type name of a megabyte, `infinity` in the time columns, a delivery count
 * at the integer's limit, a handler's `SqlError` whose words are the database's, a write that fails for longer than
 * its retry, names the configuration accepts but PostgreSQL would not. Each row ends handled or in the failure
 * queue with a bounded reason, its valid neighbours are handled, and the operator's commands can show it.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Headers from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Cli from "../src/programs/Cli.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { runCli } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const db = testDatabase("hostile")
const { withPg } = db

/** Long enough for a loaded machine; a worker that wedges never gets there. */
const safety = "40 seconds"

/** What a stored reason may weigh at most: message and cause are bounded, with room for the JSON around them. */
const maxHeadersLength = 12_000

const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`

interface Row {
  readonly id: string
  readonly queue_name: string
  readonly headers: string
  readonly body: string
  readonly delivery_count: number
}

const rowsOf = (table: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<Row>`SELECT id::text, queue_name, headers, body, delivery_count FROM ${sql(table)} ORDER BY id`
  ).pipe(
    Effect.orDie
  )

/** Inserts a row by hand, as another tool (or an attacker with INSERT) could. */
const insertRow = (table: string, row: {
  readonly body: string
  readonly headers: string
  readonly availableAt?: string
  readonly deliveredAt?: string | null
  readonly deliveryCount?: number
  readonly crashCount?: number
}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: string }>`INSERT INTO ${sql(table)}
        (message_id, body, headers, queue_name, created_at, available_at, delivered_at, delivery_count, crash_count)
      VALUES (${MessageId.make()}, ${row.body}, ${row.headers}, 'outbox', now(),
              ${row.availableAt ?? "now"}::timestamptz, ${row.deliveredAt ?? null}::timestamptz,
              ${row.deliveryCount ?? 0}, ${row.crashCount ?? 0})
      RETURNING id::text`).pipe(Effect.map((rows) => rows[0]!.id), Effect.orDie)

const paidHeaders = Headers.encode(new Headers.Headers({ type: "OrderPaid" }))
const paidBody = (orderId: number) => JSON.stringify({ _tag: "OrderPaid", orderId, amount: 1 })

const reasonOf = (row: Row) =>
  Headers.decode(row.headers).pipe((decoded) => decoded._tag === "Right" ? decoded.right : undefined)

describe("hostile rows", () => {
  it.live("JSON nested past the stack goes to the failure queue; the worker and failed:show go on", () => {
    const handled: Array<number> = []
    const table = uniqueTable("deep")
    return withPg(
      Effect.gen(function*() {
        for (const orderId of [1, 2, 3]) yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
        const deepBody = yield* insertRow(table, {
          body: `{"_tag":"OrderPaid","orderId":4,"amount":${nested(5_000)}}`,
          headers: paidHeaders
        })
        const deepHeaders = yield* insertRow(table, {
          body: paidBody(5),
          headers: `{"type":"OrderPaid","custom":${nested(5_000)}}`
        })
        const deepUnknown = yield* insertRow(table, {
          body: `{"_tag":"OrderPaid","orderId":6,"amount":1,"extra":${nested(100_000)}}`,
          headers: paidHeaders
        })
        const summary = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true }).pipe(
          Effect.timeout(safety)
        )
        expect(summary).toMatchObject({ handled: 3, failed: 3, stoppedBy: "empty" })
        expect(handled.sort()).toEqual([1, 2, 3])
        const rows = yield* rowsOf(table)
        expect(rows.map((r) => [r.id, r.queue_name])).toEqual(
          [deepBody, deepHeaders, deepUnknown].map((id) => [id, "failed"])
        )
        for (const row of rows) {
          expect(row.headers.length).toBeLessThan(maxHeadersLength + (row.id === deepHeaders ? 10_000 : 0))
        }
        expect(reasonOf(rows[0]!)?.errorDetails?.message).toContain("deeper than 1000 levels")
        expect(reasonOf(rows[2]!)?.errorDetails?.message).toContain("deeper than 1000 levels")
        // Corrupt headers are kept (rawHeaders) beside the reason.
        expect(reasonOf(rows[1]!)?.rawHeaders).toContain(`"custom":[[[`)

        const cli = Cli.make({ transport: { table } })
        for (
          const args of [[], ["--stats"], ["--format", "json"], [deepBody, "-v"], [deepHeaders, "-v"], [
            deepUnknown,
            "-v",
            "--format",
            "json"
          ]]
        ) {
          const shown = yield* runCli(cli, ["failed:show", ...args, "--dsn", db.url])
          expect(Exit.isSuccess(shown.exit), `failed:show ${args.join(" ")}: ${shown.stderr}`).toBe(true)
        }
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => void handled.push(m.orderId)))],
        retry: { default: { maxRetries: 0 } }
      })))
    )
  })

  it.live("reasons are bounded: a 5 MB error message, a 1 MB type name", () => {
    const table = uniqueTable("huge")
    return withPg(
      Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        const hugeType = yield* insertRow(table, {
          body: "{}",
          headers: JSON.stringify({ type: `T${"y".repeat(1_000_000)}` })
        })
        const summary = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true }).pipe(
          Effect.timeout(safety)
        )
        expect(summary).toMatchObject({ handled: 0, failed: 2 })
        const rows = yield* rowsOf(table)
        const huge = rows.find((r) => r.id !== hugeType)!
        expect(huge.headers.length).toBeLessThan(maxHeadersLength)
        const details = reasonOf(huge)?.errorDetails
        expect(details?.message).toMatch(/^x+… \[\d+ more characters cut\]$/)
        // The type name is the row's own (its headers keep it); the reason names it bounded.
        const typed = rows.find((r) => r.id === hugeType)!
        expect(reasonOf(typed)?.errorDetails?.message.length).toBeLessThan(1_000)

        const cli = Cli.make({ transport: { table } })
        const list = yield* runCli(cli, ["failed:show", "--dsn", db.url])
        expect(Math.max(...list.stdout.split("\n").map((line) => line.length))).toBeLessThan(300)
        const stats = yield* runCli(cli, ["failed:show", "--stats", "--dsn", db.url])
        expect(Math.max(...stats.stdout.split("\n").map((line) => line.length))).toBeLessThan(300)
        const json = yield* runCli(cli, ["failed:show", huge.id, "-v", "--format", "json", "--dsn", db.url])
        expect(json.stdout.length).toBeLessThan(20_000)
        const one = yield* runCli(cli, ["failed:show", hugeType, "--dsn", db.url])
        expect(Math.max(...one.stdout.split("\n").map((line) => line.length))).toBeLessThan(300)
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, () => Effect.fail(new Error("x".repeat(5_000_000))))],
        retry: { default: { maxRetries: 0 } }
      })))
    )
  })

  it.live("infinity in the time columns and a delivery count at 2147483647 do not break a claim", () => {
    const handled: Array<number> = []
    const table = uniqueTable("extreme")
    return withPg(
      Effect.gen(function*() {
        const transport = yield* Transport
        const admin = yield* TransportAdmin
        // Parked: due never. The queue is otherwise empty: the claim's next-due answer must still come.
        const parked = yield* insertRow(table, { body: paidBody(1), headers: paidHeaders, availableAt: "infinity" })
        const empty = yield* Effect.scoped(
          Effect.flatMap(transport.open(["outbox"]), (session) => session.claim("outbox", 10, []))
        )
        expect(empty.messages).toEqual([])
        expect(Option.map(empty.nextDue, Duration.isFinite)).toEqual(Option.some(false))
        expect(yield* admin.stats("outbox")).toMatchObject({ ready: 0, delayed: 1, inFlight: 0 })

        yield* insertRow(table, { body: paidBody(2), headers: paidHeaders, availableAt: "-infinity" })
        yield* insertRow(table, { body: paidBody(3), headers: paidHeaders, deliveredAt: "infinity" })
        const poison = yield* insertRow(table, {
          body: paidBody(4),
          headers: paidHeaders,
          deliveryCount: 2_147_483_647,
          crashCount: 2_147_483_647
        })
        yield* Outbox.dispatch(new OrderPaid({ orderId: 5, amount: 1 }))
        expect((yield* admin.stats("outbox")).ready).toBe(4)
        const listed = yield* admin.list("outbox", { max: 10 })
        expect(listed.every((m) => !Number.isNaN(m.availableAt.getTime()))).toBe(true)

        const summary = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" }).pipe(
          Effect.timeout(safety)
        )
        // The poison row is judged by its count (a worker died on it ~2³¹ times) and moved, not claimed forever.
        expect(summary).toMatchObject({ handled: 3, failed: 1, stoppedBy: "empty" })
        expect(handled.sort()).toEqual([2, 3, 5])
        const rows = yield* rowsOf(table)
        expect(rows.map((r) => [r.id, r.queue_name])).toEqual([[parked, "outbox"], [poison, "failed"]])
        expect(reasonOf(rows[1]!)?.errorDetails?.tag).toBe("WorkerDiedError")
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => void handled.push(m.orderId)))]
      })))
    )
  })

  it.live("a handler's SqlError is recorded with PostgreSQL's own words", () => {
    const table = uniqueTable("sql_words")
    return withPg(
      Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        const events: Array<Worker.WorkerEvent> = []
        yield* Worker.run({
          transports: ["outbox"],
          stopWhenEmpty: true,
          onEvent: (event) => Effect.sync(() => void events.push(event))
        }).pipe(Effect.timeout(safety))
        const failed = events.find((e) => e._tag === "Failed")
        expect(failed?._tag).toBe("Failed")
        if (failed?._tag !== "Failed") return
        expect(failed.error.tag).toBe("SqlError")
        expect(failed.error.message).toMatch(
          /^Failed to execute statement: invalid byte sequence for encoding "UTF8": 0x00/
        )
        expect(failed.error.cause).toContain(`Caused by: `)
        expect(failed.error.cause).toContain(`invalid byte sequence for encoding "UTF8": 0x00`)
        const rows = yield* rowsOf(table)
        expect(reasonOf(rows[0]!)?.errorDetails?.message).toContain("0x00")
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [
          Handlers.handler(
            OrderPaid,
            () => Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT ${"a\u0000b"}::text`)
          )
        ],
        retry: { default: { maxRetries: 0 } }
      })))
    )
  })

  it.live("a write that fails past settleTimeout stops holding its message: it comes back after one lease", () => {
    const table = uniqueTable("settle")
    let deliveries = 0
    return withPg(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const secondDelivery = yield* Deferred.make<void>()
        // DELETE denied, as by a revoked grant or a failing trigger: every ack fails until the trigger goes.
        yield* sql.unsafe(`CREATE FUNCTION ${table}_deny() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN RAISE EXCEPTION 'deletes denied'; END $$`)
        yield* sql.unsafe(`CREATE TRIGGER ${table}_deny BEFORE DELETE ON ${table}
          FOR EACH ROW EXECUTE FUNCTION ${table}_deny()`)
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        const worker = yield* Worker.run({
          transports: ["outbox"],
          sleep: "50 millis",
          settleTimeout: "300 millis"
        }).pipe(
          Effect.provide(Handlers.layer([
            Handlers.handler(
              OrderPaid,
              () => Effect.suspend(() => ++deliveries === 2 ? Deferred.succeed(secondDelivery, undefined) : Effect.void)
            )
          ])),
          Effect.fork
        )
        // Held, its lease renewed for ever, it would never come back while this worker lives.
        yield* Deferred.await(secondDelivery).pipe(Effect.timeout(safety))
        yield* sql.unsafe(`DROP TRIGGER ${table}_deny ON ${table}`)
        while ((yield* rowsOf(table)).length > 0) yield* Effect.sleep("50 millis")
        yield* Fiber.interrupt(worker)
        expect(deliveries).toBeGreaterThanOrEqual(2)
      }).pipe(
        Effect.provide(outboxStack({
          table,
          handlers: [],
          transports: { outbox: { redeliverTimeout: "1 second" } }
        }))
      )
    )
  })
})

describe("names the configuration accepts work at run time", () => {
  it.live("a table of two 48-character parts gets a channel that fits: setup, dispatch, wake-up, handle", () => {
    const schema = `s${"a".repeat(47)}`
    const table = `${schema}.t${"b".repeat(47)}`
    const handled: Array<number> = []
    return withPg(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe(`CREATE SCHEMA IF NOT EXISTS ${schema}`)
        yield* Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
          const summary = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true }).pipe(
            Effect.timeout(safety)
          )
          expect(summary.handled).toBe(1)
        }).pipe(Effect.provide(outboxStack({
          table,
          handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => void handled.push(m.orderId)))]
        })))
        expect(handled).toEqual([1])
      })
    )
  })

  it.live("a channel pg_notify would reject is refused when the layer is built, naming the channel", () =>
    withPg(
      Effect.gen(function*() {
        const channel = `${"c".repeat(40)}.${"d".repeat(40)}`
        const error = yield* Layer.build(PgTransport.layer({ table: uniqueTable("channel"), channel })).pipe(
          Effect.scoped,
          Effect.flip
        )
        expect(error._tag).toBe("OutboxConfigError")
        expect(error.message).toContain(JSON.stringify(channel))
        expect(error.message).toContain("63")
      })
    ))

  it.live("failed:show of an id past bigint's range says not found", () => {
    const table = uniqueTable("cli_range")
    return withPg(
      Effect.gen(function*() {
        const cli = Cli.make({ transport: { table } })
        const shown = yield* runCli(cli, ["failed:show", "9999999999999999999", "--dsn", db.url])
        expect(Exit.isFailure(shown.exit)).toBe(true)
        expect(`${shown.stderr}\n${String(Exit.isFailure(shown.exit) ? shown.exit.cause : "")}`).toContain(
          `The message "9999999999999999999" was not found`
        )
      }).pipe(Effect.provide(outboxStack({ table, handlers: [] })))
    )
  })
})
