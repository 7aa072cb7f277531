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
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { memoryStack } from "../support/memory.js"

class Step extends Schema.TaggedClass<Step>()("Step", { key: Schema.String, n: Schema.Int }) {}

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
    const active = new Set<string>()
    const overlaps: Array<string> = []
    const started = new Map<string, Array<number>>()
    const attempts = new Map<string, number>()
    // Every seventh message fails twice before it succeeds.
    const failsFirst = (n: number): number => (n % 7 === 0 ? 2 : 0)
    let retries = 0
    for (let n = 1; n <= perKey; n++) retries += keys * failsFirst(n)
    const handler = Handlers.handler(Step, (step) =>
      Effect.gen(function*() {
        if (active.has(step.key)) overlaps.push(`${step.key}#${step.n}`)
        active.add(step.key)
        started.set(step.key, [...(started.get(step.key) ?? []), step.n])
        yield* Effect.sleep(`${(step.n * 7) % 3} millis`)
        active.delete(step.key)
        const id = `${step.key}#${step.n}`
        const attempt = (attempts.get(id) ?? 0) + 1
        attempts.set(id, attempt)
        if (attempt <= failsFirst(step.n)) return yield* Effect.fail(new Error(`${id} not yet`))
      }))
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
        limit: keys * perKey + retries
      })
      expect(summary).toMatchObject({ handled: keys * perKey, retried: retries, failed: 0 })
      expect(overlaps).toEqual([])
      for (let k = 0; k < keys; k++) {
        const expected = Array.from({ length: perKey }, (_, i) => i + 1).flatMap((n) =>
          Array.from({ length: failsFirst(n) + 1 }, () => n)
        )
        expect(started.get(`k${k}`)).toEqual(expected)
      }
    }).pipe(
      Effect.provide(memoryStack([handler], { default: { maxRetries: 3, delay: "3 millis" } })),
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
