import * as Schema from "effect/Schema"
import type { OutgoingMessage } from "../../src/domain/Envelope.js"
import * as Headers from "../../src/domain/Headers.js"
import * as MessageId from "../../src/domain/MessageId.js"

export class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
  orderId: Schema.Int,
  amount: Schema.Number
}) {}

export class OrderShipped extends Schema.TaggedClass<OrderShipped>()("OrderShipped", {
  orderId: Schema.Int,
  carrier: Schema.NonEmptyString
}) {}

/**
 * A raw message for a transport: type `Test`, body `{"_tag":"Test","n":n}`, headers `{"type":"Test"}`, a fresh
 * message id, ready after `delayMs`.
 */
export const outgoing = (n: number, delayMs = 0): OutgoingMessage => ({
  messageId: MessageId.make(),
  type: "Test",
  body: JSON.stringify({ _tag: "Test", n }),
  headers: Headers.encode(new Headers.Headers({ type: "Test" })),
  delayMs
})

/** The `n` of each message made by `outgoing`, in order. */
export const numbers = (messages: ReadonlyArray<{ readonly body: string }>): Array<number> =>
  messages.map((m) => JSON.parse(m.body).n as number)
