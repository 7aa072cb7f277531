/**
 * The transport suite's cases: ack, retry, fail, keepalive, release and the next-due answer.
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Headers from "../../domain/Headers.js"
import { claim, claimMessages, five, lease, numbers, outgoing, stamped, type When } from "./shared.js"

/** @internal */
export const register = <R>(when: When<R>): void => {
  describe("settling", () => {
    when("redelivers an unacked message after the lease, counting deliveries", {
      capabilities: ["leases", "countsDeliveries"],
      time: true
    }, (t, advance) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [outgoing(1)])
        expect(numbers(yield* claimMessages(t, "outbox", 1))).toEqual([1])
        yield* advance(lease - 1_000)
        expect(yield* claimMessages(t, "outbox", 1)).toEqual([])
        yield* advance(2_000)
        const again = yield* claimMessages(t, "outbox", 1)
        expect(numbers(again)).toEqual([1])
        expect(again[0]!.deliveries).toBe(2)
      }))

    when(
      "ack deletes: an acked message never comes back",
      { capabilities: ["leases"], time: true },
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1), outgoing(2)])
          const claimed = yield* claimMessages(t, "outbox", 10)
          yield* t.ack(
            "outbox",
            claimed.map((c) => c.id)
          )
          yield* t.ack("outbox", [])
          yield* advance(lease * 2)
          expect(yield* claimMessages(t, "outbox", 10)).toEqual([])
        })
    )

    when(
      "ack, keepalive and release touch only the queue they name",
      { capabilities: ["leases"], time: true },
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("other", [outgoing(1)])
          const [claimed] = yield* claimMessages(t, "other", 1)
          yield* t.ack("outbox", [claimed!.id])
          yield* t.release("outbox", [claimed!.id])
          expect(yield* claimMessages(t, "other", 1)).toEqual([])
          // `other` has the default lease (30 seconds)
          yield* advance(31_000)
          expect(numbers(yield* claimMessages(t, "other", 1))).toEqual([1])
        })
    )

    when("retry makes the same message available after the delay with new headers", {
      capabilities: ["stableIds"],
      time: true
    }, (t, advance) =>
      Effect.gen(function*() {
        const sent = outgoing(1)
        yield* t.send("outbox", [sent])
        const [first] = yield* claimMessages(t, "outbox", 1)
        yield* t.retry(first!, { delay: Duration.seconds(3), headers: stamped("retry") })
        yield* advance(2_000)
        expect(yield* claimMessages(t, "outbox", 1)).toEqual([])
        yield* advance(1_500)
        const [again] = yield* claimMessages(t, "outbox", 1)
        expect(again!.id).toBe(first!.id)
        expect(again!.messageId).toBe(sent.messageId)
        expect(again!.headers).toBe(Headers.encode(stamped("retry")))
      }))

    when("fail moves the message to the failure queue, keeping its message id", {}, (t) =>
      Effect.gen(function*() {
        const sent = outgoing(1)
        yield* t.send("outbox", [sent])
        const [first] = yield* claimMessages(t, "outbox", 1)
        yield* t.fail(first!, stamped("failed"))
        expect(yield* claimMessages(t, "outbox", 1)).toEqual([])
        const [failed] = yield* claimMessages(t, "failed", 1)
        expect(failed!.messageId).toBe(sent.messageId)
        expect(failed!.headers).toBe(Headers.encode(stamped("failed")))
        expect(failed!.transport).toBe("failed")
        if (Option.getOrThrow(t.capabilities("outbox")).stableIds) {
          expect(failed!.id).toBe(first!.id)
        }
      }))

    when("an empty claim says when the next message is due: a delay's end, then a claim's lease", {
      capabilities: ["leases"],
      time: true
    }, (t, advance) =>
      Effect.gen(function*() {
        expect((yield* claim(t, "outbox", 1)).nextDue).toEqual(Option.none())
        yield* t.send("outbox", [outgoing(1, 5_000)])
        const delayed = Duration.toMillis(Option.getOrThrow((yield* claim(t, "outbox", 1)).nextDue))
        expect(delayed).toBeGreaterThan(4_000)
        expect(delayed).toBeLessThanOrEqual(5_000)
        yield* advance(5_001)
        const [claimed] = yield* claimMessages(t, "outbox", 1)
        const leased = Duration.toMillis(Option.getOrThrow((yield* claim(t, "outbox", 1)).nextDue))
        expect(leased).toBeGreaterThan(9_000)
        expect(leased).toBeLessThanOrEqual(lease)
        yield* t.ack("outbox", [claimed!.id])
        expect((yield* claim(t, "outbox", 1)).nextDue).toEqual(Option.none())
      }))

    when("a claim with acks deletes the handled messages and claims the next ones", {
      capabilities: ["leases"],
      time: true
    }, (t, advance) =>
      Effect.gen(function*() {
        yield* t.send("outbox", five())
        yield* Effect.scoped(Effect.gen(function*() {
          const session = yield* t.open(["outbox"])
          const first = (yield* session.claim("outbox", 2, [])).messages
          const second = (yield* session.claim(
            "outbox",
            2,
            first.map((m) => m.id)
          )).messages
          expect(numbers(second)).toEqual([3, 4])
          const third = (yield* session.claim(
            "outbox",
            10,
            second.map((m) => m.id)
          )).messages
          expect(numbers(third)).toEqual([5])
          // the acked messages are gone for good: not claimable even after their lease
          yield* advance(lease + 1)
          expect(numbers((yield* session.claim("outbox", 10, [])).messages)).toEqual([5])
        }))
      }))

    when("keepalive renews the lease; release hands the message back at once", {
      capabilities: ["leases"],
      time: true
    }, (t, advance) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [outgoing(1), outgoing(2)])
        const claimed = yield* claimMessages(t, "outbox", 2)
        yield* advance(lease - 2_000)
        yield* t.keepalive("outbox", [claimed[0]!.id])
        yield* advance(4_000)
        expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([2])
        yield* t.release("outbox", [claimed[0]!.id])
        expect(numbers(yield* claimMessages(t, "outbox", 10))).toEqual([1])
      }))

    when("release gives a message back at once, not counted as a delivery", {}, (t) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [outgoing(1)])
        const [first] = yield* claimMessages(t, "outbox", 1)
        yield* t.release("outbox", [first!.id])
        const [again] = yield* claimMessages(t, "outbox", 1)
        expect(numbers([again!])).toEqual([1])
        expect(again!.deliveries).toBe(1)
      }))
  })
}
