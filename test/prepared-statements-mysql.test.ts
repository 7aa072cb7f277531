/**
 * `mysql2` keeps a server-side prepared statement per distinct text on each connection (up to 16 000), and the
 * server caps them for all its clients at once (`max_prepared_stmt_count`, 16 382 by default). Statements whose
 * text would grow with a count — acks, lease renewals and releases of any number of ids, sends of any number of
 * messages — must not leave one prepared statement per count behind. On a private server, so that nothing else
 * counts.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as MysqlTransport from "../src/layers/MysqlTransport.js"
import { type ControlledMariadb, createMysqlDatabase, startPrivateMariadb } from "./support/mariadb.js"
import { outgoing } from "./support/messages.js"
import { mysqlLayer } from "./support/mysql.js"

let server: ControlledMariadb | undefined
let url = ""
beforeAll(async () => {
  server = await startPrivateMariadb()
  url = await createMysqlDatabase(server.url, "prepared")
}, 60_000)
afterAll(async () => {
  await server?.stop()
}, 60_000)

const preparedNow = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ Value: string }>`SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'`.unprepared,
    (rows) => Number(rows[0]!.Value)
  ))

describe("prepared statements on MySQL", () => {
  it.live("acks, renewals, releases and sends of 1 to 300 ids or messages leave a bounded number behind", () =>
    Effect.gen(function*() {
      const transport = yield* MysqlTransport.make({ autoSetup: true })
      const before = yield* preparedNow
      for (let n = 1; n <= 300; n++) {
        const ids = Array.from({ length: n }, (_, i) => String(1_000_000 + i))
        yield* transport.ack("outbox", ids)
        yield* transport.keepalive("outbox", ids)
        yield* transport.release("outbox", ids)
        if (n <= 100) yield* transport.send("outbox", Array.from({ length: n }, (_, i) => outgoing(i)))
      }
      // A statement per kind and power of two of the count, at most: 3 × 9 (1 … 256, 512) and one send.
      expect((yield* preparedNow) - before).toBeLessThanOrEqual(3 * 10 + 1)
    }).pipe(Effect.provide(Layer.orDie(Layer.suspend(() => mysqlLayer(url, 1))))))
})
