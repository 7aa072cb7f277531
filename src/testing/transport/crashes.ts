/**
 * The transport suite's cases: redeliveries and the crashes charged to a message (`countsDeliveries`).
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { claimMessages, lease, numbers, outgoing, stamped, type When } from "./shared.js"

/** @internal */
export const register = <R>(when: When<R>): void => {
  describe("crashes", () => {
    const needs = { capabilities: ["leases", "countsDeliveries"] as const, time: true }

    when(
      "a lease that ran out is a redelivery; a message whose handler never started is charged nothing",
      needs,
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1)])
          const [first] = yield* claimMessages(t, "outbox", 1)
          expect(first).toMatchObject({ deliveries: 1, crashes: 0, redelivered: false })
          // The claimer died before the handler started (a prefetched or unstarted message): claimed again and again.
          for (let delivery = 2; delivery <= 4; delivery++) {
            yield* advance(lease + 1_000)
            const [again] = yield* claimMessages(t, "outbox", 1)
            expect(again).toMatchObject({ id: first!.id, deliveries: delivery, crashes: 0, redelivered: true })
          }
        })
    )

    when(
      "a lease that runs out after `start` charges one crash to its message, each time",
      needs,
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1), outgoing(2)])
          yield* claimMessages(t, "outbox", 2)
          yield* advance(lease + 1_000)
          for (let crashes = 0; crashes < 3; crashes++) {
            const [killer, mate] = yield* claimMessages(t, "outbox", 2)
            expect(numbers([killer!, mate!])).toEqual([1, 2])
            expect(killer).toMatchObject({ crashes, redelivered: true })
            // Its batch-mate was redelivered each time too, but never started: it is charged nothing.
            expect(mate).toMatchObject({ crashes: 0, redelivered: true })
            expect(yield* t.start(killer!)).toBe(true)
            yield* advance(lease + 1_000)
          }
          const [killer] = yield* claimMessages(t, "outbox", 1)
          expect(killer).toMatchObject({ crashes: 3, redelivered: true })
        })
    )

    when(
      "an outcome after `start` charges nothing: a retry, a release and a keepalive'd lease settled in time",
      needs,
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1), outgoing(2)])
          yield* claimMessages(t, "outbox", 2)
          yield* advance(lease + 1_000)
          const [retried, released] = yield* claimMessages(t, "outbox", 2)
          expect(yield* t.start(retried!)).toBe(true)
          expect(yield* t.start(released!)).toBe(true)
          // Renewed: the lease outlives its first term, and is still the claimer's.
          yield* advance(lease - 2_000)
          yield* t.keepalive("outbox", [retried!.id, released!.id])
          yield* advance(4_000)
          expect(yield* claimMessages(t, "outbox", 2)).toEqual([])
          yield* t.retry(retried!, { delay: Duration.zero, headers: stamped("retry") })
          yield* t.release("outbox", [released!.id])
          // The retried one is available from its retry on: after the released one.
          const again = yield* claimMessages(t, "outbox", 2)
          expect(numbers(again)).toEqual([2, 1])
          expect(again.map((m) => [m.crashes, m.redelivered])).toEqual([[0, false], [0, false]])
          // A later crash is charged from there (the earlier starts had outcomes).
          yield* advance(lease + 1_000)
          const [third] = yield* claimMessages(t, "outbox", 1)
          expect(yield* t.start(third!)).toBe(true)
          yield* advance(lease + 1_000)
          expect((yield* claimMessages(t, "outbox", 1))[0]).toMatchObject({ id: third!.id, crashes: 1 })
        })
    )

    when(
      "`start` marks nothing once the lease is not the caller's: run out, acked, or never a redelivery",
      needs,
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1), outgoing(2)])
          const fresh = yield* claimMessages(t, "outbox", 2)
          expect(yield* t.start(fresh[0]!)).toBe(false)
          yield* advance(lease + 1_000)
          const [late, acked] = yield* claimMessages(t, "outbox", 2)
          yield* t.ack("outbox", [acked!.id])
          expect(yield* t.start(acked!)).toBe(false)
          yield* advance(lease + 1_000)
          expect(yield* t.start(late!)).toBe(false)
          // Nothing was marked: the next lease to run out charges nothing.
          const [again] = yield* claimMessages(t, "outbox", 1)
          yield* advance(lease + 1_000)
          expect((yield* claimMessages(t, "outbox", 1))[0]).toMatchObject({ id: again!.id, crashes: 0 })
        })
    )

    when(
      "a failed message moved back by the operator starts with no crash charged",
      { capabilities: ["leases", "countsDeliveries", "browsing", "stableIds"], time: true },
      (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1)])
          yield* claimMessages(t, "outbox", 1)
          yield* advance(lease + 1_000)
          const [suspect] = yield* claimMessages(t, "outbox", 1)
          yield* t.start(suspect!)
          yield* advance(lease + 1_000)
          const [charged] = yield* claimMessages(t, "outbox", 1)
          expect(charged!.crashes).toBe(1)
          yield* t.fail(charged!, stamped("failed"))
          expect(yield* t.move("failed", charged!.id, { to: "outbox", headers: stamped("back") })).toBe(true)
          expect((yield* claimMessages(t, "outbox", 1))[0]).toMatchObject({ crashes: 0, redelivered: false })
        })
    )
  })
}
