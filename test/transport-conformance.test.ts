/**
 * One suite, two layers: the PostgreSQL transport and the in-memory transport must behave alike.
 */
import { describe, expect, layer } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import type { OutgoingMessage } from "../src/domain/Envelope.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import type { TransportShape } from "../src/services/Transport.js"
import { freshDatabase } from "./support/database.js"

interface Backend {
  readonly name: string
  /** A fresh, empty transport with `outbox` (lease 10 s) and `failed`. */
  readonly make: Effect.Effect<TransportShape, unknown, SqlClient.SqlClient>
  /** Moves the backend's notion of "now" forward. */
  readonly advance: (transport: TransportShape, ms: number) => Effect.Effect<void, unknown, SqlClient.SqlClient>
}

const lease = 10_000
let tables = 0

const tableOf = new WeakMap<TransportShape, string>()

const backends: ReadonlyArray<Backend> = [
  {
    name: "postgres",
    make: Effect.gen(function*() {
      const table = `conformance_${++tables}`
      const transport = yield* PgTransport.make({
        table,
        transports: { outbox: { redeliverTimeout: Duration.millis(lease) }, other: {} }
      })
      yield* transport.setup
      tableOf.set(transport, table)
      return transport
    }),
    advance: (transport, ms) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const shift = sql.literal(`interval '${ms} milliseconds'`)
        yield* sql`UPDATE ${sql(tableOf.get(transport)!)} SET created_at = created_at - ${shift},
          available_at = available_at - ${shift}, delivered_at = delivered_at - ${shift}`
      })
  },
  {
    name: "memory",
    make: MemoryTransport.make({ transports: { outbox: { redeliverTimeout: Duration.millis(lease) }, other: {} } }),
    advance: (_transport, ms) => TestClock.adjust(Duration.millis(ms))
  }
]

const outgoing = (n: number, delayMs = 0): OutgoingMessage => ({
  messageId: MessageId.make(),
  type: "Test",
  body: JSON.stringify({ _tag: "Test", n }),
  headers: JSON.stringify({ type: "Test" }),
  delayMs
})

const numbers = (rows: ReadonlyArray<{ readonly body: string }>) => rows.map((r) => JSON.parse(r.body).n as number)

layer(freshDatabase())("transport conformance", (it) => {
  for (const backend of backends) {
    describe(backend.name, () => {
      it.effect("claims ready messages in (available_at, id) order, with their id, body and headers", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          const sent = [outgoing(1), outgoing(2), outgoing(3)]
          yield* t.send("outbox", sent)
          const claimed = yield* t.claim("outbox", 10)
          expect(numbers(claimed)).toEqual([1, 2, 3])
          expect(claimed.map((c) => c.messageId)).toEqual(sent.map((s) => s.messageId))
          expect(claimed[0]!.headers).toBe(sent[0]!.headers)
          expect(claimed[0]!.transport).toBe("outbox")
          expect(claimed.every((c) => c.deliveries === 1)).toBe(true)
        }))

      it.effect("orders by availability first: a delayed message comes after later undelayed ones", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [outgoing(1, 5_000)])
          yield* t.send("outbox", [outgoing(2), outgoing(3)])
          expect(numbers(yield* t.claim("outbox", 10))).toEqual([2, 3])
          yield* backend.advance(t, 5_001)
          expect(numbers(yield* t.claim("outbox", 10))).toEqual([1])
        }))

      it.effect("keeps queues apart", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [outgoing(1)])
          yield* t.send("other", [outgoing(2)])
          expect(numbers(yield* t.claim("other", 10))).toEqual([2])
          expect(numbers(yield* t.claim("outbox", 10))).toEqual([1])
        }))

      it.effect("claims at most batchSize, and never a message leased to another claimer", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [1, 2, 3, 4, 5].map((n) => outgoing(n)))
          expect(numbers(yield* t.claim("outbox", 2))).toEqual([1, 2])
          expect(numbers(yield* t.claim("outbox", 2))).toEqual([3, 4])
          expect(numbers(yield* t.claim("outbox", 10))).toEqual([5])
          expect(yield* t.claim("outbox", 10)).toEqual([])
        }))

      it.effect("concurrent claimers get disjoint messages", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", Array.from({ length: 40 }, (_, i) => outgoing(i)))
          const results = yield* Effect.all(Array.from({ length: 8 }, () => t.claim("outbox", 7)), {
            concurrency: "unbounded"
          })
          const all = results.flatMap(numbers)
          expect(new Set(all).size).toBe(all.length)
          expect(all.length).toBe(40)
        }))

      it.effect("redelivers an unacked message after the lease, counting deliveries", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [outgoing(1)])
          expect(numbers(yield* t.claim("outbox", 1))).toEqual([1])
          yield* backend.advance(t, lease - 1_000)
          expect(yield* t.claim("outbox", 1)).toEqual([])
          yield* backend.advance(t, 2_000)
          const again = yield* t.claim("outbox", 1)
          expect(numbers(again)).toEqual([1])
          expect(again[0]!.deliveries).toBe(2)
        }))

      it.effect("ack deletes: an acked message never comes back", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [outgoing(1), outgoing(2)])
          const claimed = yield* t.claim("outbox", 10)
          yield* t.ack("outbox", claimed.map((c) => c.id))
          yield* t.ack("outbox", [])
          yield* backend.advance(t, lease * 2)
          expect(yield* t.claim("outbox", 10)).toEqual([])
        }))

      it.effect("retry makes the same message available after the delay with new headers", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          const sent = outgoing(1)
          yield* t.send("outbox", [sent])
          const [first] = yield* t.claim("outbox", 1)
          yield* t.retry("outbox", first!.id, { delay: Duration.seconds(3), headers: `{"type":"Test","retry":1}` })
          yield* backend.advance(t, 2_000)
          expect(yield* t.claim("outbox", 1)).toEqual([])
          yield* backend.advance(t, 1_500)
          const [again] = yield* t.claim("outbox", 1)
          expect(again!.id).toBe(first!.id)
          expect(again!.messageId).toBe(sent.messageId)
          expect(again!.headers).toBe(`{"type":"Test","retry":1}`)
        }))

      it.effect("fail moves the message to the failure queue in place, keeping its message id", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          const sent = outgoing(1)
          yield* t.send("outbox", [sent])
          const [first] = yield* t.claim("outbox", 1)
          yield* t.fail("outbox", first!.id, { headers: `{"type":"Test","failed":true}` })
          yield* backend.advance(t, lease * 2)
          expect(yield* t.claim("outbox", 1)).toEqual([])
          const [failed] = yield* t.claim("failed", 1)
          expect(failed!.id).toBe(first!.id)
          expect(failed!.messageId).toBe(sent.messageId)
          expect(failed!.headers).toBe(`{"type":"Test","failed":true}`)
          expect(failed!.transport).toBe("failed")
        }))

      it.effect("nextDue: a delay's end, 0 for a message that became due unclaimed, then the claim's lease", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          expect(yield* t.nextDue("outbox")).toEqual(Option.none())
          yield* t.send("outbox", [outgoing(1, 5_000)])
          const delayed = Option.getOrThrow(yield* t.nextDue("outbox"))
          expect(delayed).toBeGreaterThan(4_000)
          expect(delayed).toBeLessThanOrEqual(5_000)
          // Due now and nobody claimed it (it became due after a claim found nothing): claim at once.
          yield* backend.advance(t, 5_001)
          expect(yield* t.nextDue("outbox")).toEqual(Option.some(0))
          const [claimed] = yield* t.claim("outbox", 1)
          const lease = Option.getOrThrow(yield* t.nextDue("outbox"))
          expect(lease).toBeGreaterThan(9_000)
          expect(lease).toBeLessThanOrEqual(10_000)
          yield* t.ack("outbox", [claimed!.id])
          expect(yield* t.nextDue("outbox")).toEqual(Option.none())
        }))

      it.effect("ackAndClaim deletes the handled messages and claims the next ones, in one step", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          expect(t.ackAndClaim).toBeDefined()
          yield* t.send("outbox", [1, 2, 3, 4, 5].map((n) => outgoing(n)))
          const first = yield* t.claim("outbox", 2)
          const second = yield* t.ackAndClaim!("outbox", first.map((m) => m.id), 2)
          expect(numbers(second)).toEqual([3, 4])
          const third = yield* t.ackAndClaim!("outbox", second.map((m) => m.id), 10)
          expect(numbers(third)).toEqual([5])
          // the acked messages are gone for good: not claimable even after their lease
          yield* backend.advance(t, lease + 1)
          const after = yield* t.ackAndClaim!("outbox", [], 10)
          expect(numbers(after)).toEqual([5])
          expect((yield* t.stats("outbox")).inFlight).toBe(1)
          // an unknown transport is a typed error
          const unknown = yield* Effect.flip(t.ackAndClaim!("nope", [], 1))
          expect(unknown._tag).toBe("UnknownTransportError")
        }))

      it.effect("keepalive renews the lease; release hands the message back at once", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [outgoing(1), outgoing(2)])
          const claimed = yield* t.claim("outbox", 2)
          yield* backend.advance(t, lease - 2_000)
          yield* t.keepalive("outbox", [claimed[0]!.id])
          yield* backend.advance(t, 4_000)
          expect(numbers(yield* t.claim("outbox", 10))).toEqual([2])
          yield* t.release("outbox", [claimed[0]!.id])
          expect(numbers(yield* t.claim("outbox", 10))).toEqual([1])
        }))

      it.effect("release does not count as a delivery", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [outgoing(1)])
          const [first] = yield* t.claim("outbox", 1)
          yield* t.release("outbox", [first!.id])
          const [again] = yield* t.claim("outbox", 1)
          expect(again!.deliveries).toBe(1)
        }))

      it.effect("lists and finds the messages of one queue, by type, leaving other queues alone", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          const typed = (n: number, type: string): OutgoingMessage => ({ ...outgoing(n), type, headers: JSON.stringify({ type }) })
          yield* t.send("outbox", [typed(1, "A"), typed(2, "B"), typed(3, "A"), { ...outgoing(4), headers: "{corrupt" }])
          yield* t.send("other", [typed(5, "A")])
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

      it.effect("remove deletes only within the named queue", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          yield* t.send("outbox", [outgoing(1)])
          yield* t.send("other", [outgoing(2)])
          const [a] = yield* t.list("outbox", { max: 1 })
          const [b] = yield* t.list("other", { max: 1 })
          expect(yield* t.remove("outbox", [a!.id, b!.id, "x"])).toBe(1)
          expect(numbers(yield* t.list("outbox", { max: 10 }))).toEqual([])
          expect(numbers(yield* t.list("other", { max: 10 }))).toEqual([2])
        }))

      it.effect("move sends a failed message back, ready now, same message id, deliveries reset", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          const sent = outgoing(1, 0)
          yield* t.send("outbox", [sent])
          const [claimed] = yield* t.claim("outbox", 1)
          yield* t.fail("outbox", claimed!.id, { headers: `{"type":"Test","failed":1}` })
          expect(yield* t.move("outbox", claimed!.id, { to: "outbox", headers: "{}" })).toBe(false)
          expect(yield* t.move("failed", claimed!.id, { to: "outbox", headers: `{"type":"Test"}` })).toBe(true)
          const [again] = yield* t.claim("outbox", 1)
          expect(again!.messageId).toBe(sent.messageId)
          expect(again!.headers).toBe(`{"type":"Test"}`)
          expect(again!.deliveries).toBe(1)
          expect(yield* Effect.flip(t.move("failed", claimed!.id, { to: "nowhere", headers: "{}" }))).toMatchObject({
            _tag: "UnknownTransportError"
          })
        }))

      it.effect("stats count ready, delayed, in flight and failed messages, and the oldest ready age", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          expect(yield* t.stats("outbox")).toMatchObject({ ready: 0, delayed: 0, inFlight: 0, failed: 0, oldestReadyAgeMs: null })
          yield* t.send("outbox", [outgoing(1), outgoing(2), outgoing(3), outgoing(4, 60_000)])
          const [a, b] = yield* t.claim("outbox", 2)
          yield* t.fail("outbox", a!.id, { headers: "{}" })
          yield* backend.advance(t, 3_000)
          const stats = yield* t.stats("outbox")
          expect(stats).toMatchObject({ transport: "outbox", ready: 1, delayed: 1, inFlight: 1, failed: 1 })
          expect(stats.oldestReadyAgeMs!).toBeGreaterThanOrEqual(2_900)
          expect(stats.oldestReadyAgeMs!).toBeLessThan(10_000)
          expect(b).toBeDefined()
          expect(t.failureTransport("outbox")).toEqual(Option.some("failed"))
          expect(t.failureTransport("failed")).toEqual(Option.some("failed"))
        }))

      it.effect("rejects unknown transports with a typed error", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          const error = yield* Effect.flip(t.send("nope", [outgoing(1)]))
          expect(error._tag).toBe("UnknownTransportError")
          const claimError = yield* Effect.flip(t.claim("nope", 1))
          expect(claimError._tag).toBe("UnknownTransportError")
        }))

      it.effect("reports the lease of a transport", () =>
        Effect.gen(function*() {
          const t = yield* backend.make
          expect(t.lease("outbox").pipe((o) => o._tag === "Some" && Duration.toMillis(o.value))).toBe(lease)
          expect(t.names).toContain("failed")
        }))
    })
  }
})
