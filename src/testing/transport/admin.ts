/**
 * The transport suite's cases: the operator side, and the names a backend serves.
 *
 * @internal
 */
import { describe, expect } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"
import * as MessageId from "../../domain/MessageId.js"
import { claimMessages, lease, numbers, outgoing, stamped, type When } from "./shared.js"

/** @internal */
export const register = <R>(when: When<R>): void => {
  describe("operator side", () => {
    when("lists and finds the messages of one queue, by type, leaving other queues alone", {
      capabilities: ["browsing"]
    }, (t) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [outgoing(1, 0, "A"), outgoing(2, 0, "B"), outgoing(3, 0, "A"), {
          ...outgoing(4),
          headers: "{corrupt"
        }])
        yield* t.send("other", [outgoing(5, 0, "A")])
        expect(numbers(yield* t.list("outbox", { max: 10 }))).toEqual([1, 2, 3, 4])
        expect(numbers(yield* t.list("outbox", { max: 2 }))).toEqual([1, 2])
        expect(numbers(yield* t.list("outbox", { max: 10, type: "A" }))).toEqual([1, 3])
        expect(numbers(yield* t.list("outbox", { max: 1, type: "A" }))).toEqual([1])
        const [one] = yield* t.list("other", { max: 1 })
        expect((yield* t.find("other", one!.id))._tag).toBe("Some")
        expect((yield* t.find("outbox", one!.id))._tag).toBe("None")
        expect((yield* t.find("outbox", "not-an-id"))._tag).toBe("None")
        expect((yield* t.find("outbox", "999999999"))._tag).toBe("None")
      }))

    when("list pages by id after a cursor, and filters by error tag and original transport", {
      capabilities: ["browsing"]
    }, (t) =>
      Effect.gen(function*() {
        const failed = (tag: string, from: string) =>
          Headers.encode(
            new Headers.Headers({
              type: "A",
              errorDetails: new Headers.ErrorDetails({ tag, message: "boom" }),
              originalTransport: from
            })
          )
        yield* t.send("outbox", [
          { ...outgoing(1, 0, "A"), headers: failed("Timeout", "outbox") },
          { ...outgoing(2, 0, "A"), headers: failed("Refused", "other") },
          { ...outgoing(3, 0, "A"), headers: failed("Timeout", "other") },
          { ...outgoing(4), headers: "{corrupt" },
          { ...outgoing(5, 0, "A"), headers: failed("Timeout", "outbox") }
        ])
        const first = yield* t.list("outbox", { max: 2 })
        expect(numbers(first)).toEqual([1, 2])
        const second = yield* t.list("outbox", { max: 2, after: first[1]!.id })
        expect(numbers(second)).toEqual([3, 4])
        expect(numbers(yield* t.list("outbox", { max: 2, after: second[1]!.id }))).toEqual([5])
        expect(numbers(yield* t.list("outbox", { max: 10, errorTag: "Timeout" }))).toEqual([1, 3, 5])
        expect(numbers(yield* t.list("outbox", { max: 10, originalTransport: "other" }))).toEqual([2, 3])
        expect(numbers(yield* t.list("outbox", { max: 10, errorTag: "Timeout", originalTransport: "outbox" })))
          .toEqual([1, 5])
        const timeouts = yield* t.list("outbox", { max: 1, errorTag: "Timeout" })
        expect(numbers(yield* t.list("outbox", { max: 1, errorTag: "Timeout", after: timeouts[0]!.id })))
          .toEqual([3])
        expect(yield* t.list("outbox", { max: 10, after: "not-an-id" })).toEqual([])
        // By id as a number, not as text: 10 and 11 come after 9.
        yield* t.send("other", Array.from({ length: 11 }, (_, i) => outgoing(i + 1)))
        expect(numbers(yield* t.list("other", { max: 20 }))).toEqual(Array.from({ length: 11 }, (_, i) => i + 1))
      }))

    when("remove deletes only within the named queue", { capabilities: ["browsing"] }, (t) =>
      Effect.gen(function*() {
        yield* t.send("outbox", [outgoing(1)])
        yield* t.send("other", [outgoing(2)])
        const [a] = yield* t.list("outbox", { max: 1 })
        const [b] = yield* t.list("other", { max: 1 })
        expect(yield* t.remove("outbox", [a!.id, b!.id, "x"])).toBe(1)
        expect(numbers(yield* t.list("outbox", { max: 10 }))).toEqual([])
        expect(numbers(yield* t.list("other", { max: 10 }))).toEqual([2])
      }))

    when("move sends a failed message back, ready now, same message id, deliveries reset", {
      capabilities: ["browsing", "stableIds"]
    }, (t) =>
      Effect.gen(function*() {
        const sent = outgoing(1, 0)
        yield* t.send("outbox", [sent])
        const [claimed] = yield* claimMessages(t, "outbox", 1)
        yield* t.fail(claimed!, stamped("failed"))
        expect(yield* t.move("outbox", claimed!.id, { to: "outbox", headers: stamped("no") })).toBe(false)
        expect(yield* t.move("failed", claimed!.id, { to: "outbox", headers: stamped("back") })).toBe(true)
        const [again] = yield* claimMessages(t, "outbox", 1)
        expect(again!.messageId).toBe(sent.messageId)
        expect(again!.headers).toBe(Headers.encode(stamped("back")))
        expect(again!.deliveries).toBe(1)
        expect(yield* Effect.flip(t.move("failed", claimed!.id, { to: "nowhere", headers: stamped("x") })))
          .toMatchObject({ _tag: "UnknownTransportError" })
      }))

    when("stats count ready, delayed, in flight and failed messages, and the oldest ready age", {
      capabilities: ["browsing", "leases"],
      time: true
    }, (t, advance) =>
      Effect.gen(function*() {
        expect(yield* t.stats("outbox")).toMatchObject({
          ready: 0,
          delayed: 0,
          inFlight: 0,
          failed: 0,
          oldestReadyAgeMs: null
        })
        yield* t.send("outbox", [outgoing(1), outgoing(2), outgoing(3), outgoing(4, 60_000)])
        const [a] = yield* claimMessages(t, "outbox", 2)
        yield* t.fail(a!, stamped("failed"))
        yield* advance(3_000)
        const stats = yield* t.stats("outbox")
        expect(stats).toMatchObject({ transport: "outbox", ready: 1, delayed: 1, inFlight: 1, failed: 1 })
        expect(stats.oldestReadyAgeMs!).toBeGreaterThanOrEqual(2_900)
        expect(stats.oldestReadyAgeMs!).toBeLessThan(10_000)
      }))
  })

  describe("names", () => {
    when(
      "every method rejects an unknown transport with UnknownTransportError naming the known ones",
      {},
      (t) =>
        Effect.gen(function*() {
          const fake: ReceivedMessage = {
            id: "1",
            transport: "nope",
            messageId: MessageId.make(),
            body: "{}",
            headers: "{}",
            createdAt: new Date(0),
            availableAt: new Date(0),
            deliveries: 1
          }
          const errors = [
            yield* Effect.flip(t.send("nope", [outgoing(1)])),
            yield* Effect.flip(Effect.scoped(t.open(["outbox", "nope"]))),
            yield* Effect.flip(t.ack("nope", ["1"])),
            yield* Effect.flip(t.retry(fake, { delay: Duration.seconds(1), headers: stamped("x") })),
            yield* Effect.flip(t.fail(fake, stamped("x"))),
            yield* Effect.flip(t.keepalive("nope", ["1"])),
            yield* Effect.flip(t.release("nope", ["1"])),
            yield* Effect.flip(t.stats("nope"))
          ]
          for (const error of errors) {
            expect(error).toMatchObject({ _tag: "UnknownTransportError", transport: "nope" })
            expect(error.message).toContain("known:")
            expect(error.message).toContain("outbox")
          }
          expect(t.capabilities("nope")).toEqual(Option.none())
        })
    )

    when("reports its names, failure transports and leases", {}, (t) =>
      Effect.gen(function*() {
        expect(t.names).toContain("outbox")
        expect(t.names).toContain("failed")
        expect(t.failureTransport("outbox")).toEqual(Option.some("failed"))
        expect(t.failureTransport("failed")).toEqual(Option.some("failed"))
        const capabilities = Option.getOrThrow(t.capabilities("outbox"))
        expect(Option.map(t.lease("outbox"), Duration.toMillis)).toEqual(
          capabilities.leases ? Option.some(lease) : Option.none()
        )
      }))
  })
}
