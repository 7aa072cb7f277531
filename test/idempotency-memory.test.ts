/**
 * The in-memory idempotency store as users would use it in unit tests: the conformance suite, with
 * retention and purges driven by TestClock, plus what only the in-memory store has (millisecond-exact
 * windows, a purge lock held for a whole run, record inspection). Starts no database.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import * as MessageId from "../src/domain/MessageId.js"
import * as MemoryIdempotencyStore from "../src/layers/MemoryIdempotencyStore.js"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as IdempotencyStore from "../src/services/IdempotencyStore.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { exerciseIdempotencyStore } from "../src/testing/IdempotencyStoreSuite.js"
import { OrderPaid } from "./support/messages.js"

exerciseIdempotencyStore("MemoryIdempotencyStore", {
  make: (options) => MemoryIdempotencyStore.make(options),
  // The store reads the Clock: records age as TestClock moves.
  age: (_store, by) => TestClock.adjust(by),
  count: (store) => Effect.map(store.records, (records) => records.length),
  // A waiter parks on the running one's Deferred at once; an hour of TestClock shows no timeout lets it through.
  awaitWaiting: () => TestClock.adjust("1 hour"),
  // The in-memory lock is held for a whole purgeExclusive run: another purger waiting in its onBatch holds it.
  // Its window reaches further back than any record, so it deletes nothing.
  holdPurgeLock: (store) =>
    Effect.gen(function*() {
      const holding = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const other = yield* Effect.fork(store.purgeExclusive({
        olderThan: Duration.days(1_000_000),
        onBatch: () => Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(release))
      }))
      yield* Effect.addFinalizer(() =>
        Deferred.succeed(release, undefined).pipe(Effect.zipRight(Fiber.join(other)), Effect.orDie)
      )
      yield* Effect.raceFirst(
        Deferred.await(holding),
        Effect.zipRight(Fiber.join(other), Effect.dieMessage("the purge lock was already held"))
      )
    })
})

class Boom {
  readonly _tag = "Boom"
}

const key = (consumer = "invoices") => ({ messageId: MessageId.make(), consumer })

describe("in-memory idempotency store, beyond the suite", () => {
  it.effect("purge follows the Clock to the millisecond: a record exactly as old as the window stays", () =>
    Effect.gen(function*() {
      const store = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
      expect(Duration.toMillis(store.retention)).toBe(Duration.toMillis(Duration.days(30)))
      for (let i = 0; i < 5; i++) yield* store.runOnce(key("old"), Effect.void)
      yield* TestClock.adjust(Duration.days(10))
      for (let i = 0; i < 3; i++) yield* store.runOnce(key("new"), Effect.void)
      yield* TestClock.adjust(Duration.days(20))
      // The old ones are exactly 30 days old: not older than the window yet.
      expect(yield* store.purge()).toBe(0)
      yield* TestClock.adjust("1 millis")
      const batches: Array<number> = []
      expect(yield* store.purge({ batchSize: 2, onBatch: (n) => Effect.sync(() => batches.push(n)) })).toBe(5)
      expect(batches).toEqual([2, 2, 1])
      expect((yield* store.records).map((r) => r.consumer)).toEqual(["new", "new", "new"])
      expect(yield* store.purge({ olderThan: "10 days", batchSize: 1, maxBatches: 2 })).toBe(2)
      expect((yield* store.records).length).toBe(1)
      expect((yield* Effect.flip(store.purge({ maxBatches: 0 })))._tag).toBe("OutboxConfigError")
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer())))

  it.effect("purgeExclusive holds its lock for the whole run: None while another purge runs, even in its onBatch", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyStore.IdempotencyStore
      for (let i = 0; i < 4; i++) yield* store.runOnce(key(), Effect.void)
      yield* TestClock.adjust(Duration.days(2))
      const inBatch = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(store.purgeExclusive({
        batchSize: 2,
        onBatch: () => Effect.zipRight(Deferred.succeed(inBatch, undefined), Deferred.await(gate))
      }))
      yield* Deferred.await(inBatch)
      expect(yield* store.purgeExclusive()).toEqual(Option.none())
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(holder)).toEqual(Option.some(4))
      expect(yield* store.purgeExclusive()).toEqual(Option.some(0))
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer({ retention: "1 day" }))))

  it.effect("records lists every committed record, oldest first, with its Clock time", () =>
    Effect.gen(function*() {
      const store = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
      const [a, b, c] = [key("a"), key("b"), key("c")]
      const start = yield* Clock.currentTimeMillis
      yield* TestClock.adjust("5 millis")
      yield* store.runOnce(b, Effect.void)
      yield* TestClock.adjust("5 millis")
      yield* store.runOnce(a, Effect.void)
      yield* Effect.ignore(store.runOnce(c, Effect.fail(new Boom())))
      expect(yield* store.records).toEqual([
        { messageId: b.messageId, consumer: "b", processedAt: start + 5 },
        { messageId: a.messageId, consumer: "a", processedAt: start + 10 }
      ])
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer())))

  it.effect("the layer provides one store under both tags", () =>
    Effect.gen(function*() {
      const generic = yield* IdempotencyStore.IdempotencyStore
      const memory = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
      expect(generic).toBe(memory)
      expect(yield* IdempotencyStore.setup).toEqual([])
    }).pipe(Effect.provide(MemoryIdempotencyStore.layer())))

  it.effect("with the worker and the in-memory transport: a message delivered twice runs its side effect once", () =>
    Effect.gen(function*() {
      let invoices = 0
      let calls = 0
      const handlers = Handlers.layer([
        Handlers.handler(
          OrderPaid,
          IdempotencyStore.idempotent("invoices")((paid) =>
            Effect.sync(() => {
              calls++
              invoices += paid.amount
            })
          ),
          { name: "invoices" }
        )
      ])
      const stack = Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layerDefault).pipe(
        Layer.provideMerge(MemoryTransport.layer()),
        Layer.provideMerge(MemoryIdempotencyStore.layer())
      )
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        const memory = yield* MemoryTransport.MemoryTransport
        const [stored] = yield* memory.messages
        // The same message sent again (a manual requeue): another row, the same message id.
        const transport = yield* Transport
        yield* transport.send("outbox", [{
          messageId: id,
          type: "OrderPaid",
          body: stored!.body,
          headers: stored!.headers,
          delayMs: 0
        }])
        expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({ handled: 2 })
        const store = yield* MemoryIdempotencyStore.MemoryIdempotencyStore
        expect((yield* store.records).map((r) => [r.messageId, r.consumer])).toEqual([[id, "invoices"]])
      }).pipe(Effect.provide(stack))
      expect(calls).toBe(1)
      expect(invoices).toBe(5)
    }))
})
