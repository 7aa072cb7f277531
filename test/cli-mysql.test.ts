/**
 * The command line on a MySQL DSN (MariaDB): the dialect follows the DSN's scheme — setup of the transport and the
 * idempotency table, a worker, stats with the origins of failed messages, the failure queue shown and retried.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import { beforeAll } from "vitest"
import * as Cli from "../src/programs/Cli.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { runCli } from "./support/cli.js"
import { uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"
import { createTestMysqlDatabase, mysqlLayer, mysqlOutboxStack } from "./support/mysql.js"

let url = ""
beforeAll(async () => {
  url = await createTestMysqlDatabase("cli_mysql")
})
const withMysql = <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.suspend(() => Effect.provide(self, Layer.orDie(mysqlLayer(url))))

describe("outbox command line on MySQL", () => {
  it.live("setup-transports, consume, stats and the failure queue on a mysql:// DSN", () =>
    Effect.gen(function*() {
      const table = uniqueTable("cli_mysql")
      const cli = Cli.make({
        transport: { table },
        handlers: Handlers.layer([
          Handlers.handler(OrderPaid, (m) => m.orderId === 2 ? Effect.fail(new Error("declined")) : Effect.void)
        ]),
        retry: { default: { maxRetries: 0 } }
      })
      const setup = yield* runCli(cli, ["setup-transports", "--idempotency", "--dsn", url])
      expect(setup.stdout).toContain("Applied migrations: 1_create_messages")
      expect(setup.stdout).toContain("1_create_idempotency")
      expect((yield* runCli(cli, ["setup-transports", "--dsn", url])).stdout).toContain("nothing to do")
      yield* withMysql(
        Effect.flatMap(Outbox.Outbox, (outbox) =>
          outbox.dispatchAll([1, 2, 3].map((orderId) => new OrderPaid({ orderId, amount: 1 })))).pipe(
            Effect.provide(mysqlOutboxStack({ table, handlers: [] }))
          )
      )
      const consume = yield* runCli(cli, ["consume", "outbox", "--dsn", url, "--limit", "3"])
      expect(consume.exit._tag, consume.stderr + consume.stdout).toBe("Success")
      const stats = yield* runCli(cli, ["stats", "--dsn", url])
      expect(stats.stdout).toMatch(/outbox\s+\|\s+outbox\s+\|\s+0/)
      expect(stats.stdout).toMatch(/failed.*1/)
      const shown = yield* runCli(cli, ["failed:show", "--dsn", url])
      expect(shown.stdout).toContain("OrderPaid")
      expect(shown.stdout).toContain("declined")
      const compact = yield* runCli(cli, ["storage:compact", "--dsn", url])
      expect(compact.exit._tag).toBe("Failure")
    }))

  it.live("a missing table: which table, setup-transports, --table and $OUTBOX_TABLE", () =>
    Effect.gen(function*() {
      const table = uniqueTable("cli_mysql_missing")
      const database = new URL(url).pathname.slice(1)
      for (const args of [["stats"], ["failed:show"], ["failed:retry", "3", "--force"]]) {
        const result = yield* runCli(Cli.make(), [...args, "--table", table, "--dsn", url])
        expect(Exit.isFailure(result.exit) ? Cause.squash(result.exit.cause) : undefined, args.join(" "))
          .toMatchObject({
            message: `The outbox table ${table} is not set up (Table '${database}.${table}' doesn't exist): run ` +
              "`outbox setup-transports` (or TransportAdmin.setup) once before starting producers and workers; if " +
              "the messages are in another table, name it with --table or $OUTBOX_TABLE (the transport's `table` " +
              "option)"
          })
      }
    }))
})
