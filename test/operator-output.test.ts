/**
 * What an operator reads, against a real PostgreSQL: reasons shown by their useful line, one line per failure,
 * truthful stats, refused retries, setup that says what it did, and the `outbox` binary on any deployment.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import * as Headers from "../src/domain/Headers.js"
import * as Cli from "../src/programs/Cli.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { runCli, spawnScript } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid, OrderShipped } from "./support/messages.js"

const db = testDatabase("operator")
const { withPg } = db

const failure = (result: { readonly exit: Exit.Exit<unknown, unknown> }) =>
  Exit.isFailure(result.exit)
    ? String((result.exit.cause as { error?: { message?: string } }).error?.message ?? result.exit.cause)
    : ""

/** Creates `table` (every migration) with no message in it. */
const createTable = (table: string) => withPg(Effect.void.pipe(Effect.provide(outboxStack({ table, handlers: [] }))))

/** Inserts a row as another tool would: any body and headers text, in any queue, ready now. */
const insertRow = (table: string, queue: string, body: string, headers: string) =>
  withPg(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ id: string; message_id: string }>`
        INSERT INTO ${sql(table)} (message_id, body, headers, queue_name, created_at, available_at)
        VALUES (gen_random_uuid(), ${body}, ${headers}, ${queue}, now(), now())
        RETURNING id::text, message_id::text`)
  ).pipe(Effect.map((rows) => rows[0]!))

/** A body the schema of OrderPaid rejects: `amount` is a string. */
const invalidBody = JSON.stringify({ _tag: "OrderPaid", orderId: 1, amount: "x" })

const rows = (table: string) =>
  withPg(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ id: string; queue_name: string; headers: string }>`
        SELECT id::text, queue_name, headers FROM ${sql(table)} ORDER BY id`)
  )

const exists = (relation: string) =>
  withPg(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ found: boolean }>`SELECT to_regclass(${relation}) IS NOT NULL AS found`)
  ).pipe(Effect.map((rows) =>
    rows[0]!.found
  ))

describe("failed:show", () => {
  it.live("lists a schema error by the line that says what was expected", () =>
    Effect.gen(function*() {
      const table = uniqueTable("op_show")
      yield* createTable(table)
      yield* insertRow(table, "outbox", invalidBody, Headers.encode(new Headers.Headers({ type: "OrderPaid" })))
      const app = Cli.make({
        transport: { table },
        handlers: Handlers.layer([Handlers.handler(OrderPaid, () => Effect.void)])
      })
      yield* runCli(app, ["consume", "outbox", "--dsn", db.url, "--limit", "1", "--sleep", "0.05"])
      const list = yield* runCli(app, ["failed:show", "--dsn", db.url])
      expect(list.stdout).toContain(`MessageDecodeError: ["amount"] Expected number, actual "x"`)
      const id = (yield* rows(table))[0]!.id
      const one = yield* runCli(app, ["failed:show", id, "--dsn", db.url])
      expect(one.stdout).toMatch(/Error\s+\| \["amount"\] Expected number, actual "x"/)
      // The whole tree is there too, below the table.
      expect(one.stdout).toContain("Error message:")
      expect(one.stdout).toContain("└─")
    }))
})

describe("consume output", () => {
  it.live(
    "one line per failure, with -v and without; handlers' INFO logs show by default, --log-level hides them",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("op_lines")
        yield* createTable(table)
        const bad = [
          yield* insertRow(table, "outbox", invalidBody, `{"type":"OrderPaid"}`),
          yield* insertRow(table, "outbox", invalidBody, `{"type":"OrderPaid"}`)
        ]
        const env = { DATABASE_URL: db.url, OUTBOX_TABLE: table, FIXTURE_HANDLER: "log" }
        const verbose = spawnScript("test/fixtures/cli-app.ts", ["consume", "outbox", "--limit", "2", "-v"], env)
        expect((yield* Effect.promise(() => verbose.exited)).code, verbose.stderr.join("")).toBe(0)
        for (const { message_id } of bad) {
          const lines = verbose.lines.filter((line) => line.includes(message_id))
          expect(lines, verbose.lines.join("\n")).toHaveLength(1)
          expect(lines[0]).toMatch(/ OrderPaid failed \d+ms MessageDecodeError: \["amount"\] Expected number/)
        }
        // No line of a reason spread over several: every tree line belongs to a line that names its message.
        expect(verbose.lines.filter((line) => line.includes("Expected number") && !/[0-9a-f-]{36}/.test(line)))
          .toEqual([])

        yield* withPg(
          Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql`UPDATE ${sql(table)} SET queue_name = 'outbox', headers = '{"type":"OrderPaid"}'`)
        )
        const quiet = spawnScript("test/fixtures/cli-app.ts", ["consume", "outbox", "--limit", "2"], env)
        expect(
          (yield* Effect.promise(() =>
            quiet.exited
          )).code
        ).toBe(0)
        for (const { message_id } of bad) {
          const lines = quiet.lines.filter((line) => line.includes(message_id))
          expect(lines, quiet.lines.join("\n")).toHaveLength(1)
          expect(lines[0]).toContain("moved to the failure queue")
        }
        expect(quiet.lines.filter((line) => line.includes("Expected number") && !/[0-9a-f-]{36}/.test(line)))
          .toEqual([])

        yield* withPg(
          Outbox.dispatch(new OrderPaid({ orderId: 42, amount: 1 })).pipe(
            Effect.zipRight(Outbox.dispatch(new OrderPaid({ orderId: 43, amount: 1 }))),
            Effect.provide(outboxStack({ table, handlers: [] }))
          )
        )
        const logs = spawnScript("test/fixtures/cli-app.ts", ["consume", "outbox", "--limit", "1"], env)
        expect((yield* Effect.promise(() => logs.exited)).code).toBe(0)
        expect(logs.lines.some((line) => line.includes("handled order 42")), logs.lines.join("\n")).toBe(true)
        const warnings = spawnScript(
          "test/fixtures/cli-app.ts",
          ["consume", "outbox", "--limit", "1", "--log-level", "warning"],
          env
        )
        expect((yield* Effect.promise(() => warnings.exited)).code).toBe(0)
        expect(warnings.lines.some((line) => line.includes("handled order"))).toBe(false)
        expect(warnings.lines).toContain("Worker stopped (limit): handled 1, retried 0, failed 0.")
      }),
    90_000
  )
})

/** Fails every OrderPaid with an id divisible by 3 (from `outbox`) and every OrderShipped (sent to `shipping`). */
const seedTwoTransports = (table: string) =>
  withPg(
    Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      yield* outbox.dispatchAll(Array.from({ length: 6 }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 })))
      for (const orderId of [1, 2, 3]) {
        yield* Outbox.dispatch(new OrderShipped({ orderId, carrier: "ups" }), { transportNames: ["shipping"] })
      }
      yield* Worker.run({ transports: ["outbox", "shipping"], stopWhenEmpty: true })
      // Two more shipments wait in `shipping`, unconsumed.
      for (const orderId of [4, 5]) {
        yield* Outbox.dispatch(new OrderShipped({ orderId, carrier: "ups" }), { transportNames: ["shipping"] })
      }
    }).pipe(Effect.provide(outboxStack({
      table,
      transports: { outbox: {}, shipping: {} },
      handlers: [
        Handlers.handler(OrderPaid, (m) =>
          m.orderId % 3 === 0
            ? Effect.fail(new UnrecoverableMessageHandlingError({ message: `bad order ${m.orderId}` }))
            : Effect.void),
        Handlers.handler(OrderShipped, () => Effect.fail(new UnrecoverableMessageHandlingError({ message: "no" })))
      ]
    })))
  )

describe("stats", () => {
  it.live("counts each transport's own failures, and shows the failure queue once, as a failure queue", () =>
    Effect.gen(function*() {
      const table = uniqueTable("op_stats")
      yield* seedTwoTransports(table)
      const cli = Cli.make({ transport: { table, transports: { outbox: {}, shipping: {} } } })
      const text = yield* runCli(cli, ["stats", "--dsn", db.url])
      expect(text.stdout).toMatch(/outbox\s+\| outbox\s+\| 0\s+\| 0\s+\| 0\s+\| 2\s+\| -/)
      expect(text.stdout).toMatch(/shipping\s+\| shipping\s+\| 2\s+\| 0\s+\| 0\s+\| 3\s+\| \d/)
      expect(text.stdout).toMatch(/Failure transport\s+\| Queue\s+\| Messages\s+\| Oldest\s+\| Failed from/)
      expect(text.stdout).toMatch(/failed\s+\| failed\s+\| 5\s+\| \S+\s+\| shipping 3, outbox 2/)
      // The failure queue is not ready work.
      expect(text.stdout).not.toMatch(/^failed\s+\| failed\s+\| 5\s+\| 0\s+\| 0/m)
      const json = JSON.parse((yield* runCli(cli, ["stats", "--format", "json", "--dsn", db.url])).stdout)
      expect(json.transports.outbox).toMatchObject({ ready: 0, failed: 2, failureTransport: "failed" })
      expect(json.transports.shipping).toMatchObject({ ready: 2, failed: 3 })
      expect(json.transports.failed).toBeUndefined()
      expect(json.failureTransports.failed).toMatchObject({
        queue: "failed",
        messages: 5,
        from: { outbox: 2, shipping: 3 }
      })
      // Headers that cannot be read, or that name an origin only in a custom header, count as of unknown origin.
      yield* insertRow(table, "failed", "{}", "not json")
      yield* insertRow(table, "failed", "{}", `{"type":"OrderPaid","custom":{"originalTransport":"outbox"}}`)
      const odd = JSON.parse((yield* runCli(cli, ["stats", "--format", "json", "--dsn", db.url])).stdout)
      expect(odd.failureTransports.failed).toMatchObject({
        messages: 7,
        from: { outbox: 2, shipping: 3, "(unknown)": 2 }
      })
      expect(odd.transports.outbox.failed).toBe(2)
      const one = JSON.parse((yield* runCli(cli, ["stats", "outbox", "--format", "json", "--dsn", db.url])).stdout)
      expect(Object.keys(one.transports)).toEqual(["outbox"])
      expect(one.failureTransports).toEqual({})
    }))
})

describe("failed:retry", () => {
  it.live("refuses a message whose original headers were corrupt, keeps it with its reason, retries the others", () =>
    Effect.gen(function*() {
      const table = uniqueTable("op_retry")
      yield* createTable(table)
      const good = yield* insertRow(
        table,
        "outbox",
        JSON.stringify({ _tag: "OrderPaid", orderId: 1, amount: 1 }),
        `{"type":"OrderPaid"}`
      )
      const corrupt = yield* insertRow(
        table,
        "outbox",
        JSON.stringify({ _tag: "OrderPaid", orderId: 2, amount: 1 }),
        "not json"
      )
      const app = Cli.make({
        transport: { table },
        handlers: Handlers.layer([
          Handlers.handler(OrderPaid, () => Effect.fail(new UnrecoverableMessageHandlingError({ message: "later" })))
        ])
      })
      yield* runCli(app, ["consume", "outbox", "--dsn", db.url, "--limit", "2", "--sleep", "0.05"])
      const before = yield* rows(table)
      expect(before.map((r) => r.queue_name)).toEqual(["failed", "failed"])
      const reason = JSON.parse(before.find((r) => r.id === corrupt.id)!.headers).errorDetails
      const result = yield* runCli(app, ["failed:retry", "--all", "--force", "--dsn", db.url])
      expect(Exit.isFailure(result.exit)).toBe(true)
      expect(failure(result)).toContain("1 message(s) could not be retried")
      expect(result.stderr).toContain(`Message "${corrupt.id}" cannot be retried: its original headers were corrupt`)
      expect(result.stdout).toContain(`[OK] Message "${good.id}" (${good.message_id}) sent back to "outbox".`)
      const after = yield* rows(table)
      expect(after.find((r) => r.id === good.id)!.queue_name).toBe("outbox")
      const kept = after.find((r) => r.id === corrupt.id)!
      expect(kept.queue_name).toBe("failed")
      expect(JSON.parse(kept.headers).errorDetails).toEqual(reason)
      expect(reason.tag).toBe("MessageDecodeError")
      const byId = yield* runCli(app, ["failed:retry", corrupt.id, "--force", "--dsn", db.url])
      expect(failure(byId)).toContain("could not be retried")
    }))
})

describe("setup-transports", () => {
  it.live("prints every migration it applies, and creates the idempotency table only when asked", () =>
    Effect.gen(function*() {
      const table = uniqueTable("op_setup")
      const store = uniqueTable("op_store")
      const cli = Cli.make({ transport: { table } })
      const first = yield* runCli(cli, ["setup-transports", "--dsn", db.url])
      expect(first.stdout.split("\n")).toEqual([
        "Applied migrations: 1_create_messages, 2_claim_fillfactor, 3_claim_function, 4_claim_next_due, " +
        "5_claim_extreme_values, 6_ordering_keys, 7_claim_acked_keys_first, 8_waiting_workers, " +
        "9_claim_floor, 10_autovacuum, 11_claim_plans, 12_wake_trigger, 13_crash_count, 14_producer_insert_only, " +
        "15_bounded_keys",
        `[OK] The "outbox" transport was set up successfully.`,
        `[OK] The "failed" transport was set up successfully.`
      ])
      expect(yield* exists("outbox_idempotency")).toBe(false)
      const again = yield* runCli(cli, ["setup-transports", "--dsn", db.url])
      expect(again.stdout).toContain("Schema is up to date; nothing to do.")
      expect(yield* exists("outbox_idempotency")).toBe(false)
      const asked = yield* runCli(Cli.make({ transport: { table }, idempotency: { table: store } }), [
        "setup-transports",
        "--dsn",
        db.url
      ])
      expect(asked.stdout).toContain("Applied migrations: idempotency 1_create_idempotency")
      expect(asked.stdout).toContain("[OK] The idempotency store was set up successfully.")
      expect(yield* exists(store)).toBe(true)
      const flagged = yield* runCli(cli, ["setup-transports", "--idempotency", "--dsn", db.url])
      expect(flagged.stdout).toContain("Applied migrations: idempotency 1_create_idempotency")
      expect(yield* exists("outbox_idempotency")).toBe(true)
      const none = yield* runCli(Cli.make({ transport: { table }, idempotency: false }), [
        "setup-transports",
        "--idempotency",
        "--dsn",
        db.url
      ])
      expect(failure(none)).toContain("no idempotency store")
    }))
})

describe("the outbox binary on any deployment", () => {
  it.live("finds the table's queues and the transports its failures came from; checks what it is given", () =>
    Effect.gen(function*() {
      const table = uniqueTable("op_binary")
      yield* seedTwoTransports(table)
      // What `outbox-main.ts` runs: no application options at all.
      const binary = Cli.make()
      const stats = yield* runCli(binary, ["stats", "--table", table, "--dsn", db.url])
      expect(stats.stdout).toMatch(/shipping\s+\| shipping\s+\| 2\s+\| 0\s+\| 0\s+\| 3\s+\| \d/)
      expect(stats.stdout).toMatch(/failed\s+\| failed\s+\| 5\s+\|/)
      const shipped = (yield* rows(table)).filter((r) =>
        r.queue_name === "failed" && JSON.parse(r.headers).type === "OrderShipped"
      )
      const retried = yield* runCli(binary, [
        "failed:retry",
        shipped[0]!.id,
        "--force",
        "--table",
        table,
        "--dsn",
        db.url
      ])
      expect(retried.stdout).toContain(`sent back to "shipping".`)
      expect((yield* rows(table)).find((r) => r.id === shipped[0]!.id)!.queue_name).toBe("shipping")

      // Every message of `shipping` is gone: the transport is known only from the failures that name it.
      yield* withPg(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DELETE FROM ${sql(table)} WHERE queue_name = 'shipping'`)
      )
      const inferred = yield* runCli(binary, [
        "failed:retry",
        shipped[1]!.id,
        "--force",
        "--table",
        table,
        "--dsn",
        db.url
      ])
      expect(inferred.stdout).toContain(`sent back to "shipping" (its queue_name is taken to be "shipping"`)
      // Named by --transport-queue, its queue is the one given.
      const mapped = yield* runCli(binary, [
        "failed:retry",
        shipped[2]!.id,
        "--force",
        "--table",
        table,
        "--transport-queue",
        "shipping=shipping_v2",
        "--dsn",
        db.url
      ])
      expect(mapped.stdout).toContain(`sent back to "shipping".`)
      expect((yield* rows(table)).find((r) => r.id === shipped[2]!.id)!.queue_name).toBe("shipping_v2")

      const badTable = yield* runCli(binary, ["stats", "--table", "x; DROP TABLE y", "--dsn", db.url])
      expect(failure(badTable)).toContain(`Invalid table name "x; DROP TABLE y"`)
      const badPair = yield* runCli(binary, [
        "stats",
        "--table",
        table,
        "--transport-queue",
        "shipping",
        "--dsn",
        db.url
      ])
      expect(failure(badPair)).toContain("--transport-queue: expected NAME=QUEUE")
      const badQueue = yield* runCli(binary, ["stats", "--table", table, "--transport-queue", "a=b c", "--dsn", db.url])
      expect(failure(badQueue)).toContain(`Invalid queue or transport name "b c"`)
      const notUrl = yield* runCli(binary, ["stats", "--dsn", "not-a-url"])
      expect(failure(notUrl)).toContain("The DSN is not a valid PostgreSQL or MySQL URL")
    }))

  it.live(
    "the real binary: OUTBOX_TABLE, a custom queue, one line on stderr for a bad DSN",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("op_main")
        yield* seedTwoTransports(table)
        const stats = spawnScript("src/programs/outbox-main.ts", ["stats"], {
          DATABASE_URL: db.url,
          OUTBOX_TABLE: table
        })
        expect((yield* Effect.promise(() => stats.exited)).code, stats.stderr.join("")).toBe(0)
        expect(stats.lines.join("\n")).toMatch(/shipping\s+\| shipping\s+\| 2/)
        const bad = spawnScript("src/programs/outbox-main.ts", ["stats", "--dsn", "not-a-url"], {})
        expect((yield* Effect.promise(() => bad.exited)).code).toBe(1)
        expect(bad.stderr.join("").trim()).toBe(
          "error: The DSN is not a valid PostgreSQL or MySQL URL: expected " +
            "postgres://user:password@host:port/database or mysql://user:password@host:port/database " +
            "(from --dsn or DATABASE_URL)"
        )
        const help = spawnScript("src/programs/outbox-main.ts", ["stats", "--help"], {})
        expect((yield* Effect.promise(() => help.exited)).code).toBe(0)
        const text = help.lines.join("\n")
        expect(text).toContain("--transport-queue")
        expect(text).not.toMatch(/\u001b\[/)
      }),
    60_000
  )
})
