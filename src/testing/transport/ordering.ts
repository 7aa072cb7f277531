/**
 * The transport suite's cases for ordering keys (backends with the `orderingKeys` capability): one message of a
 * key at a time, in the order sent, through claims, retries, releases, expired leases and the failure transport.
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { OutgoingMessage } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"
import { claimMessages, lease, numbers, outgoing, type When } from "./shared.js"

const keyed = (n: number, key: string, delayMs = 0): OutgoingMessage => ({ ...outgoing(n, delayMs), orderingKey: key })

const ordering = { capabilities: ["orderingKeys"] } as const
/** The failure transport holding a key: the cases read it through the operator's browsing. */
const orderingWithBrowsing = { capabilities: ["orderingKeys", "browsing"] } as const
const orderingWithTime = { capabilities: ["orderingKeys"], time: true } as const

/** @internal */
export const register = <R>(when: When<R>): void => {
  describe("ordering keys", () => {
    when(
      "a claim takes one message per key, the earliest sent, beside unkeyed ones",
      ordering,
      (t) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a"), keyed(3, "b"), outgoing(4), keyed(5, "b")])
          const claimed = yield* claimMessages(t, "outbox", 10)
          expect(numbers(claimed)).toEqual([1, 3, 4])
          expect(claimed.map((m) => m.orderingKey)).toEqual(["a", "b", undefined])
        })
    )

    when("the next message of a key waits until the one claimed is acked", ordering, (t) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a"), keyed(3, "a")])
        const [first] = yield* claimMessages(t, "outbox", 10)
        expect(numbers([first!])).toEqual([1])
        expect(yield* claimMessages(t, "outbox", 10)).toEqual([])
        expect(numbers(yield* claimMessages(t, "outbox", 10, [first!.id]))).toEqual([2])
      }))

    when("a retried message holds its key until it is handled: later messages wait for its delay", orderingWithTime, (
      t,
      advance
    ) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a"), keyed(3, "b")])
        const claimed = yield* claimMessages(t, "outbox", 10)
        expect(numbers(claimed)).toEqual([1, 3])
        yield* t.retry(claimed[0]!, { delay: Duration.seconds(5), headers: new Headers.Headers({ type: "Test" }) })
        yield* t.ack("outbox", [claimed[1]!.id])
        expect(yield* claimMessages(t, "outbox", 10)).toEqual([])
        yield* advance(5_001)
        const again = yield* claimMessages(t, "outbox", 10)
        expect(numbers(again)).toEqual([1])
        expect(numbers(yield* claimMessages(t, "outbox", 10, [again[0]!.id]))).toEqual([2])
      }))

    when("a released message keeps its place at the head of its key", ordering, (t) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a")])
        const [first] = yield* claimMessages(t, "outbox", 10)
        yield* t.release("outbox", [first!.id])
        expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([1])
      }))

    when("a dead claimer's key is free only once its lease expired, and its message comes first", orderingWithTime, (
      t,
      advance
    ) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a")])
        expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([1])
        yield* advance(lease - 1_000)
        expect(yield* claimMessages(t, "outbox", 10)).toEqual([])
        yield* advance(2_000)
        expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([1])
      }))

    when(
      "keys are per transport: the same key on another transport is another sequence",
      ordering,
      (t) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a")])
          yield* t.send("other", [keyed(3, "a")])
          expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([1])
          expect(numbers(yield* claimMessages(t, "other", 10))).toEqual([3])
        })
    )

    when(
      "a message in the failure transport blocks its key (stats count it) until it is moved back, then leads again",
      orderingWithBrowsing,
      (t) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a"), keyed(3, "b")])
          const claimed = yield* claimMessages(t, "outbox", 10)
          yield* t.fail(claimed[0]!, new Headers.Headers({ type: "Test" }))
          yield* t.ack("outbox", [claimed[1]!.id])
          expect(yield* claimMessages(t, "outbox", 10)).toEqual([])
          const [failed] = yield* t.list("failed", { max: 10 })
          expect(failed!.orderingKey).toBe("a")
          expect(failed!.blocksKey).toBe(true)
          expect((yield* t.find("failed", failed!.id)).pipe(Option.map((m) => m.blocksKey))).toEqual(Option.some(true))
          expect((yield* t.stats("outbox")).blockedKeys).toBe(1)
          expect(yield* t.move("failed", failed!.id, { to: "outbox", headers: new Headers.Headers({ type: "Test" }) }))
            .toBe(true)
          expect((yield* t.stats("outbox")).blockedKeys).toBe(0)
          const again = yield* claimMessages(t, "outbox", 10)
          expect(numbers(again)).toEqual([1])
          expect(numbers(yield* claimMessages(t, "outbox", 10, [again[0]!.id]))).toEqual([2])
        })
    )

    when(
      "removing the blocking message from the failure transport frees its key",
      orderingWithBrowsing,
      (t) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [keyed(1, "a"), keyed(2, "a")])
          const [first] = yield* claimMessages(t, "outbox", 10)
          yield* t.fail(first!, new Headers.Headers({ type: "Test" }))
          expect(yield* claimMessages(t, "outbox", 10)).toEqual([])
          expect((yield* t.stats("outbox")).blockedKeys).toBe(1)
          expect(yield* t.remove("failed", [first!.id])).toBe(1)
          expect((yield* t.stats("outbox")).blockedKeys).toBe(0)
          expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([2])
        })
    )
  })
}
