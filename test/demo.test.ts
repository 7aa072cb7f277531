/**
 * The demo's own proof, run small against a real PostgreSQL: every committed payment announced exactly
 * once, no rolled-back one ever.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Demo from "../src/programs/Demo.js"
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
})
