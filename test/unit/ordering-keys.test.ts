/**
 * Ordering keys through the worker, on the in-memory layers: per key one handler at a time, in the order sent,
 * with concurrency, batches, prefetch and retries; keys from the dispatch options or derived by the message class;
 * bad keys and transports that cannot keep them refused.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Message from "../../src/domain/Message.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { memoryStack } from "../support/memory.js"
import { orderedSteps, Step } from "../support/ordering.js"

class AccountDebited extends Schema.TaggedClass<AccountDebited>()("AccountDebited", {
  account: Schema.Int,
  n: Schema.Int
}) {
  [Message.orderingKey]() {
    return `account-${this.account}`
  }
}

describe("ordering keys", () => {
  it.live("per key one handler at a time, in the order sent: concurrency 8, batches, prefetch and retries", () => {
    const keys = 20
    const perKey = 25
    // Every seventh message fails twice before it succeeds.
    const steps = orderedSteps({ keys, perKey, failsFirst: (n) => (n % 7 === 0 ? 2 : 0) })
    return Effect.gen(function*() {
      // Interleaved sends: key k's message n goes in the n-th call, among the other keys'.
      for (let n = 1; n <= perKey; n++) {
        for (let k = 0; k < keys; k++) {
          yield* Outbox.dispatch(new Step({ key: `k${k}`, n }), { orderingKey: `k${k}` })
        }
      }
      const summary = yield* Worker.run({
        transports: ["outbox"],
        concurrency: 8,
        batchSize: 10,
        sleep: "5 millis",
        limit: steps.total
      })
      expect(summary).toMatchObject({ handled: keys * perKey, retried: steps.retries, failed: 0 })
      steps.check()
    }).pipe(
      Effect.provide(memoryStack([steps.handler], { default: { maxRetries: 3, delay: "3 millis" } })),
      Logger.withMinimumLogLevel(LogLevel.Error)
    )
  })

  it.effect("a claim that found nothing while an ack was written looks again: a key's next message is not missed", () => {
    const started: Array<string> = []
    const handler = Handlers.handler(Step, (step) =>
      Effect.suspend(() => {
        started.push(`${step.key}#${step.n}`)
        return step.key === "slow" ? Effect.sleep("30 millis") : Effect.void
      }))
    // Acks written apart from a claim wait until a claim has answered: that claim ran while the ack was not
    // committed, as one can on PostgreSQL (the key's row locked by the ack, skipped).
    const ackAfterClaim = Layer.effect(
      Transport,
      Effect.gen(function*() {
        const memory = yield* Transport
        const waiting: Array<Deferred.Deferred<void>> = []
        return {
          ...memory,
          ack: (name: string, ids: ReadonlyArray<string>) =>
            Effect.flatMap(Deferred.make<void>(), (claimed) => {
              waiting.push(claimed)
              return Effect.zipRight(Deferred.await(claimed), memory.ack(name, ids))
            }),
          open: (names: ReadonlyArray<string>) =>
            Effect.map(memory.open(names), (session) => ({
              ...session,
              claim: (name: string, size: number, acks: ReadonlyArray<string>) =>
                Effect.tap(
                  session.claim(name, size, acks),
                  () => Effect.forEach(waiting.splice(0), (claimed) => Deferred.succeed(claimed, undefined))
                )
            }))
        }
      })
    )
    return Effect.gen(function*() {
      for (const [key, n] of [["a", 1], ["a", 2], ["b", 1], ["b", 2], ["slow", 1]] as const) {
        yield* Outbox.dispatch(new Step({ key, n }), { orderingKey: key })
      }
      // a#1 and b#1 end at once, and their acks are written while slow#1 still runs (after the ack interval);
      // the claim after the batch meets a and b still unacked.
      const worker = yield* Effect.fork(
        Worker.run({ transports: ["outbox"], concurrency: 8, batchSize: 10, stopWhenEmpty: true })
      )
      yield* TestClock.adjust("30 millis")
      const summary = yield* Fiber.join(worker)
      expect(started).toEqual(["a#1", "b#1", "slow#1", "a#2", "b#2"])
      expect(summary).toMatchObject({ handled: 5, stoppedBy: "empty" })
    }).pipe(
      Effect.provide(Layer.provideMerge(
        Layer.mergeAll(Outbox.layer(), Handlers.layer([handler]), ScheduleRetryStrategy.layer({})),
        Layer.provideMerge(ackAfterClaim, MemoryTransport.layer())
      )),
      Logger.withMinimumLogLevel(LogLevel.Error)
    )
  })

  it.effect("a message class derives its key; the dispatch option overrides it", () =>
    Effect.gen(function*() {
      yield* Outbox.dispatch(new AccountDebited({ account: 7, n: 1 }))
      yield* Outbox.dispatch(new AccountDebited({ account: 7, n: 2 }), { orderingKey: "manual" })
      const memory = yield* MemoryTransport.MemoryTransport
      expect((yield* memory.messagesOf("outbox")).map((m) => m.orderingKey)).toEqual(["account-7", "manual"])
    }).pipe(Effect.provide(memoryStack([]))))

  it.effect("a bad key is a MessageEncodeError; a transport that cannot keep keys, an OutboxConfigError", () =>
    Effect.gen(function*() {
      for (const orderingKey of ["", "x".repeat(201)]) {
        const error = yield* Effect.flip(Outbox.dispatch(new Step({ key: "k", n: 1 }), { orderingKey }))
        expect(error._tag).toBe("MessageEncodeError")
        expect(error.message).toMatch(/^Invalid ordering key: .{0,300}$/)
      }
      const unordered = yield* Effect.flip(
        Outbox.dispatch(new Step({ key: "k", n: 1 }), { orderingKey: "k" }).pipe(
          Effect.provide(Outbox.layer()),
          Effect.provide(Layer.effect(
            Transport,
            Effect.map(Transport, (memory) => ({
              ...memory,
              capabilities: (name: string) =>
                Option.map(memory.capabilities(name), (c) => ({ ...c, orderingKeys: false }))
            }))
          ))
        )
      )
      expect(unordered).toMatchObject({ _tag: "OutboxConfigError" })
      expect(unordered.message).toMatch(/^Transport outbox does not keep ordering keys/)
      const memory = yield* MemoryTransport.MemoryTransport
      expect(yield* memory.messagesOf("outbox")).toEqual([])
    }).pipe(Effect.provide(memoryStack([]))))
})
