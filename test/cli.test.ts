/**
 * The real `@effect/cli` command tree against a real PostgreSQL.
 */
import { NodeContext } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Cli from "../src/programs/Cli.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { createDatabase, query } from "./support/database.js"
import { outboxStack, pgLayer } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const runCli = (command: ReturnType<typeof Cli.make>, args: ReadonlyArray<string>) =>
  Cli.run(command)(["node", "outbox", ...args]).pipe(
    Effect.provide(NodeContext.layer),
    Logger.withMinimumLogLevel(LogLevel.Error)
  )

describe("outbox command line", () => {
  it.live("setup-transports creates the table idempotently; consume handles messages up to --limit", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => createDatabase("cli"))
      yield* runCli(Cli.make(), ["setup-transports", "--dsn", url])
      yield* runCli(Cli.make(), ["setup-transports", "--dsn", url])
      const migrations = yield* Effect.promise(() => query(url, "SELECT migration_id FROM messenger_messages_migrations"))
      expect(migrations).toEqual([{ migration_id: 1 }])

      yield* Effect.gen(function*() {
        for (let orderId = 1; orderId <= 5; orderId++) yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))
      }).pipe(Effect.provide(outboxStack({ table: "messenger_messages", handlers: [] })), Effect.provide(Layer.orDie(pgLayer(url))))

      const seen: Array<number> = []
      const app = Cli.make({
        handlers: Handlers.layer([Handlers.handler(OrderPaid, (m) => Effect.sync(() => seen.push(m.orderId)))])
      })
      yield* runCli(app, ["consume", "outbox", "--dsn", url, "--limit", "3", "--sleep", "0.05"])
      expect(seen).toEqual([1, 2, 3])
      const left = yield* Effect.promise(() => query(url, "SELECT count(*)::int AS n FROM messenger_messages"))
      expect(left).toEqual([{ n: 2 }])
    }))
})
