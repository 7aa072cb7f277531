/**
 * The demo: pay orders, each `UPDATE orders` + `Outbox.dispatch(OrderPaid)` in one transaction (a share
 * rolled back on purpose), run the worker until the queue is drained, and prove the contract.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as PgIdempotencyStore from "../layers/PgIdempotencyStore.js"
import * as PgTransport from "../layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../layers/ScheduleRetryStrategy.js"
import * as Handlers from "../services/Handlers.js"
import { IdempotencyStore } from "../services/IdempotencyStore.js"
import * as Outbox from "../services/Outbox.js"
import * as Headers from "../domain/Headers.js"
import * as Message from "../domain/Message.js"
import type { MessageId } from "../domain/MessageId.js"
import { Transport } from "../services/Transport.js"
import { TransportAdmin } from "../services/TransportAdmin.js"
import * as Worker from "./worker/Worker.js"

/**
 * The event the demo announces.
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
 * The demo's handler: issue an invoice for each paid order — an idempotent consumer, so a redelivered
 * message never issues a second invoice (the invoice and its dedupe record commit together).
 *
 * @since 0.1.0
 * @category layers
 */
export const handlers = Handlers.layer([
  Handlers.handler(OrderPaid, (paid, envelope) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql`INSERT INTO demo_invoices (order_id, message_id) VALUES (${paid.orderId}, ${envelope.messageId})`).pipe(
        Effect.asVoid
      ), { name: "issue-invoice", idempotent: true })
])

class RolledBackOnPurpose extends Schema.TaggedError<RolledBackOnPurpose>()("RolledBackOnPurpose", {}) {}

/**
 * Runs the demo on the `SqlClient` in context.
 *
 * @since 0.1.0
 * @category programs
 */
export const run = (options: DemoOptions): Effect.Effect<DemoSummary, unknown, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const say = (line: string) => (options.json ? Console.error(line) : Console.log(line))

    // Schema: the outbox table through its migrations, and the demo's business tables.
    yield* sql`DROP TABLE IF EXISTS demo_invoices, demo_orders`
    yield* sql`CREATE TABLE demo_orders (id int PRIMARY KEY, amount_cents int NOT NULL, paid_at timestamptz)`
    yield* sql`CREATE TABLE demo_invoices (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id int NOT NULL, message_id uuid NOT NULL,
      issued_at timestamptz NOT NULL DEFAULT now())`
    yield* sql`INSERT INTO demo_orders (id, amount_cents)
      SELECT g, 100 + (g * 37) % 9900 FROM generate_series(1, ${options.orders}) g`

    const stack = Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layerDefault).pipe(
      Layer.provideMerge(PgIdempotencyStore.layer(idempotencyOptions)),
      Layer.provideMerge(PgTransport.layer(transportOptions))
    )

    return yield* Effect.gen(function*() {
      const admin = yield* TransportAdmin
      const store = yield* IdempotencyStore
      yield* admin.setup
      yield* store.setup
      // A fresh start: whatever an earlier run left in the outbox and the idempotency store goes.
      for (const name of ["outbox", "failed"]) {
        const left = yield* admin.list(name, { max: Number.MAX_SAFE_INTEGER })
        for (let i = 0; i < left.length; i += 1000) yield* admin.remove(name, left.slice(i, i + 1000).map((m) => m.id))
      }
      yield* store.purge({ olderThan: 0 })
      yield* say(
        `effect-outbox demo: paying ${options.orders} orders with ${options.producers} producers, ` +
          `${Math.round(options.rollbackShare * 100)}% rolled back on purpose`
      )

      let committed = 0
      let rolledBack = 0
      const pay = (orderId: number) =>
        sql.withTransaction(Effect.gen(function*() {
          const [order] = yield* sql<{ amount_cents: number }>`
            UPDATE demo_orders SET paid_at = now() WHERE id = ${orderId} AND paid_at IS NULL RETURNING amount_cents`
          yield* Outbox.dispatch(new OrderPaid({ orderId, amountCents: order!.amount_cents }))
          // A deterministic share of payments fails after the dispatch: its message must vanish with it.
          if (((orderId * 7919) % 1000) / 1000 < options.rollbackShare) return yield* new RolledBackOnPurpose()
        })).pipe(
          Effect.tap(() => Effect.sync(() => committed++)),
          Effect.catchTag("RolledBackOnPurpose", () => Effect.sync(() => rolledBack++))
        )

      const ids = Array.from({ length: options.orders }, (_, i) => i + 1)
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], batchSize: 100, sleep: "20 millis" }))
      const producers = yield* Effect.fork(Effect.forEach(ids, pay, { concurrency: options.producers, discard: true }))

      const counts = Effect.gen(function*() {
        const stats = yield* admin.stats("outbox")
        const [row] = yield* sql<{ invoices: number }>`SELECT count(*)::int AS invoices FROM demo_invoices`
        return { pending: stats.ready + stats.delayed + stats.inFlight, failed: stats.failed, invoices: row!.invoices }
      })
      const progress = Effect.gen(function*() {
        const c = yield* counts
        yield* say(
          `  paid ${String(committed).padStart(6)} · rolled back ${String(rolledBack).padStart(5)} · ` +
            `invoices ${String(c.invoices).padStart(6)} · pending ${String(c.pending).padStart(5)} · failed ${c.failed}`
        )
        return c
      })
      const ticker = yield* Effect.fork(progress.pipe(Effect.repeat(Schedule.spaced("300 millis"))))
      yield* Fiber.join(producers)
      // Drained: every producer finished and nothing is left in the queue.
      yield* counts.pipe(Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (c) => c.pending === 0 }))
      yield* Fiber.interrupt(worker)
      yield* Fiber.interrupt(ticker)
      yield* progress

      // Deliver a share of the handled messages again, as a crash between the invoice and the ack would:
      // same message id, same body. The idempotent consumer must skip every one of them.
      const picked = yield* sql<{ message_id: string; id: number; amount_cents: number }>`
        SELECT i.message_id::text AS message_id, o.id, o.amount_cents
        FROM demo_invoices i JOIN demo_orders o ON o.id = i.order_id
        WHERE (o.id * 4999) % 1000 < ${Math.round(options.redeliverShare * 1000)}`
      const again = yield* Effect.forEach(picked, (row) =>
        Effect.map(
          Message.encodeBody(new OrderPaid({ orderId: row.id, amountCents: row.amount_cents })),
          (body) => ({
            messageId: row.message_id as MessageId,
            type: "OrderPaid",
            body,
            headers: Headers.encode(new Headers.Headers({ type: "OrderPaid" })),
            delayMs: 0
          })
        ))
      yield* (yield* Transport).send("outbox", again)
      const redelivered = yield* Worker.run({ transports: ["outbox"], batchSize: 100, stopWhenEmpty: true })
      yield* say(
        `  delivered ${again.length} handled messages again on purpose: ${redelivered.handled} skipped by the ` +
          `idempotent invoice consumer`
      )

      const [result] = yield* sql<{
        handled: number
        total: number
        orders: number
        rolled_back_handled: number
      }>`
        SELECT count(DISTINCT message_id)::int AS handled, count(*)::int AS total,
               count(DISTINCT order_id)::int AS orders,
               (SELECT count(*)::int FROM demo_invoices i JOIN demo_orders o ON o.id = i.order_id
                 WHERE o.paid_at IS NULL) AS rolled_back_handled
        FROM demo_invoices`
      const summary: DemoSummary = {
        committed,
        rolledBack,
        handled: result!.handled,
        failed: (yield* admin.stats("outbox")).failed,
        duplicates: result!.total - result!.handled
      }
      const ok = summary.handled === summary.committed && summary.failed === 0 && summary.duplicates === 0 &&
        result!.rolled_back_handled === 0 && result!.orders === summary.committed &&
        result!.total === summary.committed && redelivered.handled === again.length
      yield* say("")
      yield* say("Summary")
      yield* say(`  committed payments             ${summary.committed}`)
      yield* say(`  rolled back on purpose         ${summary.rolledBack}`)
      yield* say(`  messages handled               ${summary.handled}`)
      yield* say(`  failed (failure queue)         ${summary.failed}`)
      yield* say(`  handled twice (duplicates)     ${summary.duplicates}`)
      yield* say(`  rolled-back orders handled     ${result!.rolled_back_handled}`)
      yield* say(`  redelivered on purpose         ${again.length}`)
      yield* say(`  invoices issued                ${result!.total} (for ${result!.orders} orders)`)
      yield* say(
        ok
          ? "  ✔ every committed payment was announced and invoiced exactly once; no rolled-back one ever was"
          : "  ✘ CONTRACT BROKEN"
      )
      if (options.json) yield* Console.log(JSON.stringify(summary))
      if (!ok) return yield* Effect.fail(new Error("The demo found a broken guarantee"))
      return summary
    }).pipe(Effect.provide(stack))
  })
