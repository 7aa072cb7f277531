/**
 * Handler shapes an application writes, compiled by `examples/packed/check.ts` against the packed package under
 * strict settings (and by the repository's `tsc` against the sources): a conditional of a typed failure and a
 * typed-error effect, an effect that succeeds with rows, an idempotent handler and one with its own timeout.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql"
import { Context, Effect, Layer, Schema } from "effect"
import { Handlers, MemoryIdempotencyStore, UnrecoverableMessageHandlingError } from "effect-outbox"

export class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
  orderId: Schema.Int,
  amountCents: Schema.Int
}) {}

export class OrderShipped extends Schema.TaggedClass<OrderShipped>()("OrderShipped", { orderId: Schema.Int }) {}

export class Invoices extends Context.Tag("Invoices")<Invoices, {
  readonly issue: (orderId: number) => Effect.Effect<void, SqlError.SqlError>
}>() {}

export const handlers = Handlers.layer([
  // A conditional of a typed failure and an effect with its own error: the handler's error is their union.
  Handlers.handler(OrderPaid, (paid) =>
    paid.amountCents < 0
      ? Effect.fail(new UnrecoverableMessageHandlingError({ message: "negative amount" }))
      : Effect.flatMap(Invoices, (invoices) => invoices.issue(paid.orderId))),
  // An effect that succeeds with rows: the value is ignored.
  Handlers.handler(
    OrderShipped,
    (shipped) =>
      Effect.flatMap(
        SqlClient.SqlClient,
        (sql) => sql<{ readonly id: number }>`SELECT id FROM shipments WHERE order_id = ${shipped.orderId}`
      ),
    { name: "shipments", timeout: "30 seconds" }
  ),
  // Run at most once per message id, with the envelope.
  Handlers.handler(
    OrderPaid,
    (paid, envelope) => Effect.logInfo(`receipt for order ${paid.orderId}, message ${envelope.messageId}`),
    { name: "receipts", idempotent: true }
  )
]).pipe(Layer.provide(MemoryIdempotencyStore.layer()))
