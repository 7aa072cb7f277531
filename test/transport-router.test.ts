/**
 * TransportRouter on two in-memory backends: dispatch by name, cross-backend fail (send, then ack) and move
 * (send, then remove), configuration errors.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { OutgoingMessage } from "../src/domain/Envelope.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import type { TransportShape } from "../src/services/Transport.js"

const outgoing = (n: number): OutgoingMessage => ({
  messageId: MessageId.make(),
  type: "Test",
  body: JSON.stringify({ _tag: "Test", n }),
  headers: JSON.stringify({ type: "Test" }),
  delayMs: 0
})

/** A backend serving only `broker`, whose failures belong elsewhere (as a broker's go to PostgreSQL). */
const brokerLike = Effect.map(MemoryTransport.make({ transports: { broker: { failureTransport: "broker-dlq" } } }), (m) => ({
  shape: {
    ...m,
    names: ["broker"],
    failureTransport: (name: string) => (name === "broker" ? Option.some("failed") : Option.none())
  } satisfies TransportShape,
  memory: m
}))

describe("TransportRouter", () => {
  it.effect("serves each transport from its backend; fail and move cross backends without losing the message", () =>
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

      const [claimed] = yield* t.claim("broker", 1)
      yield* t.fail("broker", claimed!.id, { headers: `{"type":"Test","failed":1}`, message: claimed! })
      expect(yield* broker.memory.messagesOf("broker")).toEqual([])
      const [failed] = yield* db.messagesOf("failed")
      expect(failed).toMatchObject({ messageId: sent.messageId, body: sent.body, headers: `{"type":"Test","failed":1}` })
      expect(yield* t.stats("broker")).toMatchObject({ failed: 1 })

      // failed:retry — back to the broker, same message id, removed from the failure transport.
      expect(yield* t.move("failed", failed!.id, { to: "broker", headers: `{"type":"Test"}` })).toBe(true)
      expect(yield* db.messagesOf("failed")).toEqual([])
      const [back] = yield* t.claim("broker", 1)
      expect(back).toMatchObject({ messageId: sent.messageId, body: sent.body, headers: `{"type":"Test"}` })
      expect(yield* t.move("failed", "999", { to: "broker", headers: "{}" })).toBe(false)

      // Without the message, a cross-backend fail cannot send it: a TransportError, the original stays.
      const error = yield* Effect.flip(t.fail("broker", back!.id, { headers: "{}" }))
      expect(error._tag).toBe("TransportError")
      expect((yield* Effect.flip(t.claim("nope", 1)))._tag).toBe("UnknownTransportError")
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
