/**
 * Ordering keys through the worker, on the in-memory layers: per key one handler at a time, in the order sent,
 * with concurrency, batches, prefetch and retries; keys from the dispatch options or derived by the message class;
 * bad keys and transports that cannot keep them refused.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Message from "../../src/domain/Message.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as Worker from "../../src/programs/worker/Worker.js"
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
