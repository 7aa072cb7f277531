/**
 * The demo's own proof, run small against a real PostgreSQL: every committed payment announced exactly
 * once, no rolled-back one ever.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Demo from "../src/programs/Demo.js"
import { spawnScript } from "./support/cli.js"
import { createDatabase } from "./support/database.js"
import { pgLayer } from "./support/harness.js"

describe("demo", () => {
  it.live("handled = committed, failed = 0, duplicates = 0", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => createDatabase("demo"))
      const summary = yield* Demo.run({
        orders: 1500,
        rollbackShare: 0.2,
        producers: 6,
        redeliverShare: 0.05,
        json: true
      }).pipe(
        Effect.provide(Layer.orDie(pgLayer(url, 12))),
        Logger.withMinimumLogLevel(LogLevel.Warning)
      )
      expect(summary.committed + summary.rolledBack).toBe(1500)
      expect(summary.rolledBack).toBeGreaterThan(200)
      expect(summary).toEqual({
        committed: summary.committed,
        rolledBack: summary.rolledBack,
        handled: summary.committed,
        failed: 0,
        duplicates: 0
      })
    }), 120_000)

  it.live(
    "out-of-range options and unknown flags: a short usage error, exit 1, nothing run",
    () =>
      Effect.gen(function*() {
        // Never reached if the options are checked first: a database that does not exist.
        const env = { DATABASE_URL: "postgres://nobody:x@127.0.0.1:1/none" }
        for (
          const [args, says] of [
            [["--rollback-share", "2"], "--rollback-share must be a number from 0 to 1, got 2"],
            [["--orders", "-5"], "--orders must be an integer from 1 to 1000000, got -5"],
            [["--producers", "0"], "--producers must be an integer from 1 to 50, got 0"],
            [["--redeliver-share", "-0.1"], "--redeliver-share must be a number from 0 to 1, got -0.1"],
            [["--nope"], "nope"]
          ] as const
        ) {
          const proc = spawnScript("src/programs/demo-main.ts", args, env)
          const { code } = yield* Effect.promise(() => proc.exited)
          const stderr = proc.stderr.join("")
          expect(code, args.join(" ")).toBe(1)
          expect(stderr, args.join(" ")).toContain(says)
          expect(stderr).toContain("Run `npm start -- --help` for the options.")
          expect(stderr).not.toMatch(/\u001b\[|^\s+at /m) // plain text, no stack
          expect(stderr.trim().split("\n").length, stderr).toBeLessThanOrEqual(4)
          expect(proc.lines.join("\n")).not.toContain("✔")
        }
        expect(
          Demo.run({ orders: 10, rollbackShare: 2, producers: 1, redeliverShare: 0, json: true }).pipe(
            Effect.flip,
            Effect.map((e) => (e as { _tag?: string })._tag),
            // checked before any statement: a client that cannot run one is never used
            Effect.provideService(SqlClient.SqlClient, {} as SqlClient.SqlClient),
            Effect.runSync
          )
        ).toBe("DemoOptionsError")
      }),
    // Five processes started one after another: on a busy 2-core machine each start can take many seconds.
    180_000
  )

  it.live(
    "--help in a pipe: plain text, descriptions beside the options, defaults shown",
    () =>
      Effect.gen(function*() {
        const proc = spawnScript("src/programs/demo-main.ts", ["--help"], {})
        expect((yield* Effect.promise(() => proc.exited)).code).toBe(0)
        const help = proc.lines.join("\n")
        expect(help).not.toMatch(/\u001b\[/)
        expect(help).toMatch(/--orders integer/)
        expect(help).toContain("3000")
        expect(help).toContain("0.1")
        // Each description on its own indented line under its option (the one-line usage is as long as it is).
        expect(help).toMatch(
          /^--orders integer\n\n {2}An integer\.\n\n {2}Orders to pay\n\n {2}This setting is optional\. Defaults to: 3000$/m
        )
        for (const line of proc.lines.filter((l) => !l.startsWith("$ "))) {
          expect(line.length, line).toBeLessThanOrEqual(120)
        }
      }),
    60_000
  )

  it.live("on $DATABASE_URL it says which tables it drops before it does", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => createDatabase("demo_warn"))
      const proc = spawnScript("src/programs/demo-main.ts", ["--orders", "20", "--producers", "2", "--json"], {
        DATABASE_URL: url
      })
      const { code } = yield* Effect.promise(() => proc.exited)
      const stderr = proc.stderr.join("")
      expect(code, stderr).toBe(0)
      expect(stderr.split("\n")[0]).toBe(
        "warning: running on $DATABASE_URL: it drops and recreates the tables demo_orders and demo_invoices, " +
          "deletes every message in demo_outbox, and creates demo_outbox and demo_idempotency when missing."
      )
      expect(JSON.parse(proc.lines.at(-1)!)).toMatchObject({ committed: expect.any(Number), failed: 0 })
    }), 90_000)
})
