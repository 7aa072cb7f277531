/**
 * The conformance suite (effect-outbox/testing) over the MySQL transport, on MariaDB: a table per case, and time
 * moved by moving the table's timestamps back (the transport compares with the server's clock).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as MysqlTransport from "../src/layers/MysqlTransport.js"
import type { TransportBackend } from "../src/services/TransportAdmin.js"
import { exerciseTransport, lease } from "../src/testing/TransportSuite.js"
import { freshMysqlDatabase } from "./support/mysql.js"

let tables = 0
const tableOf = new WeakMap<TransportBackend, string>()

exerciseTransport({
  name: "mysql (MariaDB)",
  layer: freshMysqlDatabase("transport_suite"),
  make: Effect.gen(function*() {
    const table = `conformance_${++tables}`
    const transport = yield* MysqlTransport.make({
      table,
      transports: { outbox: { redeliverTimeout: Duration.millis(lease) }, other: {} }
    })
    yield* transport.setup
    tableOf.set(transport, table)
    return transport
  }),
  advance: (transport, ms) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const shift = sql.literal(`INTERVAL ${Math.round(ms * 1000)} MICROSECOND`)
      yield* sql`UPDATE ${sql(tableOf.get(transport)!)} SET created_at = created_at - ${shift},
        available_at = available_at - ${shift}, delivered_at = delivered_at - ${shift}`
    })
})
