/**
 * TransportRouter on in-memory backends: dispatch by name, one session per backend, cross-backend fail (send,
 * then ack) and move (send, then remove), capabilities per name, unknown names, configuration errors.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as TestClock from "effect/TestClock"
import * as Headers from "../src/domain/Headers.js"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import type { Session } from "../src/services/Transport.js"
import type { TransportBackend } from "../src/services/TransportAdmin.js"
import { numbers, outgoing } from "./support/messages.js"

/** A backend serving only `broker`, whose failures belong elsewhere (as a broker's go to PostgreSQL). */
const brokerLike = Effect.map(
  MemoryTransport.make({ transports: { broker: { failureTransport: "broker-dlq" } } }),
  (m) => ({
    shape: {
      ...m,
      names: ["broker"],
      failureTransport: (name: string) => (name === "broker" ? Option.some("failed") : Option.none()),
      capabilities: (name: string) => (name === "broker" ? m.capabilities(name) : Option.none())
    } satisfies TransportBackend,
    memory: m
  })
)

const headers = (patch: Partial<Headers.Headers> = {}) => new Headers.Headers({ type: "Test", ...patch })

const claimAll = (session: Session, name: string) => Effect.map(session.claim(name, 10, []), (c) => c.messages)

describe("TransportRouter", () => {
  it.scoped("serves each transport from its backend; fail and move cross backends without losing the message", () =>
    Effect.gen(function*() {
      const db = yield* MemoryTransport.make()
      const broker = yield* brokerLike
      const t = yield* TransportRouter.make(db, broker.shape)
      expect([...t.names].sort()).toEqual(["broker", "failed", "outbox"])
      const sent = outgoing(1)
      yield* t.send("broker", [sent])
      yield* t.send("outbox", [outgoing(2)])
      expect((yield* broker.memory.messagesOf("broker")).length).toBe(1)
      expect((yield* db.messagesOf("outbox")).length).toBe(1)

      const session = yield* t.open(["broker", "outbox"])
      expect(session.transports).toEqual(["broker", "outbox"])
      const [claimed] = yield* claimAll(session, "broker")
      expect(numbers(yield* claimAll(session, "outbox"))).toEqual([2])
      // The failure transport is on the other backend: sent there first (same id, body; the new headers), then acked.
      const failHeaders = headers({ originalTransport: "broker" })
      yield* t.fail(claimed!, failHeaders)
      expect(yield* broker.memory.messagesOf("broker")).toEqual([])
      const [failed] = yield* db.messagesOf("failed")
      expect(failed).toMatchObject({ messageId: sent.messageId, body: sent.body, headers: Headers.encode(failHeaders) })
      expect(yield* t.stats("broker")).toMatchObject({ failed: 1 })

      // failed:retry — back to the broker, same message id, removed from the failure transport.
      expect(yield* t.move("failed", failed!.id, { to: "broker", headers: headers() })).toBe(true)
      expect(yield* db.messagesOf("failed")).toEqual([])
      const [back] = yield* claimAll(session, "broker")
      expect(back).toMatchObject({ messageId: sent.messageId, body: sent.body, headers: Headers.encode(headers()) })
      expect(yield* t.move("failed", "999", { to: "broker", headers: headers() })).toBe(false)

      // On its own backend, fail is the backend's own (in place).
      yield* t.send("outbox", [outgoing(3)])
      const [local] = yield* claimAll(session, "outbox")
      yield* t.fail(local!, headers({ originalTransport: "outbox" }))
      expect((yield* db.messagesOf("failed")).map((m) => m.id)).toEqual([local!.id])
    }))

  it.scoped("retry, ack, release and keepalive go to the backend of the message's transport", () =>
    Effect.gen(function*() {
      const db = yield* MemoryTransport.make()
      const broker = yield* brokerLike
      const t = yield* TransportRouter.make(db, broker.shape)
      const session = yield* t.open(["broker"])
      yield* t.send("broker", [outgoing(1), outgoing(2), outgoing(3)])
      const [a, b, c] = yield* claimAll(session, "broker")
      yield* t.retry(a!, { delay: Duration.seconds(5), headers: headers() })
      yield* t.ack("broker", [b!.id])
      yield* t.keepalive("broker", [c!.id])
      yield* t.release("broker", [c!.id])
      expect(numbers(yield* claimAll(session, "broker"))).toEqual([3])
      yield* TestClock.adjust("5 seconds")
      expect(numbers(yield* claimAll(session, "broker"))).toEqual([1])
      expect(t.lease("broker")).toEqual(broker.shape.lease("broker"))
    }))

  it.scoped("a session waits on every backend's hints", () =>
    Effect.gen(function*() {
      const db = yield* MemoryTransport.make()
      const broker = yield* brokerLike
      const t = yield* TransportRouter.make(db, broker.shape)
      const session = yield* t.open(["outbox", "broker"])
      for (const name of ["broker", "outbox"]) {
        const waiting = yield* Effect.fork(session.wait(Duration.minutes(1)))
        yield* Effect.yieldNow()
        yield* t.send(name, [outgoing(1)])
        yield* Fiber.join(waiting)
      }
      expect(numbers(yield* claimAll(session, "broker"))).toEqual([1])
      expect(numbers(yield* claimAll(session, "outbox"))).toEqual([1])
    }))

  it.scoped("capabilities come from the backend serving the name; a fail that crosses backends makes copies", () =>
    Effect.gen(function*() {
      const db = yield* MemoryTransport.make()
      const broker = yield* brokerLike
      const t = yield* TransportRouter.make(db, broker.shape)
      expect(t.capabilities("outbox")).toEqual(db.capabilities("outbox"))
      expect(t.capabilities("broker")).toEqual(
        Option.map(broker.memory.capabilities("broker"), (c) => ({ ...c, stableIds: false, orderingKeys: false }))
      )
      expect(t.capabilities("nope")).toEqual(Option.none())
      expect(t.failureTransport("broker")).toEqual(Option.some("failed"))
      expect(t.failureTransport("nope")).toEqual(Option.none())
    }))

  it.scoped("an unknown name is an UnknownTransportError in every method, and open fails at once", () =>
    Effect.gen(function*() {
      const db = yield* MemoryTransport.make()
      const broker = yield* brokerLike
      const t = yield* TransportRouter.make(db, broker.shape)
      yield* t.send("outbox", [outgoing(1)])
      const session = yield* t.open(["outbox"])
      const [claimed] = yield* claimAll(session, "outbox")
      const elsewhere = { ...claimed!, transport: "nope" }
      const calls: ReadonlyArray<Effect.Effect<unknown, { readonly _tag: string }, Scope.Scope>> = [
        t.send("nope", [outgoing(1)]),
        t.open(["outbox", "nope"]),
        t.ack("nope", ["1"]),
        t.retry(elsewhere, { delay: Duration.zero, headers: headers() }),
        t.fail(elsewhere, headers()),
        t.keepalive("nope", ["1"]),
        t.release("nope", ["1"]),
        t.list("nope", { max: 1 }),
        t.find("nope", "1"),
        t.remove("nope", ["1"]),
        t.move("nope", "1", { to: "outbox", headers: headers() }),
        t.move("outbox", claimed!.id, { to: "nope", headers: headers() }),
        t.stats("nope"),
        // Known, but not a transport of this session.
        session.claim("broker", 1, [])
      ]
      for (const call of calls) {
        const error = yield* Effect.flip(call)
        expect(error._tag).toBe("UnknownTransportError")
      }
      expect((yield* db.messagesOf("outbox")).length).toBe(1)
    }))

  it.effect("refuses two backends serving one name, and a failure transport nobody serves", () =>
    Effect.gen(function*() {
      const a = yield* MemoryTransport.make()
      const b = yield* MemoryTransport.make()
      expect((yield* Effect.flip(TransportRouter.make(a, b))).message).toMatch(/Two transport backends serve/)
      const broker = yield* brokerLike
      expect((yield* Effect.flip(TransportRouter.make(broker.shape))).message).toMatch(
        /The failure transport failed of broker is served by no backend/
      )
    }))
})
