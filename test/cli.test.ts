/**
 * The real `@effect/cli` command tree against a real PostgreSQL: every command and option.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import * as Cli from "../src/programs/Cli.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { runCli, spawnScript, validationError } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid, OrderShipped } from "./support/messages.js"

const db = testDatabase("cli")
const { withPg } = db

const failure = (result: { readonly exit: Exit.Exit<unknown, unknown> }) =>
  Exit.isFailure(result.exit)
    ? String((result.exit.cause as { error?: { message?: string } }).error?.message ?? result.exit.cause)
    : ""

/** Dispatches messages into `table`, then fails every OrderShipped and a share of OrderPaid (ids % 3 === 0). */
const seedFailures = (table: string, paid: number, shipped: number) =>
  withPg(
    Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      yield* outbox.dispatchAll(Array.from({ length: paid }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 })))
      yield* outbox.dispatchAll(
        Array.from({ length: shipped }, (_, i) => new OrderShipped({ orderId: i + 1, carrier: "ups" }))
      )
      yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })
    }).pipe(Effect.provide(outboxStack({
      table,
      handlers: [
        Handlers.handler(OrderPaid, (m) =>
          m.orderId % 3 === 0
            ? Effect.fail(new UnrecoverableMessageHandlingError({ message: `bad order ${m.orderId}` }))
            : Effect.void),
        Handlers.handler(OrderShipped, () => Effect.die(new Error("carrier API exploded")))
      ],
      retry: { default: { maxRetries: 0 } }
    })))
  )

const rows = (table: string) =>
  withPg(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ id: string; queue_name: string; message_id: string; headers: string; ready: boolean }>`
      SELECT id::text, queue_name, message_id::text, headers, available_at <= now() AS ready
      FROM ${sql(table)} ORDER BY id`)
  )

describe("outbox command line", () => {
  it.live("setup-transports is idempotent and says what it did", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_setup")
      const cli = Cli.make({ transport: { table } })
      const first = yield* runCli(cli, ["setup-transports", "--dsn", url])
      expect(first.stdout).toContain("Applied migrations: 1_create_messages, 2_claim_fillfactor")
      expect(first.stdout).toContain(`[OK] The "outbox" transport was set up successfully.`)
      const second = yield* runCli(cli, ["setup-transports", "outbox", "--dsn", url])
      expect(second.stdout).toContain("Schema is up to date; nothing to do.")
      const unknown = yield* runCli(cli, ["setup-transports", "nope", "--dsn", url])
      expect(failure(unknown)).toContain(`The "nope" transport does not exist`)
    }))

  it.live("consume honours --limit, --batch-size, --concurrency and -v", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_consume")
      yield* withPg(
        Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          yield* outbox.dispatchAll(Array.from({ length: 6 }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 })))
        }).pipe(Effect.provide(outboxStack({ table, handlers: [] })))
      )
      const seen: Array<number> = []
      const app = Cli.make({
        transport: { table },
        handlers: Handlers.layer([Handlers.handler(OrderPaid, (m) => Effect.sync(() => seen.push(m.orderId)))])
      })
      const run = yield* runCli(app, [
        "consume",
        "outbox",
        "--dsn",
        url,
        "--limit",
        "4",
        "--batch-size",
        "3",
        "--concurrency",
        "2",
        "--sleep",
        "0.05",
        "-v"
      ])
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect([...seen].sort((a, b) => a - b)).toEqual([1, 2, 3, 4])
      const lines = run.stdout.split("\n").filter((l) => / OrderPaid handled \d+ms$/.test(l))
      expect(lines.length).toBe(4)
      expect(lines[0]).toMatch(/^[0-9a-f-]{36} OrderPaid handled \d+ms$/)
      expect(run.stdout).toContain("Worker stopped (limit): handled 4, retried 0, failed 0.")
      expect((yield* rows(table)).length).toBe(2)
    }))

  it.live("consume stops on --failure-limit and --memory-limit, and validates option values", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_limits")
      yield* withPg(
        Effect.gen(function*() {
          const outbox = yield* Outbox.Outbox
          yield* outbox.dispatchAll(Array.from({ length: 5 }, (_, i) => new OrderPaid({ orderId: i + 1, amount: 1 })))
        }).pipe(Effect.provide(outboxStack({ table, handlers: [] })))
      )
      const app = Cli.make({
        transport: { table },
        handlers: Handlers.layer([Handlers.handler(OrderPaid, () => Effect.fail("nope"))])
      })
      const failing = yield* runCli(app, ["consume", "outbox", "--dsn", url, "--failure-limit", "2"])
      expect(failing.stdout).toContain("Worker stopped (failure-limit): handled 0, retried 2, failed 0.")
      const memory = yield* runCli(app, ["consume", "outbox", "--dsn", url, "--memory-limit", "1K"])
      expect(memory.stdout).toContain("Worker stopped (memory-limit): handled 0, retried 0, failed 0.")
      for (
        const [bad, names] of [
          [["--limit", "0"], "--limit must be > 0, got 0"],
          [["--memory-limit", "12X"], "--memory-limit: expected a size such as 128M, got 12X"],
          [["--batch-size", "-1"], "--batch-size must be > 0, got -1"],
          [["--handler-timeout", "0"], "--handler-timeout must be a number of seconds > 0, got 0"],
          [["--stall-after", "-1", "--metrics-port", "0"], "--stall-after must be a number of seconds > 0, got -1"],
          // @effect/cli's own integer parser names the value, not the option
          [["--time-limit", "abc"], "'abc' is not a integer"]
        ] as const
      ) {
        const result = yield* runCli(app, ["consume", "outbox", "--dsn", url, ...bad])
        expect(validationError(result), bad.join(" ")).toContain(names)
      }
      // It bounds the endpoint's /healthz: alone it would be a probe that is not there, so it is refused.
      const stallAlone = yield* runCli(app, ["consume", "outbox", "--dsn", url, "--stall-after", "5"])
      expect(validationError(stallAlone)).toBeUndefined()
      expect(failure(stallAlone)).toContain("--stall-after bounds the /healthz probe of --metrics-port")
      expect(stallAlone.stdout).not.toContain("Consuming messages")
      const unknown = yield* runCli(app, ["consume", "nowhere", "--dsn", url])
      expect(failure(unknown)).toContain(`The "nowhere" transport does not exist`)
    }))

  it.live("consume --time-limit stops an idle worker on time, cutting its poll interval short", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_time_limit")
      // Nothing is ready for an hour and there is no other limit: only the time limit can stop this worker.
      yield* withPg(
        Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }), { delay: "1 hour" }).pipe(
          Effect.provide(outboxStack({ table, handlers: [] }))
        )
      )
      const app = Cli.make({
        transport: { table },
        handlers: Handlers.layer([Handlers.handler(OrderPaid, () => Effect.void)])
      })
      const started = Date.now()
      const timed = yield* runCli(app, ["consume", "outbox", "--dsn", url, "--time-limit", "1", "--sleep", "30"])
      const elapsed = Date.now() - started
      expect(timed.stdout).toContain("Worker stopped (time-limit): handled 0, retried 0, failed 0.")
      expect(elapsed).toBeGreaterThanOrEqual(1_000) // not before the limit
      expect(elapsed).toBeLessThan(20_000) // and not after the 30 s idle wait: the limit cut it short
      expect((yield* rows(table)).length).toBe(1)
    }))

  it.live("failed:show lists, filters, counts and details failed messages (text and json)", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_show")
      yield* seedFailures(table, 7, 2)
      const cli = Cli.make({ transport: { table } })
      const list = yield* runCli(cli, ["failed:show", "--dsn", url])
      expect(list.stdout).toContain("There are 4 messages in the failure transport.")
      expect(list.stdout).toMatch(/Id\s+\| Class\s+\| Failed at\s+\| Error/)
      expect(list.stdout).toContain("UnrecoverableMessageHandlingError: bad order 3")
      expect(list.stdout).toMatch(/OrderShipped\s+\| \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \| Error: carrier API exploded/)
      const max = yield* runCli(cli, ["failed:show", "--dsn", url, "--max", "1"])
      expect(max.stdout).toContain("Showing first 1 messages.")
      const filtered = yield* runCli(cli, [
        "failed:show",
        "--dsn",
        url,
        "--class-filter",
        "OrderShipped",
        "--format",
        "json"
      ])
      const json = JSON.parse(filtered.stdout) as Array<{ type: string; messageId: string; originalTransport: string }>
      expect(json.map((m) => m.type)).toEqual(["OrderShipped", "OrderShipped"])
      expect(json[0]!.originalTransport).toBe("outbox")
      const stats = yield* runCli(cli, ["failed:show", "--dsn", url, "--stats"])
      expect(stats.stdout).toMatch(/OrderPaid\s+\| 2/)
      expect(stats.stdout).toMatch(/OrderShipped\s+\| 2/)
      const id = (yield* rows(table)).find((r) => JSON.parse(r.headers).type === "OrderShipped")!.id
      const one = yield* runCli(cli, ["failed:show", id, "--dsn", url])
      expect(one.stdout).toContain("Failed Message Details")
      expect(one.stdout).toMatch(/Class\s+\| OrderShipped/)
      expect(one.stdout).toMatch(/Transport\s+\| outbox/)
      expect(one.stdout).toContain("Re-run with -v")
      const verbose = yield* runCli(cli, ["failed:show", id, "--dsn", url, "-v"])
      expect(verbose.stdout).toContain("carrier API exploded")
      expect(verbose.stdout).toContain(`"carrier": "ups"`)
      const detailJson = JSON.parse(
        (yield* runCli(cli, ["failed:show", id, "--dsn", url, "--format", "json", "-v"])).stdout
      )
      expect(detailJson).toMatchObject({ id, type: "OrderShipped", errorTag: "Error", body: { _tag: "OrderShipped" } })
      const missing = yield* runCli(cli, ["failed:show", "999999", "--dsn", url])
      expect(failure(missing)).toContain(`The message "999999" was not found`)
    }))

  it.live("failed:retry sends messages back ready now with the same message id, and only failed ones", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_retry")
      yield* seedFailures(table, 4, 2)
      const cli = Cli.make({ transport: { table } })
      const before = yield* rows(table)
      const failedPaid = before.find((r) => r.queue_name === "failed" && JSON.parse(r.headers).type === "OrderPaid")!
      const refused = yield* runCli(cli, ["failed:retry", failedPaid.id, "--dsn", url])
      expect(failure(refused)).toContain("Refusing without --force")
      const retried = yield* runCli(cli, ["failed:retry", failedPaid.id, "--force", "--dsn", url])
      expect(retried.stdout).toContain(`sent back to "outbox"`)
      const after = (yield* rows(table)).find((r) => r.id === failedPaid.id)!
      expect(after).toMatchObject({ queue_name: "outbox", message_id: failedPaid.message_id, ready: true })
      expect(JSON.parse(after.headers).errorDetails).toBeUndefined()
      // Not in the failure queue any more: refused, nothing touched.
      const again = yield* runCli(cli, ["failed:retry", failedPaid.id, "--force", "--dsn", url])
      expect(failure(again)).toContain(`Not in the "failed" transport: "${failedPaid.id}"`)
      const all = yield* runCli(cli, [
        "failed:retry",
        "--all",
        "--class-filter",
        "OrderShipped",
        "--force",
        "--dsn",
        url
      ])
      expect(all.stdout).toContain("2 message(s) will be retried")
      expect((yield* rows(table)).filter((r) => r.queue_name === "failed").length).toBe(0)
      const both = yield* runCli(cli, ["failed:retry", "1", "--all", "--force", "--dsn", url])
      expect(failure(both)).toContain("You cannot specify message ids when using --all")
      const none = yield* runCli(cli, ["failed:retry", "--force", "--dsn", url])
      expect(failure(none)).toContain("Please specify at least one message id")
    }))

  it.live("failed:remove deletes chosen or all (by type) failed messages, never others", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_remove")
      yield* seedFailures(table, 6, 2)
      yield* withPg(
        Outbox.dispatch(new OrderPaid({ orderId: 99, amount: 1 })).pipe(
          Effect.provide(outboxStack({ table, handlers: [] }))
        )
      )
      const cli = Cli.make({ transport: { table } })
      const all = yield* rows(table)
      const pending = all.find((r) => r.queue_name === "outbox")!
      const notFailed = yield* runCli(cli, ["failed:remove", pending.id, "--force", "--dsn", url])
      expect(failure(notFailed)).toContain("Not in the \"failed\" transport")
      const failed = all.filter((r) => r.queue_name === "failed")
      const one = yield* runCli(cli, ["failed:remove", failed[0]!.id, "--force", "--dsn", url])
      expect(one.stdout).toContain("[OK] 1 message(s) removed.")
      const typed = yield* runCli(cli, [
        "failed:remove",
        "--all",
        "--class-filter",
        "OrderShipped",
        "--force",
        "--dsn",
        url
      ])
      expect(typed.stdout).toContain("[OK] 2 message(s) removed.")
      const rest = yield* runCli(cli, ["failed:remove", "--all", "--force", "--dsn", url])
      expect(rest.stdout).toContain("[OK] 1 message(s) removed.")
      expect((yield* rows(table)).map((r) => r.queue_name)).toEqual(["outbox"])
    }))

  it.live("stats shows ready, delayed, in flight, failed and the oldest ready age (text and json)", () =>
    Effect.gen(function*() {
      const url = db.url
      const table = uniqueTable("cli_stats")
      yield* seedFailures(table, 3, 0)
      yield* withPg(
        Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 10, amount: 1 }))
          yield* Outbox.dispatch(new OrderPaid({ orderId: 11, amount: 1 }), { delay: "1 hour" })
        }).pipe(Effect.provide(outboxStack({ table, handlers: [] })))
      )
      const cli = Cli.make({ transport: { table } })
      const text = yield* runCli(cli, ["stats", "--dsn", url])
      expect(text.stdout).toMatch(
        /Transport\s+\| Queue\s+\| Ready\s+\| Delayed\s+\| In flight\s+\| Failed\s+\| Oldest ready/
      )
      expect(text.stdout).toMatch(/outbox\s+\| outbox\s+\| 1\s+\| 1\s+\| 0\s+\| 1\s+\| \d/)
      const json = JSON.parse((yield* runCli(cli, ["stats", "outbox", "--format", "json", "--dsn", url])).stdout)
      expect(json.transports.outbox).toMatchObject({ queue: "outbox", ready: 1, delayed: 1, inFlight: 0, failed: 1 })
      expect(json.transports.outbox.oldestReadyAgeMs).toBeGreaterThanOrEqual(0)
    }))

  it.live(
    "an unreachable database is one line on stderr and exit code 1, from the real binary",
    () =>
      Effect.gen(function*() {
        const url = db.url
        const proc = spawnScript("src/programs/outbox-main.ts", [
          "stats",
          "--dsn",
          "postgres://nobody:x@127.0.0.1:1/none"
        ], {})
        const { code } = yield* Effect.promise(() => proc.exited)
        expect(code).toBe(1)
        const stderr = proc.stderr.join("").trim()
        expect(stderr.split("\n").length).toBe(1)
        expect(stderr).toMatch(/^error: Cannot connect to PostgreSQL/)
        const setup = spawnScript("src/programs/outbox-main.ts", ["setup-transports"], { DATABASE_URL: url })
        expect((yield* Effect.promise(() => setup.exited)).code).toBe(0)
        expect(setup.lines.join("\n")).toContain(`[OK] The "outbox" transport was set up successfully.`)
        const missing = spawnScript("src/programs/outbox-main.ts", ["failed:show", "123"], { DATABASE_URL: url })
        expect((yield* Effect.promise(() => missing.exited)).code).toBe(1)
        expect(missing.stderr.join("").trim()).toMatch(/^error: .*"123" was not found/)
      }),
    60_000
  )
})

/** What a missing outbox table answers, whatever the command that met it. */
const notSetUp = (table: string) =>
  `The outbox table ${table} is not set up (relation "${table}" does not exist): run \`outbox setup-transports\` ` +
  "(or TransportAdmin.setup) once before starting producers and workers; if the messages are in another table, " +
  "name it with --table or $OUTBOX_TABLE (the transport's `table` option)"

describe("outbox command line: what its errors say to do", () => {
  it.live(
    "a missing table: which table, setup-transports, --table and $OUTBOX_TABLE; in one line from the binary",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("cli_missing")
        const binary = Cli.make()
        for (
          const args of [
            ["stats"],
            ["stats", "--format", "json"],
            ["failed:show"],
            ["failed:show", "7"],
            ["failed:retry", "7", "--force"],
            ["failed:remove", "--all", "--force"]
          ]
        ) {
          const result = yield* runCli(binary, [...args, "--table", table, "--dsn", db.url])
          expect(failure(result), args.join(" ")).toBe(notSetUp(table))
        }
        const proc = spawnScript("src/programs/outbox-main.ts", ["stats"], {
          DATABASE_URL: db.url,
          OUTBOX_TABLE: table
        })
        expect((yield* Effect.promise(() => proc.exited)).code).toBe(1)
        expect(proc.stderr.join("")).toBe(`error: ${notSetUp(table)}\n`)
      }),
    120_000
  )

  it.live("a mistyped option is refused by name, with the nearest valid one, before any statement", () =>
    Effect.gen(function*() {
      const binary = Cli.make()
      const refused = (args: ReadonlyArray<string>) => Effect.map(runCli(binary, args), failure)
      // No database is reachable there: the refusal comes first.
      const dsn = ["--dsn", "postgres://nobody:x@127.0.0.1:1/none"]
      expect(yield* refused(["stats", "--fromat", "json", ...dsn])).toBe(
        "Unknown option --fromat for stats (did you mean --format?): `outbox stats --help` lists its options"
      )
      expect(yield* refused(["stats", "--fromat=json", ...dsn])).toBe(
        "Unknown option --fromat for stats (did you mean --format?): `outbox stats --help` lists its options"
      )
      expect(yield* refused(["failed:retry", "--all", "--forse", ...dsn])).toBe(
        "Unknown option --forse for failed:retry (did you mean --force?): `outbox failed:retry --help` lists its options"
      )
      expect(yield* refused(["setup-transports", "--idempotent-table", "x", ...dsn])).toBe(
        "Unknown option --idempotent-table for setup-transports: `outbox setup-transports --help` lists its options"
      )
      // An option of another command is not one of this one.
      expect(yield* refused(["stats", "--force", ...dsn])).toBe(
        "Unknown option --force for stats: `outbox stats --help` lists its options"
      )
      // After `--`, words are arguments.
      const transport = yield* refused(["stats", ...dsn, "--", "--fromat"])
      expect(transport).toMatch(/^Cannot connect to PostgreSQL/)
    }))

  it.live("options before the command are taken as the command's", () =>
    Effect.gen(function*() {
      const table = uniqueTable("cli_leading")
      const binary = Cli.make()
      expect(Exit.isSuccess((yield* runCli(binary, ["--dsn", db.url, "--table", table, "setup-transports"])).exit))
        .toBe(true)
      const stats = yield* runCli(binary, ["--dsn", db.url, `--table=${table}`, "stats", "--format", "json"])
      expect(Exit.isSuccess(stats.exit), stats.stderr).toBe(true)
      expect(JSON.parse(stats.stdout).transports.outbox).toMatchObject({ ready: 0, failed: 0 })
      expect(failure(yield* runCli(binary, ["--dsn", db.url, "--fromat", "json", "stats"]))).toBe(
        "Unknown option --fromat for stats (did you mean --format?): `outbox stats --help` lists its options"
      )
    }))

  it.live("consume on the bare binary says where consuming is; an unknown command gets the nearest one", () =>
    Effect.gen(function*() {
      const binary = Cli.make()
      expect(failure(yield* runCli(binary, ["consume", "outbox"]))).toBe(
        "`consume` runs the application's handlers, so the bare `outbox` binary has none: mount the command line " +
          "in the application with Cli.make({ handlers }) and run `consume` from there (examples/worker-only/main.ts; " +
          `the README's "Command line" section)`
      )
      expect(failure(yield* runCli(binary, ["--dsn", db.url, "consume", "outbox"]))).toMatch(/^`consume` runs/)
      expect(failure(yield* runCli(binary, ["stat"]))).toBe(
        `Unknown command "stat" (did you mean stats?): the commands are setup-transports, failed:show, ` +
          "failed:retry, failed:remove, stats, storage:compact, dashboard, idempotency:purge (outbox --help " +
          "describes them)"
      )
    }))

  it.live("an id that is not a number says what an id looks like, before any statement", () =>
    Effect.gen(function*() {
      const binary = Cli.make()
      const dsn = ["--dsn", "postgres://nobody:x@127.0.0.1:1/none"]
      expect(failure(yield* runCli(binary, ["failed:show", "abc", ...dsn]))).toBe(
        `Not a message id: "abc" (an id is a positive whole number, from the Id column of failed:show: ` +
          "e.g. failed:show 42)"
      )
      expect(failure(yield* runCli(binary, ["failed:retry", "12", "1x", "0", "--force", ...dsn]))).toBe(
        `Not message ids: "1x", "0" (an id is a positive whole number, from the Id column of failed:show: ` +
          "e.g. failed:show 42)"
      )
      expect(failure(yield* runCli(binary, ["failed:remove", "99999999999999999999", "--force", ...dsn]))).toMatch(
        /^Not a message id: "99999999999999999999"/
      )
    }))

  it.live("help: every command and option described, no value-type boilerplate, lines within 100 columns", () =>
    Effect.gen(function*() {
      const app = Cli.make({ handlers: Handlers.layer([Handlers.handler(OrderPaid, () => Effect.void)]) })
      const root = yield* runCli(app, ["--help"])
      expect(Exit.isSuccess(root.exit)).toBe(true)
      const commands = root.stdout.split("\nCOMMANDS\n")[1]!.split("\n\n")[0]!.split("\n")
        .filter((line) => /^ {2}\S/.test(line)).map((line) => line.trim().split(/\s+/, 1)[0]!)
      expect(commands).toEqual([
        "setup-transports",
        "failed:show",
        "failed:retry",
        "failed:remove",
        "stats",
        "storage:compact",
        "dashboard",
        "idempotency:purge",
        "consume"
      ])
      expect((yield* runCli(app, [])).stdout).toBe(root.stdout)
      for (const command of commands) {
        const help = (yield* runCli(app, [command, "--help"])).stdout
        expect(help, command).not.toMatch(/A user-defined piece of text|A true or false value|An integer\./)
        for (const line of help.split("\n")) expect(line.length, `${command}: ${line}`).toBeLessThanOrEqual(100)
        // Each option and argument on its line, its description indented below it.
        const lines = help.split("\n")
        const terms = lines.flatMap((line, i) => (/^ {2}[-<(]/.test(line) ? [i] : []))
        expect(terms.length, command).toBeGreaterThan(2)
        for (const i of terms) expect(lines[i + 1], `${command}: ${lines[i]}`).toMatch(/^ {6}\S/)
      }
      const failedShow = (yield* runCli(app, ["failed:show", "-h"])).stdout
      expect(failedShow.split("\n").slice(0, 7).join("\n")).toBe(
        [
          "outbox failed:show: List failed messages, or show one in detail",
          "",
          "USAGE",
          "  outbox failed:show [--dsn URL] [--table TABLE] --transport-queue NAME=QUEUE... [--max N]",
          "                     [--class-filter TYPE] [--stats] [--transport NAME] [--format text|json]",
          "                     [-v|--verbose] [<id>]",
          ""
        ].join("\n")
      )
      expect(failedShow).toContain("  --max N\n      List at most N messages. Default: 50.\n")
    }))
})
