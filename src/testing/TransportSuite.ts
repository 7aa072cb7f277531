/**
 * The transport conformance suite: the contract of `Transport` and `TransportAdmin` (see
 * `services/Transport.ts`), as `@effect/vitest` tests any backend can run against itself. Cases a backend's
 * capabilities rule out (leases, browsing, stable ids, counted deliveries) or that need its clock moved
 * (`advance`) are skipped, as River's `riverdrivertest` skips what a driver lacks.
 *
 * @since 0.1.0
 */
import { describe, expect, layer } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { OutgoingMessage, ReceivedMessage } from "../domain/Envelope.js"
import * as Headers from "../domain/Headers.js"
import * as MessageId from "../domain/MessageId.js"
import type { Capabilities } from "../services/Transport.js"
import type { TransportBackend } from "../services/TransportAdmin.js"

/**
 * A backend under test.
 *
 * @since 0.1.0
 * @category models
 */
export interface BackendUnderTest<R> {
  /** The name of the describe block. */
  readonly name: string
  /** What `make` and `advance` need (a database, a broker connection); built once for the suite. */
  readonly layer: Layer.Layer<R, unknown>
  /**
   * A fresh, empty backend serving `outbox` (lease `lease` ms), `other` and `failed` (the failure transport of
   * both).
   */
  readonly make: Effect.Effect<TransportBackend, unknown, R | Scope.Scope>
  /** Moves the backend's notion of "now" forward; without it, the cases that wait for time are skipped. */
  readonly advance?: (backend: TransportBackend, ms: number) => Effect.Effect<void, unknown, R>
}

/**
 * The lease `make` must give `outbox`, in milliseconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const lease = 10_000

const outgoing = (n: number, delayMs = 0, type = "Test"): OutgoingMessage => ({
  messageId: MessageId.make(),
  type,
  body: JSON.stringify({ _tag: type, n }),
  headers: Headers.encode(new Headers.Headers({ type })),
  delayMs
})

/** Messages 1 to 5, ready now. */
const five = (): ReadonlyArray<OutgoingMessage> => [1, 2, 3, 4, 5].map((n) => outgoing(n))

const numbers = (rows: ReadonlyArray<{ readonly body: string }>) => rows.map((r) => JSON.parse(r.body).n as number)

const stamped = (stamp: string) => new Headers.Headers({ type: "Test", custom: { stamp } })

/** One claim in a session of its own. */
const claim = (t: TransportBackend, name: string, size: number, acks: ReadonlyArray<string> = []) =>
  Effect.scoped(Effect.flatMap(t.open([name]), (session) => session.claim(name, size, acks)))

const claimMessages = (t: TransportBackend, name: string, size: number, acks: ReadonlyArray<string> = []) =>
  Effect.map(claim(t, name, size, acks), (claimed): ReadonlyArray<ReceivedMessage> => claimed.messages)

/**
 * Registers the suite for a backend.
 *
 * @since 0.1.0
 * @category suites
 */
export const exerciseTransport = <R>(backend: BackendUnderTest<R>): void =>
  layer(backend.layer)(backend.name, (it) => {
    /** The case runs only when the backend can (its capabilities for `outbox`, and a clock to move). */
    const when = (
      title: string,
      needs: { readonly capabilities?: ReadonlyArray<keyof Capabilities>; readonly time?: boolean },
      body: (
        t: TransportBackend,
        advance: (ms: number) => Effect.Effect<void, unknown, R>
      ) => Effect.Effect<void, unknown, R>
    ) =>
      it.scoped(title, () =>
        Effect.gen(function*() {
          // The backend lives for the case (a broker connection closes with its scope).
          const t = yield* backend.make
          const capabilities = Option.getOrThrow(t.capabilities("outbox"))
          const lacking = (needs.capabilities ?? []).filter((c) => !capabilities[c])
          if (lacking.length > 0 || (needs.time === true && backend.advance === undefined)) return
          const advance = (ms: number) => backend.advance === undefined ? Effect.void : backend.advance(t, ms)
          yield* body(t, advance)
        }) as Effect.Effect<void, unknown, Scope.Scope>)

    describe("send and claim", () => {
      when("claims ready messages in (available_at, id) order, with their id, body and headers", {}, (t) =>
        Effect.gen(function*() {
          const sent = [outgoing(1), outgoing(2), outgoing(3)]
          yield* t.send("outbox", sent)
          const claimed = yield* claimMessages(t, "outbox", 10)
          expect(numbers(claimed)).toEqual([1, 2, 3])
          expect(claimed.map((c) =>
            c.messageId
          )).toEqual(sent.map((s) => s.messageId))
          expect(claimed[0]!.headers).toBe(sent[0]!.headers)
          expect(claimed[0]!.transport).toBe("outbox")
          expect(claimed.every((c) => c.deliveries === 1)).toBe(true)
        }))

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
            Array.from({ length: 40 }, (_, i) =>
              outgoing(i))
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

      when("a session's wait ends with a hint when a message is sent to its transport", {}, (t) =>
        Effect.scoped(Effect.gen(function*() {
          const session = yield* t.open(["outbox"])
          expect((yield* session.claim("outbox", 1, [])).messages).toEqual([])
          const waiting = yield* Effect.fork(session.wait(Duration.seconds(20)))
          yield* t.send("outbox", [outgoing(1)])
          yield* Fiber.join(waiting)
          expect(numbers((yield* session.claim("outbox", 1, [])).messages)).toEqual([1])
        })))
    })

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

      when("ack deletes: an acked message never comes back", { capabilities: ["leases"], time: true }, (t, advance) =>
        Effect.gen(function*() {
          yield* t.send("outbox", [outgoing(1), outgoing(2)])
          const claimed = yield* claimMessages(t, "outbox", 10)
          yield* t.ack(
            "outbox",
            claimed.map((c) =>
              c.id
            )
          )
          yield* t.ack("outbox", [])
          yield* advance(lease * 2)
          expect(yield* claimMessages(t, "outbox", 10)).toEqual([])
        }))

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
              first.map((m) =>
                m.id
              )
            )).messages
            expect(numbers(second)).toEqual([3, 4])
            const third = (yield* session.claim(
              "outbox",
              10,
              second.map((m) =>
                m.id
              )
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
      when("every method rejects an unknown transport with UnknownTransportError naming the known ones", {}, (t) =>
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
        }))

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
  })
