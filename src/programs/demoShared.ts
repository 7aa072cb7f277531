/**
 * What the two demos share: the event, the options and summary, the demo's tables and stores, the payment
 * (an `UPDATE` and an `Outbox.dispatch` in one transaction, a share rolled back on purpose), the idempotent
 * invoice handler, the counts — through `TransportAdmin`, never SQL on the library's table — and the summary.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { type OutgoingMessage, resend } from "../domain/Envelope.js"
import * as Headers from "../domain/Headers.js"
import * as Message from "../domain/Message.js"
import type { MessageId } from "../domain/MessageId.js"
import type * as PgIdempotencyStore from "../layers/PgIdempotencyStore.js"
import type * as PgTransport from "../layers/PgTransport.js"
import * as Handlers from "../services/Handlers.js"
import * as Outbox from "../services/Outbox.js"
import { TransportAdmin } from "../services/TransportAdmin.js"

/**
 * The event the demos announce.
 *
 * @since 0.1.0
 * @category messages
 */
export class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
  orderId: Schema.Int,
  amountCents: Schema.Int
}) {}

/**
 * Demo options.
 *
 * @since 0.1.0
 * @category models
 */
export interface DemoOptions {
  readonly orders: number
  /** Share of payments rolled back on purpose, in [0, 1]. */
  readonly rollbackShare: number
  readonly producers: number
  /** Share of handled messages delivered again on purpose (as after a crash before the ack), in [0, 1]. */
  readonly redeliverShare: number
  readonly json: boolean
}

/**
 * The summary, as printed with `--json`.
 *
 * @since 0.1.0
 * @category models
 */
export interface DemoSummary {
  readonly committed: number
  readonly rolledBack: number
  readonly handled: number
  readonly failed: number
  readonly duplicates: number
}

/**
 * The bounds of the demo's options: what `checkOptions` accepts.
 *
 * @since 0.1.0
 * @category constants
 */
export const optionBounds = {
  orders: { min: 1, max: 1_000_000 },
  producers: { min: 1, max: 50 },
  rollbackShare: { min: 0, max: 1 },
  redeliverShare: { min: 0, max: 1 }
} as const

/**
 * Options the demo cannot run with: an order count or producer count out of bounds, a share outside [0, 1].
 *
 * @since 0.1.0
 * @category errors
 */
export class DemoOptionsError extends Schema.TaggedError<DemoOptionsError>()("DemoOptionsError", {
  message: Schema.String
}) {}

/**
 * What is wrong with a value of an option, or `undefined`: counts must be integers, every value within its bounds.
 *
 * @since 0.1.0
 * @category validation
 */
export const optionProblem = (name: keyof typeof optionBounds, flag: string, value: number): string | undefined => {
  const { max, min } = optionBounds[name]
  const integer = name === "orders" || name === "producers"
  if ((integer && !Number.isInteger(value)) || !(value >= min && value <= max)) {
    return `${flag} must be ${integer ? "an integer" : "a number"} from ${min} to ${max}, got ${value}`
  }
  return undefined
}

/**
 * The options, checked: a `DemoOptionsError` naming the first one out of bounds.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkOptions = (options: DemoOptions): Effect.Effect<DemoOptions, DemoOptionsError> => {
  const problem = optionProblem("orders", "orders", options.orders) ??
    optionProblem("producers", "producers", options.producers) ??
    optionProblem("rollbackShare", "rollbackShare", options.rollbackShare) ??
    optionProblem("redeliverShare", "redeliverShare", options.redeliverShare)
  return problem === undefined ? Effect.succeed(options) : Effect.fail(new DemoOptionsError({ message: problem }))
}

/** The demo's own tables, apart from any application tables. */
const outboxTable = "demo_outbox"

/**
 * The demo's transport options (its own table, `demo_outbox`).
 *
 * @since 0.1.0
 * @category layers
 */
export const transportOptions: PgTransport.Options = { table: outboxTable }

/**
 * The demo's idempotency store options (its own table, `demo_idempotency`).
 *
 * @since 0.1.0
 * @category layers
 */
export const idempotencyOptions: PgIdempotencyStore.Options = { table: "demo_idempotency", messagesTable: outboxTable }

/**
 * The business tables each demo run drops and creates afresh.
 *
 * @since 0.1.0
 * @category constants
 */
export const recreatedTables = ["demo_orders", "demo_invoices"] as const

/**
 * What a demo run does to a database, as the warning printed before it touches one of yours says it.
 *
 * @since 0.1.0
 * @category constants
 */
export const databaseWarning = `it drops and recreates the tables ${recreatedTables.join(" and ")}, deletes every ` +
  `message in ${outboxTable}, and creates ${outboxTable} and demo_idempotency when missing`

/**
 * The demo's business tables, created afresh: `demo_orders` (`orders` unpaid orders) and `demo_invoices`.
 *
 * @since 0.1.0
 * @category programs
 */
export const createTables = (orders: number) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    yield* sql`DROP TABLE IF EXISTS demo_invoices, demo_orders`
    yield* sql.onDialectOrElse({
      mysql: () =>
        Effect.gen(function*() {
          yield* sql`CREATE TABLE demo_orders (id INT PRIMARY KEY, amount_cents INT NOT NULL, paid_at DATETIME(6) NULL)`
          yield* sql`CREATE TABLE demo_invoices (
            id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id INT NOT NULL, message_id CHAR(36) NOT NULL,
            issued_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`
          for (let from = 1; from <= orders; from += 1000) {
            const ids = Array.from({ length: Math.min(1000, orders - from + 1) }, (_, i) => from + i)
            yield* sql`INSERT INTO demo_orders (id, amount_cents) VALUES ${
              sql.csv(ids.map((id) => sql`(${id}, ${100 + (id * 37) % 9900})`))
            }`
          }
        }),
      orElse: () =>
        Effect.gen(function*() {
          yield* sql`CREATE TABLE demo_orders (id int PRIMARY KEY, amount_cents int NOT NULL, paid_at timestamptz)`
          yield* sql`CREATE TABLE demo_invoices (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id int NOT NULL, message_id uuid NOT NULL,
            issued_at timestamptz NOT NULL DEFAULT now())`
          yield* sql`INSERT INTO demo_orders (id, amount_cents)
            SELECT g, 100 + (g * 37) % 9900 FROM generate_series(1, ${orders}) g`
        })
    })
  })

/**
 * The invoice consumer: one invoice per paid order, idempotent, so a redelivered message never issues a second
 * invoice (the invoice and its dedupe record commit together). `fromTransport` binds it to one transport.
 *
 * @since 0.1.0
 * @category handlers
 */
export const issueInvoice = (options: { readonly fromTransport?: string } = {}) =>
  Handlers.handler(
    OrderPaid,
    (paid, envelope) =>
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql`INSERT INTO demo_invoices (order_id, message_id) VALUES (${paid.orderId}, ${envelope.messageId})`).pipe(
          Effect.asVoid
        ),
    { name: "issue-invoice", idempotent: true, ...options }
  )

/**
 * A payment that the demo rolls back on purpose, after its dispatch: its message must vanish with it.
 *
 * @since 0.1.0
 * @category errors
 */
export class RolledBackOnPurpose extends Schema.TaggedError<RolledBackOnPurpose>()("RolledBackOnPurpose", {}) {}

/**
 * The payments: `pay(orderId)` marks the order paid and dispatches `OrderPaid` in one transaction; a
 * deterministic `rollbackShare` of them fails after the dispatch and is rolled back. Counts both.
 *
 * @since 0.1.0
 * @category programs
 */
export const payments = (rollbackShare: number) => {
  const counts = { committed: 0, rolledBack: 0 }
  const pay = (orderId: number) =>
    Effect.gen(function*() {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      yield* sql.withTransaction(Effect.gen(function*() {
        const [order] = yield* sql.onDialectOrElse({
          // No UPDATE … RETURNING: the row is read back inside the transaction.
          mysql: () =>
            Effect.zipRight(
              sql`UPDATE demo_orders SET paid_at = UTC_TIMESTAMP(6) WHERE id = ${orderId} AND paid_at IS NULL`,
              sql<{ amount_cents: number }>`SELECT amount_cents FROM demo_orders WHERE id = ${orderId}`
            ),
          orElse: () =>
            sql<{ amount_cents: number }>`UPDATE demo_orders SET paid_at = now()
              WHERE id = ${orderId} AND paid_at IS NULL RETURNING amount_cents`
        })
        yield* Outbox.dispatch(new OrderPaid({ orderId, amountCents: order!.amount_cents }))
        if (((orderId * 7919) % 1000) / 1000 < rollbackShare) return yield* new RolledBackOnPurpose()
      })).pipe(
        Effect.tap(() => Effect.sync(() => counts.committed++)),
        Effect.catchTag("RolledBackOnPurpose", () => Effect.sync(() => counts.rolledBack++))
      )
    })
  return { counts, pay }
}

/**
 * Removes every message of the transports (a previous run's leftovers), through `TransportAdmin`.
 *
 * @since 0.1.0
 * @category programs
 */
export const clearTransports = (transports: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const admin = yield* TransportAdmin
    for (const transport of transports) {
      while (true) {
        const stored = yield* admin.list(transport, { max: 1000 })
        if (stored.length === 0) break
        yield* admin.remove(transport, stored.map((m) => m.id))
      }
    }
  })

/**
 * How many messages wait in a transport (ready, delayed or held by a worker) and in its failure transport.
 *
 * @since 0.1.0
 * @category programs
 */
export const queueCounts = (transport: string) =>
  Effect.flatMap(TransportAdmin, (admin) => admin.stats(transport)).pipe(
    Effect.map((s) => ({ pending: s.ready + s.delayed + s.inFlight, failed: s.failed }))
  )

/**
 * The invoices issued: distinct messages, all rows, distinct orders, and invoices of rolled-back orders.
 *
 * @since 0.1.0
 * @category programs
 */
export const invoiceCounts = Effect.gen(function*() {
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  // Counts arrive as numbers or as text, by dialect.
  type Count = number | string
  const [row] = yield* sql<{ handled: Count; total: Count; orders: Count; rolled_back_handled: Count }>`
    SELECT COUNT(DISTINCT message_id) AS handled, COUNT(*) AS total,
           COUNT(DISTINCT order_id) AS orders,
           (SELECT COUNT(*) FROM demo_invoices i JOIN demo_orders o ON o.id = i.order_id
             WHERE o.paid_at IS NULL) AS rolled_back_handled
    FROM demo_invoices`
  return {
    handled: Number(row!.handled),
    total: Number(row!.total),
    orders: Number(row!.orders),
    rolledBackHandled: Number(row!.rolled_back_handled)
  }
})

/**
 * Copies of a share of the invoiced messages — same message id, same body, headers of their type only — as
 * a crash between the handler and the ack (or the broker's confirm and the outbox delete) would deliver them
 * again. `spread` picks which orders (a multiplier: `(orderId * spread) % 1000 < share * 1000`). Send them with
 * `Transport.send`.
 *
 * @since 0.1.0
 * @category programs
 */
export const invoicedAgain = (share: number, spread: number) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const picked = yield* sql<{ message_id: string; id: number; amount_cents: number }>`
      SELECT i.message_id AS message_id, o.id, o.amount_cents FROM demo_invoices i
      JOIN demo_orders o ON o.id = i.order_id
      WHERE (o.id * ${spread}) % 1000 < ${Math.round(share * 1000)} ORDER BY o.id`
    return yield* Effect.forEach(picked, (row) =>
      Effect.map(
        Message.encodeBody(new OrderPaid({ orderId: row.id, amountCents: row.amount_cents })),
        (body): OutgoingMessage =>
          resend({ messageId: row.message_id as MessageId, body }, new Headers.Headers({ type: "OrderPaid" }))
      ))
  })

/**
 * Prints a summary: its lines (label, value), then the verdict; with `json`, the summary as one JSON line
 * on stdout (the rest goes to stderr). Fails when the verdict is negative.
 *
 * @since 0.1.0
 * @category programs
 */
export const printSummary = <S extends DemoSummary>(options: {
  readonly json: boolean
  readonly summary: S
  readonly lines: ReadonlyArray<readonly [label: string, value: string | number]>
  readonly ok: boolean
  readonly okLine: string
}): Effect.Effect<S, Error> =>
  Effect.gen(function*() {
    const say = sayer(options.json)
    yield* say("")
    yield* say("Summary")
    for (const [label, value] of options.lines) yield* say(`  ${label.padEnd(31)}${value}`)
    yield* say(options.ok ? `  ✔ ${options.okLine}` : "  ✘ CONTRACT BROKEN")
    if (options.json) yield* Console.log(JSON.stringify(options.summary))
    if (!options.ok) return yield* Effect.fail(new Error("The demo found a broken guarantee"))
    return options.summary
  })

/**
 * A line of progress: to stdout, or to stderr when stdout is kept for the JSON summary.
 *
 * @since 0.1.0
 * @category programs
 */
export const sayer = (json: boolean) => (line: string): Effect.Effect<void> =>
  json ? Console.error(line) : Console.log(line)
