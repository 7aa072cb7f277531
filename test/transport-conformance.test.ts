/**
 * The conformance suite (effect-outbox/testing) over the PostgreSQL transport.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as PgTransport from "../src/layers/PgTransport.js"
import type { TransportBackend } from "../src/services/TransportAdmin.js"
import { exerciseTransport, lease } from "../src/testing/TransportSuite.js"
import { freshDatabase } from "./support/database.js"

let tables = 0
const tableOf = new WeakMap<TransportBackend, string>()

exerciseTransport({
  name: "postgres",
  layer: freshDatabase(),
  make: Effect.gen(function*() {
    const table = `conformance_${++tables}`
    const transport = yield* PgTransport.make({
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
      const shift = sql.literal(`interval '${ms} milliseconds'`)
      yield* sql`UPDATE ${sql(tableOf.get(transport)!)} SET created_at = created_at - ${shift},
        available_at = available_at - ${shift}, delivered_at = delivered_at - ${shift}`
      // The ordering keys' due times move with their messages.
      yield* sql`UPDATE ${sql(`${tableOf.get(transport)!}_keys`)} SET due_at = due_at - ${shift}`
    })
})
