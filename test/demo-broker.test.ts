/**
 * The broker demo's own proof, run small against a real PostgreSQL and a real RabbitMQ: every committed payment
 * forwarded and invoiced exactly once, the messages published again on purpose skipped. And an unreachable
 * broker is one line and exit code 1.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as DemoBroker from "../src/programs/DemoBroker.js"
import { amqpUrl } from "./support/amqp.js"
import { spawnScript } from "./support/cli.js"
import { createDatabase } from "./support/database.js"
import { pgLayer } from "./support/harness.js"

describe("broker demo", () => {
  it.live("forwarded = invoiced = committed, duplicates skipped", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => createDatabase("demobroker"))
      const summary = yield* DemoBroker.run({
        orders: 400,
        rollbackShare: 0.2,
        producers: 4,
        redeliverShare: 0.05,
        json: true,
        amqpUrl: amqpUrl()
      }).pipe(
        Effect.provide(Layer.orDie(pgLayer(url, 12))),
        Logger.withMinimumLogLevel(LogLevel.Warning)
      )
      expect(summary.committed + summary.rolledBack).toBe(400)
      expect(summary.redelivered).toBeGreaterThan(5)
      expect(summary).toEqual({
        committed: summary.committed,
        rolledBack: summary.rolledBack,
        handled: summary.committed,
        failed: 0,
        duplicates: 0,
        forwarded: summary.committed,
        received: summary.committed + summary.redelivered,
        redelivered: summary.redelivered,
        invoices: summary.committed
      })
    }), 120_000)

  it.live("npm start -- --broker with no broker: one line on stderr, exit 1", () =>
    Effect.gen(function*() {
      const proc = spawnScript("src/programs/demo-main.ts", ["--broker"], {
        AMQP_URL: "amqp://guest:guest@127.0.0.1:1"
      })
      const exit = yield* Effect.promise(() => proc.exited)
      expect(exit.code).toBe(1)
      const stderr = proc.stderr.join("").trim()
      expect(stderr.split("\n")).toEqual([
        "error: Cannot connect to RabbitMQ at amqp://guest:***@127.0.0.1:1: connect ECONNREFUSED 127.0.0.1:1 " +
        "(start rabbitmq-server, or set AMQP_URL or --amqp-url)"
      ])
      expect(proc.lines).toEqual([])
    }), 60_000)
})
