/**
 * The binary log's format (README, "MySQL and MariaDB"): on a server logging statements (`binlog_format=STATEMENT`)
 * InnoDB cannot log the claim's READ COMMITTED writes, so the worker stops at once with a `StorageNotReadyError` that
 * says what to set — it never retries forever — while producers still send; in MIXED format (MariaDB's default) the
 * claim's writes are logged as rows and the worker drains the queue. Each format on a private server of its own.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { type ControlledMariadb, createMysqlDatabase, startPrivateMariadb } from "./support/mariadb.js"
import { OrderPaid } from "./support/messages.js"
import { mysqlLayer, mysqlOutboxStack } from "./support/mysql.js"

const servers = new Map<string, ControlledMariadb>()
beforeAll(async () => {
  const formats = ["STATEMENT", "MIXED"]
  const started = await Promise.all(
    formats.map((format) =>
      startPrivateMariadb({ serverArgs: ["--log-bin=binlog", `--binlog-format=${format}`, "--server-id=1"] })
    )
  )
  formats.forEach((format, i) => servers.set(format, started[i]!))
}, 90_000)
afterAll(async () => {
  await Promise.all([...servers.values()].map((server) => server.stop()))
}, 60_000)

/** Sends two messages, then runs a worker until the queue is empty, on a server logging in `format`. */
const sendAndDrain = (format: string) =>
  Effect.gen(function*() {
    const url = yield* Effect.promise(() => createMysqlDatabase(servers.get(format)!.url, "binlog"))
    const handled: Array<number> = []
    const run = Effect.gen(function*() {
      yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
      yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
      return yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" })
    }).pipe(
      Effect.provide(mysqlOutboxStack({
        table: "messenger_messages",
        handlers: [Handlers.handler(OrderPaid, (m) => Effect.sync(() => handled.push(m.orderId)))]
      })),
      Effect.provide(Layer.orDie(mysqlLayer(url))),
      Logger.withMinimumLogLevel(LogLevel.None),
      Effect.exit
    )
    return { exit: yield* run, handled }
  })

describe("the binary log's format", () => {
  it.live("STATEMENT: the worker stops with a StorageNotReadyError naming binlog_format; nothing is handled", () =>
    Effect.gen(function*() {
      const { exit, handled } = yield* sendAndDrain("STATEMENT")
      expect(exit._tag).toBe("Failure")
      if (exit._tag === "Failure") {
        const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
        expect(error?._tag).toBe("StorageNotReadyError")
        expect(error?.message).toMatch(/binlog_format to ROW \(or MIXED\)/)
      }
      expect(handled).toEqual([])
    }))

  it.live("MIXED: the claim's writes are logged as rows, and the worker drains the queue", () =>
    Effect.gen(function*() {
      const { exit, handled } = yield* sendAndDrain("MIXED")
      expect(exit._tag).toBe("Success")
      expect(handled).toEqual([1, 2])
    }))
})
