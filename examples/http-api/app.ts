/**
 * The application of the HTTP example: its message, its invoice service, its handlers, the outbox's layers, the
 * paying transaction and the worker. `main.ts` serves it over HTTP; the README's "Using it" is this file.
 */
// #region using-it
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Config, Context, Effect, Layer, Schema } from "effect"
import {
  Handlers,
  Outbox,
  PgTransport,
  ScheduleRetryStrategy,
  UnrecoverableMessageHandlingError,
  Worker
} from "effect-outbox"

// 1. Messages are Schema.TaggedClasses: the tag is the type, the schema encodes the body.
export class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
  orderId: Schema.Int,
  amountCents: Schema.Int
}) {}

// 2. A service the handler uses: one invoice per order, keyed by the message id.
export class Invoices extends Context.Tag("Invoices")<Invoices, {
  readonly issue: (orderId: number, messageId: string) => Effect.Effect<void, SqlError.SqlError>
}>() {
  static readonly layer = Layer.effect(
    Invoices,
    Effect.map(SqlClient.SqlClient, (sql) => ({
      issue: (orderId, messageId) =>
        Effect.asVoid(sql`INSERT INTO invoices (order_id, message_id) VALUES (${orderId}, ${messageId})`)
    }))
  )
  static readonly issue = (orderId: number, messageId: string) =>
    Effect.flatMap(Invoices, (invoices) => invoices.issue(orderId, messageId))
}

// 3. Handlers: the error channel decides the outcome.
export const handlers = Handlers.layer([
  Handlers.handler(OrderPaid, (paid, envelope) =>
    paid.amountCents < 0
      ? Effect.fail(new UnrecoverableMessageHandlingError({ message: "negative amount" }))
      : Invoices.issue(paid.orderId, envelope.messageId))
])

// 4. Layers: PostgreSQL client → transport → outbox, retry strategy, handlers and their services.
export const Database = PgClient.layerConfig({ url: Config.redacted("DATABASE_URL") })
export const OutboxLive = Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layer()).pipe(
  Layer.provide(Invoices.layer),
  Layer.provideMerge(PgTransport.layer({ table: "messenger_messages" })),
  Layer.provideMerge(Database)
)

// 5. Producer: dispatch inside the business transaction.
export class OrderNotFound extends Schema.TaggedError<OrderNotFound>()("OrderNotFound", { orderId: Schema.Int }) {}

export const pay = (orderId: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.withTransaction(Effect.gen(function*() {
      const rows = yield* sql<{ amount_cents: number }>`
        UPDATE orders SET paid_at = now() WHERE id = ${orderId} AND paid_at IS NULL RETURNING amount_cents`
      if (rows.length === 0) return yield* new OrderNotFound({ orderId })
      yield* Outbox.dispatch(new OrderPaid({ orderId, amountCents: rows[0]!.amount_cents })) // same transaction
    }))
  })

// 6. Worker: a scoped fiber beside the HTTP server. Closing the scope (SIGTERM/SIGINT under
//    NodeRuntime.runMain) lets its in-flight messages finish, then the process exits 0.
export const WorkerLive = Layer.scopedDiscard(
  Effect.forkScoped(Worker.run({ transports: ["outbox"], onEvent: logOutcome }))
)
// #endregion

/** One log line per outcome (`handled OrderPaid <message id>`, …): the examples' runner waits on them. */
function logOutcome(event: Worker.WorkerEvent): Effect.Effect<void> {
  switch (event._tag) {
    case "Handled":
      return Effect.logInfo(`handled ${event.type} ${event.messageId}`)
    case "Retried":
      return Effect.logInfo(`retried ${event.type} ${event.messageId} in ${event.delayMs}ms: ${event.error.message}`)
    case "Failed":
      return Effect.logInfo(`failed ${event.type} ${event.messageId}: ${event.error.message}`)
    default:
      return Effect.void
  }
}
