/**
 * The demo on MariaDB: its proof run small in process, and `npm start` on `$MYSQL_URL`.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Demo from "../src/programs/Demo.js"
import { spawnScript } from "./support/cli.js"
import { createTestMysqlDatabase, mysqlLayer } from "./support/mysql.js"

describe("demo on MariaDB", () => {
  it.live("handled = committed, failed = 0, duplicates = 0", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => createTestMysqlDatabase("demo"))
      const summary = yield* Demo.run({
        orders: 1500,
        rollbackShare: 0.2,
        producers: 6,
        redeliverShare: 0.05,
        json: true
      }).pipe(
        Effect.provide(Layer.orDie(mysqlLayer(url, 12))),
        Logger.withMinimumLogLevel(LogLevel.Warning)
      )
      expect(summary.rolledBack).toBeGreaterThan(200)
      expect(summary).toEqual({
        committed: 1500 - summary.rolledBack,
        rolledBack: summary.rolledBack,
        handled: 1500 - summary.rolledBack,
        failed: 0,
        duplicates: 0
      })
    }), 120_000)

  it.live("npm start on $MYSQL_URL says which tables it drops, then proves the contract", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => createTestMysqlDatabase("demo_start"))
      const proc = spawnScript("src/programs/demo-main.ts", ["--orders", "20", "--producers", "2", "--json"], {
        MYSQL_URL: url
      })
      const { code } = yield* Effect.promise(() => proc.exited)
      const stderr = proc.stderr.join("")
      expect(code, stderr).toBe(0)
      expect(stderr.split("\n")[0]).toMatch(/^warning: running on \$MYSQL_URL: it drops and recreates the tables/)
      expect(JSON.parse(proc.lines.at(-1)!)).toMatchObject({ committed: expect.any(Number), failed: 0, duplicates: 0 })
    }), 90_000)
})
