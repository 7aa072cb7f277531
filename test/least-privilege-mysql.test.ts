/**
 * Least privilege on MariaDB, with the README's grants ("MySQL and MariaDB"): the owner (root) sets up; a producer
 * with `INSERT` on the table dispatches; a worker with `SELECT, UPDATE, DELETE` on it and `SELECT, INSERT, DELETE`
 * on the idempotency table consumes — handled, retried, failed, idempotent dedupe, released at shutdown, the
 * retention purge (`purgeExclusive` too: named locks need no privilege). Neither can run the setup.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import * as Headers from "../src/domain/Headers.js"
import type * as MessageId from "../src/domain/MessageId.js"
import * as MysqlIdempotencyStore from "../src/layers/MysqlIdempotencyStore.js"
import * as MysqlTransport from "../src/layers/MysqlTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import { IdempotencyStore } from "../src/services/IdempotencyStore.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { OrderPaid } from "./support/messages.js"
import { createTestMysqlDatabase, mysqlLayer } from "./support/mysql.js"

const table = "messenger_messages"
const idempotency = "outbox_idempotency"
let ownerUrl = ""
let producerUrl = ""
let workerUrl = ""

/** The same database, as another user. */
const as = (url: string, user: string) => {
  const u = new URL(url)
  u.username = user
  u.password = "secret"
  return u.toString()
}

beforeAll(async () => {
  ownerUrl = await createTestMysqlDatabase("least_privilege")
  const database = new URL(ownerUrl).pathname.slice(1)
  const suffix = database.slice(-6)
  const producer = `producer_${suffix}`
  const worker = `worker_${suffix}`
  await Effect.runPromise(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* Effect.flatMap(TransportAdmin, (admin) => admin.setup).pipe(Effect.provide(MysqlTransport.layer()))
      yield* Effect.flatMap(IdempotencyStore, (store) => store.setup).pipe(
        Effect.provide(MysqlIdempotencyStore.layer())
      )
      for (const user of [producer, worker]) yield* sql.unsafe(`CREATE USER '${user}'@'%' IDENTIFIED BY 'secret'`)
      yield* sql.unsafe(`GRANT INSERT ON \`${database}\`.\`${table}\` TO '${producer}'@'%'`)
      yield* sql.unsafe(`GRANT SELECT, UPDATE, DELETE ON \`${database}\`.\`${table}\` TO '${worker}'@'%'`)
      yield* sql.unsafe(`GRANT SELECT, INSERT, DELETE ON \`${database}\`.\`${idempotency}\` TO '${worker}'@'%'`)
    }).pipe(Effect.provide(mysqlLayer(ownerUrl, 2)))
  )
  producerUrl = as(ownerUrl, producer)
  workerUrl = as(ownerUrl, worker)
})

const on = <A, E>(url: () => string, self: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.suspend(() => Effect.provide(self, Layer.orDie(mysqlLayer(url(), 4))))

describe("least privilege on MariaDB", () => {
  it.live("a producer with INSERT dispatches; a worker with its grants handles, retries, fails, dedupes, purges", () =>
    Effect.gen(function*() {
      yield* on(
        () => producerUrl,
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          for (let orderId = 1; orderId <= 4; orderId++) {
            yield* sql.withTransaction(Outbox.dispatch(new OrderPaid({ orderId, amount: 1 })))
          }
        }).pipe(Effect.provide(Outbox.layer().pipe(Layer.provideMerge(MysqlTransport.layer()))))
      )
      let attempts = 0
      const handled: Array<number> = []
      const summary = yield* on(
        () => workerUrl,
        Effect.gen(function*() {
          const first = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" })
          // A handled message delivered again (its copy sent by the producer): the idempotent handler skips it.
          const [handledId] = yield* on(
            () => ownerUrl,
            Effect.flatMap(
              SqlClient.SqlClient,
              (sql) => sql<{ message_id: string }>`SELECT message_id FROM ${sql(idempotency)} LIMIT 1`
            )
          )
          yield* on(
            () => producerUrl,
            Effect.flatMap(Transport, (transport) =>
              transport.send("outbox", [{
                messageId: handledId!.message_id as MessageId.MessageId,
                type: "OrderPaid",
                body: JSON.stringify({ _tag: "OrderPaid", orderId: 1, amount: 1 }),
                headers: Headers.encode(new Headers.Headers({ type: "OrderPaid" })),
                delayMs: 0
              }])).pipe(Effect.provide(MysqlTransport.layer()))
          )
          const second = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, sleep: "10 millis" })
          const store = yield* IdempotencyStore
          expect(yield* store.purge({ olderThan: 0 })).toBe(3)
          expect(yield* store.purgeExclusive({ olderThan: 0 })).toEqual(expect.anything())
          return { first, second }
        }).pipe(
          Effect.provide(
            Layer.mergeAll(
              Handlers.layer([Handlers.handler(OrderPaid, (m) =>
                Effect.suspend(() => {
                  if (m.orderId === 3) {
                    return Effect.fail(new UnrecoverableMessageHandlingError({ message: "declined" }))
                  }
                  if (m.orderId === 4 && attempts++ === 0) return Effect.fail(new Error("flaky"))
                  handled.push(m.orderId)
                  return Effect.void
                }), { name: "ledger", idempotent: true })]),
              ScheduleRetryStrategy.layer({ default: { delay: "1 millis", maxRetries: 3 } })
            ).pipe(
              Layer.provideMerge(MysqlIdempotencyStore.layer()),
              Layer.provideMerge(MysqlTransport.layer())
            )
          ),
          Logger.withMinimumLogLevel(LogLevel.None)
        )
      )
      expect(summary.first).toMatchObject({ handled: 3, retried: 1, failed: 1 })
      expect(summary.second).toMatchObject({ handled: 1, retried: 0, failed: 0 })
      expect(handled.sort()).toEqual([1, 2, 4])
      // The failed message waits in the failure queue.
      const left = yield* on(
        () => ownerUrl,
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ queue_name: string }>`SELECT queue_name FROM ${sql(table)}`)
      )
      expect(left.map((r) => r.queue_name)).toEqual(["failed"])
    }))

  it.live("neither the producer nor the worker can run the setup", () =>
    Effect.gen(function*() {
      for (const url of [() => producerUrl, () => workerUrl]) {
        const error = yield* on(
          url,
          Effect.flip(Effect.flatMap(MysqlTransport.make({ table: "another" }), (t) => t.setup))
        )
        expect(error._tag).toBe("TransportError")
        expect(error.message).toMatch(/denied/)
      }
    }))
})
