/**
 * The transport suite's cases: sending and claiming, and a session's wake-up.
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import { claimMessages, five, numbers, outgoing, type When } from "./shared.js"

/** @internal */
export const register = <R>(when: When<R>): void => {
  describe("send and claim", () => {
    when(
      "claims ready messages in (available_at, id) order, with their id, body and headers",
      {},
      (t) =>
        Effect.gen(function*() {
          const sent = [outgoing(1), outgoing(2), outgoing(3)]
          yield* t.send("outbox", sent)
          const claimed = yield* claimMessages(t, "outbox", 10)
          expect(numbers(claimed)).toEqual([1, 2, 3])
          expect(claimed.map((c) => c.messageId)).toEqual(sent.map((s) => s.messageId))
          expect(claimed[0]!.headers).toBe(sent[0]!.headers)
          expect(claimed[0]!.transport).toBe("outbox")
          expect(claimed.every((c) => c.deliveries === 1)).toBe(true)
        })
    )

    when(
      "orders by availability first: a delayed message comes after later undelayed ones",
      { time: true },
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1, 5_000)])
          yield* t.send("outbox", [outgoing(2), outgoing(3)])
          expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([2, 3])
          yield* advance(5_001)
          expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([1])
        })
    )

    when("keeps queues apart", {}, (t) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [outgoing(1)])
        yield* t.send("other", [outgoing(2)])
        expect(numbers(yield* claimMessages(t, "other", 10))).toEqual([2])
        expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([1])
      }))

    when("claims at most batchSize, and never a message leased to another claimer", {}, (t) =>
      Effect.gen(function*() {
        yield* t.send("outbox", five())
        yield* Effect.scoped(Effect.gen(function*() {
          const session = yield* t.open(["outbox"])
          expect(numbers((yield* session.claim("outbox", 2, [])).messages)).toEqual([1, 2])
          expect(numbers((yield* session.claim("outbox", 2, [])).messages)).toEqual([3, 4])
          expect(numbers((yield* session.claim("outbox", 10, [])).messages)).toEqual([5])
          expect((yield* session.claim("outbox", 10, [])).messages).toEqual([])
        }))
      }))

    when("concurrent claimers get disjoint messages", {}, (t) =>
      Effect.gen(function*() {
        yield* t.send(
          "outbox",
          Array.from({ length: 40 }, (_, i) => outgoing(i))
        )
        const results = yield* Effect.scoped(Effect.gen(function*() {
          const session = yield* t.open(["outbox"])
          return yield* Effect.all(Array.from({ length: 8 }, () => session.claim("outbox", 7, [])), {
            concurrency: "unbounded"
          })
        }))
        const all = results.flatMap((r) => numbers(r.messages))
        expect(new Set(all).size).toBe(all.length)
        expect(all.length).toBe(40)
      }))

    when(
      "a session's wait ends with a hint when a message is sent to its transport",
      {},
      (t) =>
        Effect.scoped(Effect.gen(function*() {
          const session = yield* t.open(["outbox"])
          expect((yield* session.claim("outbox", 1, [])).messages).toEqual([])
          const waiting = yield* Effect.fork(session.wait(Duration.seconds(20)))
          yield* t.send("outbox", [outgoing(1)])
          yield* Fiber.join(waiting)
          expect(numbers((yield* session.claim("outbox", 1, [])).messages)).toEqual([1])
        }))
    )
  })
}
