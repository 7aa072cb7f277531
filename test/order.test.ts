/**
 * The order guarantee, in the form it holds (README, Guarantees 7): one worker with `concurrency: 1` handles each
 * producer's messages in the order it dispatched them — with concurrent producers, while the worker runs — and a
 * message committed later than another can be handled after it even when it carries a lower `(available_at, id)`
 * (both are taken when the producer's statement runs, not when it commits).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"

const { withPg } = testDatabase("order")

class Step extends Schema.TaggedClass<Step>()("Step", {
  producer: Schema.Int,
  seq: Schema.Int
}) {}

describe("order", () => {
  it.live("each producer's messages are handled in its dispatch order, with producers racing the worker", () => {
    const producers = 4
    const perProducer = 60
    const handled: Array<Step> = []
    const table = uniqueTable("order")
    return withPg(Effect.gen(function*() {
      const done = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* Outbox.Outbox
        const worker = yield* Effect.forkScoped(
          Worker.run({ transports: ["outbox"], batchSize: 7, sleep: "20 millis" })
        )
        // Each producer dispatches one message per transaction, the next after the previous committed; some in
        // pairs within one transaction. The producers run at once, so their commits interleave.
        yield* Effect.forEach(Array.from({ length: producers }, (_, p) => p), (producer) =>
          Effect.gen(function*() {
            for (let seq = 0; seq < perProducer; seq++) {
              if (seq % 5 === 0 && seq + 1 < perProducer) {
                yield* sql.withTransaction(outbox.dispatchAll([
                  new Step({ producer, seq }),
                  new Step({ producer, seq: seq + 1 })
                ]))
                seq++
              } else {
                yield* sql.withTransaction(Outbox.dispatch(new Step({ producer, seq })))
              }
            }
          }), { concurrency: "unbounded", discard: true })
        yield* Deferred.await(done).pipe(Effect.timeout("40 seconds"))
        yield* Fiber.interrupt(worker)
        expect(handled).toHaveLength(producers * perProducer)
        for (let producer = 0; producer < producers; producer++) {
          const seqs = handled.filter((step) => step.producer === producer).map((step) => step.seq)
          expect(seqs).toEqual(Array.from({ length: perProducer }, (_, i) => i))
        }
      }).pipe(
        Effect.scoped,
        Effect.provide(outboxStack({
          table,
          handlers: [Handlers.handler(Step, (step) =>
            // A few turns of the scheduler per message (a handler that does I/O): handlers run at once would reorder.
            Effect.repeatN(Effect.yieldNow(), (step.seq * 7 + step.producer * 3) % 5).pipe(
              Effect.zipRight(Effect.suspend(() => {
                handled.push(step)
                return handled.length === producers * perProducer ? Deferred.succeed(done, undefined) : Effect.void
              }))
            ))]
        }))
      )
    }))
  })

  it.live("a message committed later is handled later, even with a lower id: the order is of what was committed", () => {
    const handled: Array<number> = []
    const table = uniqueTable("commit_order")
    return withPg(
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const inserted = yield* Deferred.make<void>()
        const commit = yield* Deferred.make<void>()
        // A transaction takes its id (and available_at) first, then waits to commit.
        const slow = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
          yield* Outbox.dispatch(new Step({ producer: 0, seq: 1 }))
          yield* Deferred.succeed(inserted, undefined)
          yield* Deferred.await(commit)
        })))
        yield* Deferred.await(inserted)
        yield* Outbox.dispatch(new Step({ producer: 0, seq: 2 }))
        const idOf = sql<{ id: string }>`SELECT id::text FROM ${sql(table)}`.pipe(Effect.map((rows) => rows[0]!.id))
        const second = BigInt(yield* idOf)
        const first = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })
        expect(first.handled).toBe(1)
        yield* Deferred.succeed(commit, undefined)
        yield* Fiber.join(slow)
        expect(BigInt(yield* idOf)).toBeLessThan(second)
        yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })
        expect(handled).toEqual([2, 1])
      }).pipe(Effect.provide(outboxStack({
        table,
        handlers: [Handlers.handler(Step, (step) => Effect.sync(() => void handled.push(step.seq)))]
      })))
    )
  })
})
