/**
 * The floor of a session's unkeyed scan (PgSession): while its claims come back full, a claim starts a little below
 * the oldest row the last one took, so it skips the claim index's entries of acked and leased rows. What it must
 * never do is make a row below the floor wait: a claim short above the floor takes the rest from the start, and a
 * session whose last claim came back short scans from the start.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as MessageId from "../src/domain/MessageId.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import { testDatabase } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"

const db = testDatabase("claim_floor")
const { withPg } = db

const messages = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => ({
    messageId: MessageId.make(),
    type: "Test",
    body: JSON.stringify({ n: from + i }),
    headers: "{}",
    delayMs: 0
  }))

const numbers = (claimed: { readonly messages: ReadonlyArray<{ readonly body: string }> }) =>
  claimed.messages.map((m) => (JSON.parse(m.body) as { n: number }).n)

describe("the floor of a session's claims", () => {
  it.live(
    "a row committed far below the floor waits for no claim that comes back short, and is taken before the queue is empty",
    () =>
      withPg(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const table = uniqueTable("floor")
          const transport = yield* PgTransport.make({ table, autoSetup: true })
          yield* transport.send("outbox", messages(30))
          const session = yield* transport.open(["outbox"])

          const first = yield* session.claim("outbox", 10, [])
          expect(numbers(first)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
          // As a transaction that began an hour ago commits now: its row is available since then.
          yield* transport.send("outbox", messages(1, 100))
          yield* sql`UPDATE ${
            sql(table)
          } SET available_at = now() - interval '1 hour', created_at = now() - interval '1 hour'
          WHERE body = '{"n":100}'`
          // Full claims above the floor pass it over (it is there, the floor is what skips it)...
          const second = yield* session.claim("outbox", 10, first.messages.map((m) => m.id))
          expect(numbers(second)).toEqual([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
          // ...and the claim that runs short above the floor takes it from the start, in the same call.
          const third = yield* session.claim("outbox", 15, second.messages.map((m) => m.id))
          expect(numbers(third).sort((a, b) => a - b)).toEqual([20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 100])
          const last = yield* session.claim("outbox", 10, third.messages.map((m) => m.id))
          expect(last.messages).toEqual([])
        }).pipe(Effect.scoped)
      ),
    60_000
  )

  it.live(
    "after a short claim the next one scans from the start: a released row below the floor is taken at once",
    () =>
      withPg(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const table = uniqueTable("floor_short")
          const transport = yield* PgTransport.make({ table, autoSetup: true })
          yield* transport.send("outbox", messages(5))
          const session = yield* transport.open(["outbox"])
          const all = yield* session.claim("outbox", 10, [])
          expect(numbers(all)).toEqual([0, 1, 2, 3, 4])
          yield* transport.send("outbox", messages(10, 10))
          // Given back by a worker that stops, long after it was committed.
          yield* sql`UPDATE ${sql(table)} SET available_at = now() - interval '1 hour' WHERE body = '{"n":0}'`
          yield* transport.release("outbox", [all.messages[0]!.id])
          const next = yield* session.claim("outbox", 3, all.messages.slice(1).map((m) => m.id))
          expect(numbers(next)).toEqual([0, 10, 11])
        }).pipe(Effect.scoped)
      ),
    60_000
  )
})
