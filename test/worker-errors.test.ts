/**
 * How a worker ends when it cannot go on: a defect ends `Worker.run` as that defect, an unknown transport and
 * storage that is not set up end it at once with a typed error — never a summary that reads like a clean stop,
 * never a loop that retries forever. The command line turns each into one line on stderr and a non-zero exit.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import type { RetryStrategy } from "../src/services/RetryStrategy.js"
import type { Transport } from "../src/services/Transport.js"
import { spawnScript } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const db = testDatabase("worker_errors")
const { withPg } = db

/** Long enough for a loaded machine; a worker that spins instead of stopping never gets there. */
const atOnce = "20 seconds"

/** What the tests below run in: the outbox, a transport, handlers and the retry strategy. */
type Stack = Outbox.Outbox | Transport | Handlers.Handlers | RetryStrategy | SqlClient.SqlClient

/** How many of the transport's messages are stored, and how many of them are not held by a claim. */
type Counts = Effect.Effect<{ readonly stored: number; readonly ready: number }>

interface Backend {
  readonly name: string
  readonly run: <A, E>(
    handlers: ReadonlyArray<Handlers.Handler<any, any, never>>,
    self: (counts: Counts) => Effect.Effect<A, E, Stack>
  ) => Effect.Effect<A, E>
}

const memory: Backend = {
  name: "memory",
  run: (handlers, self) =>
    Effect.flatMap(
      MemoryTransport.MemoryTransport,
      (memory) =>
        self(Effect.map(memory.messagesOf("outbox"), (rows) => ({
          stored: rows.length,
          ready: rows.filter((row) => row.deliveredAt === null).length
        })))
    ).pipe(
      // The memory stack has no database: a SqlClient is never used by these handlers.
      Effect.provideService(SqlClient.SqlClient, undefined as unknown as SqlClient.SqlClient),
      Effect.provide(
        Layer.mergeAll(Outbox.layer(), Handlers.layer(handlers), ScheduleRetryStrategy.layerDefault).pipe(
          Layer.provideMerge(MemoryTransport.layer()),
          Layer.orDie
        )
      )
    )
}

const postgres: Backend = {
  name: "postgres",
  run: (handlers, self) =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("errors")
      const counts = sql<{ stored: number; ready: number }>`
        SELECT count(*)::int AS stored, count(*) FILTER (WHERE delivered_at IS NULL)::int AS ready
        FROM ${sql(table)}`.pipe(Effect.map((rows) => rows[0]!), Effect.orDie)
      return yield* self(counts).pipe(Effect.provide(Layer.orDie(outboxStack({ table, handlers }))))
    }))
}

const backends = [memory, postgres]

describe.each(backends)("Worker.run on $name", ({ run }) => {
  it.live("a defect in the onEvent hook is logged and the run goes on", () => {
    let calls = 0
    return run(
      [Handlers.handler(OrderPaid, () => Effect.sync(() => void calls++))],
      (counts) =>
        Effect.gen(function*() {
          yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
          yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
          const logs: Array<string> = []
          const recorder = Logger.make(({ message }) => void logs.push(String(message)))
          const summary = yield* Worker.run({
            transports: ["outbox"],
            stopWhenEmpty: true,
            onEvent: (event) =>
              event._tag === "Handled"
                ? Effect.sync(() => {
                  throw new Error("onEvent exploded")
                })
                : Effect.void
          }).pipe(Effect.timeout(atOnce), Effect.provide(Logger.replace(Logger.defaultLogger, recorder)))
          expect(summary).toMatchObject({ handled: 2, retried: 0, failed: 0, stoppedBy: "empty" })
          expect(calls).toBe(2)
          expect(yield* counts).toEqual({ stored: 0, ready: 0 })
          expect(logs.filter((line) => line.includes("outbox worker: the onEvent hook failed on Handled")))
            .toHaveLength(2)
        })
    )
  })

  it.live("an unknown transport name fails at once with an UnknownTransportError naming the known ones", () =>
    run([], () =>
      Effect.gen(function*() {
        for (const transports of [["shiping"], ["outbox", "shiping"]]) {
          const error = yield* Worker.run({ transports, sleep: "10 millis" }).pipe(Effect.timeout(atOnce), Effect.flip)
          expect(error._tag).toBe("UnknownTransportError")
          expect(error.message).toContain(`"shiping"`)
          expect(error.message).toContain("known:")
          expect(error.message).toContain("outbox")
        }
      })))
})

describe("storage that is not set up", () => {
  it.live("a worker and a producer fail with StorageNotReadyError telling to run setup-transports; the worker stops", () => {
    const logs: Array<string> = []
    const recorder = Logger.make(({ message }) => void logs.push(String(message)))
    return withPg(Effect.gen(function*() {
      const table = uniqueTable("not_ready")
      const stack = Layer.mergeAll(
        Outbox.layer(),
        Handlers.layer([Handlers.handler(OrderPaid, () => Effect.void)]),
        ScheduleRetryStrategy.layerDefault
      ).pipe(Layer.provideMerge(PgTransport.layer({ table })))
      yield* Effect.gen(function*() {
        const worker = yield* Worker.run({ transports: ["outbox"], sleep: "10 millis" }).pipe(
          Effect.timeout(atOnce),
          Effect.flip
        )
        expect(worker._tag).toBe("StorageNotReadyError")
        expect(worker.message).toContain(table)
        expect(worker.message).toContain("run `outbox setup-transports`")
        // One attempt, no restart loop: the worker says it stopped, and why.
        expect(logs.filter((line) => line.includes("restarting the loop"))).toEqual([])
        expect(logs.filter((line) => line.startsWith("outbox worker: stopped (failure: The outbox table")))
          .toHaveLength(1)

        const producer = yield* Effect.flip(Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })))
        expect(producer._tag).toBe("StorageNotReadyError")
        expect(producer.message).toContain("run `outbox setup-transports`")
        const inTransaction = yield* Effect.flip(
          SqlClient.SqlClient.pipe(
            Effect.flatMap((sql) => sql.withTransaction(Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))))
          )
        )
        expect(inTransaction._tag).toBe("StorageNotReadyError")
      }).pipe(Effect.provide(stack))
    })).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, recorder)))
  })
})

describe("outbox consume", () => {
  it.live("before setup-transports: one line on stderr, exit code 1", () =>
    Effect.gen(function*() {
      const table = uniqueTable("cli_not_ready")
      const proc = spawnScript("test/fixtures/cli-app.ts", ["consume", "outbox", "--sleep", "0.05"], {
        DATABASE_URL: db.url,
        OUTBOX_TABLE: table
      })
      // A worker that spins instead of stopping is still running then: the test fails, and the process is killed.
      const { code } = yield* Effect.promise(() => proc.exited).pipe(
        Effect.timeout("40 seconds"),
        Effect.ensuring(Effect.sync(() => proc.kill("SIGKILL")))
      )
      const stderr = proc.stderr.join("").trim()
      expect(code, stderr).toBe(1)
      expect(stderr.split("\n")).toHaveLength(1)
      expect(stderr).toMatch(/^error: The outbox table \S+ is not set up .*run `outbox setup-transports`/)
    }), 60_000)

  it.live(
    "when its -v event hook throws: the defect is logged, the worker goes on and stops at its limit, exit code 0",
    () =>
      Effect.gen(function*() {
        const table = uniqueTable("cli_defect")
        yield* withPg(
          Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })).pipe(
            Effect.provide(outboxStack({ table, handlers: [] }))
          )
        )
        const proc = spawnScript("test/fixtures/cli-app.ts", [
          "consume",
          "outbox",
          "-v",
          "--sleep",
          "0.05",
          "--limit",
          "1"
        ], {
          DATABASE_URL: db.url,
          OUTBOX_TABLE: table,
          FIXTURE_HANDLER: "slow",
          FIXTURE_SLOW_MS: "0",
          FIXTURE_EVENT_HOOK: "throw"
        })
        const { code } = yield* Effect.promise(() => proc.exited).pipe(
          Effect.timeout("40 seconds"),
          Effect.ensuring(Effect.sync(() => proc.kill("SIGKILL")))
        )
        const stderr = proc.stderr.join("").trim()
        expect(proc.lines).toContain("DONE 1")
        expect(code, stderr).toBe(0)
        expect(proc.lines).toContain("Worker stopped (limit): handled 1, retried 0, failed 0.")
        // The CLI's logger writes to stdout (one line per entry).
        const output = [...proc.lines, stderr].join("\n")
        expect(output).toContain("the onEvent hook failed on Handled")
        expect(output).toContain("event hook exploded")
      }),
    60_000
  )
})
