/**
 * The broker demo (`npm start -- --broker`): order paid → outbox (PostgreSQL, same transaction as the
 * payment) → forwarder → RabbitMQ (deleted from the outbox only after the broker confirmed) → a second worker
 * consuming the broker, whose idempotent handler issues the invoice. A share of the forwarded messages is
 * published again on purpose (as a forwarder killed between the confirm and the delete would), and the summary
 * proves one invoice per committed order.
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
import type { OutgoingMessage } from "../domain/Envelope.js"
import type { MessageId } from "../domain/MessageId.js"
import * as AmqpTransport from "../layers/AmqpTransport.js"
import * as PgIdempotencyStore from "../layers/PgIdempotencyStore.js"
import * as PgTransport from "../layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../layers/TransportRouter.js"
import * as Handlers from "../services/Handlers.js"
import { IdempotencyStore } from "../services/IdempotencyStore.js"
import * as Outbox from "../services/Outbox.js"
import { Transport } from "../services/Transport.js"
import * as Demo from "./Demo.js"
import * as Forwarder from "./Forwarder.js"
import * as Worker from "./Worker.js"

/**
 * Options of the broker demo.
 *
 * @since 0.1.0
 * @category models
 */
export interface DemoBrokerOptions extends Demo.DemoOptions {
  /** The RabbitMQ URL. */
  readonly amqpUrl: string
}

/**
 * The summary, as printed with `--json`.
 *
 * @since 0.1.0
 * @category models
 */
export interface DemoBrokerSummary extends Demo.DemoSummary {
  /** Messages the forwarder sent to RabbitMQ (distinct message ids). */
  readonly forwarded: number
  /** Deliveries the consumer received from RabbitMQ, the redelivered ones included. */
  readonly received: number
  /** Messages published to RabbitMQ again on purpose. */
  readonly redelivered: number
  /** Invoices issued. */
  readonly invoices: number
}

/**
 * The broker side of the demo: its own exchange and queue.
 *
 * @since 0.1.0
 * @category layers
 */
export const amqpOptions = (url: string): AmqpTransport.Options => ({
  url,
  exchange: { name: "effect-outbox-demo" },
  transports: { amqp: { queue: "effect-outbox-demo.invoices" } }
})

/**
 * The handlers: the forwarder (outbox → RabbitMQ) and the invoice consumer (RabbitMQ only, idempotent).
 *
 * @since 0.1.0
 * @category layers
 */
export const handlers = Handlers.layer([
  ...Forwarder.handlers([Demo.OrderPaid], { to: "amqp" }),
  Handlers.handler(Demo.OrderPaid, (paid, envelope) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql`INSERT INTO demo_invoices (order_id, message_id) VALUES (${paid.orderId}, ${envelope.messageId})`).pipe(
        Effect.asVoid
      ), { name: "issue-invoice", fromTransport: "amqp", idempotent: true })
])

/**
 * A broker that cannot be reached, described in one line.
 *
 * @since 0.1.0
 * @category errors
 */
export class BrokerUnreachableError extends Schema.TaggedError<BrokerUnreachableError>()("BrokerUnreachableError", {
  message: Schema.String
}) {}

/**
 * Connects to the broker and declares the demo's exchange and queue, or fails with one line.
 *
 * @since 0.1.0
 * @category programs
 */
export const checkBroker = (url: string): Effect.Effect<void, BrokerUnreachableError> =>
  Effect.scoped(Effect.flatMap(AmqpTransport.make(amqpOptions(url)), (amqp) => amqp.setup)).pipe(
    Effect.mapError((error) =>
      new BrokerUnreachableError({
        message: `${error.message.replace(/\s+/g, " ")} (start rabbitmq-server, or set AMQP_URL or --amqp-url)`
      })
    )
  )

class RolledBackOnPurpose extends Schema.TaggedError<RolledBackOnPurpose>()("RolledBackOnPurpose", {}) {}

/**
 * Runs the broker demo on the `SqlClient` in context and the broker at `amqpUrl`.
 *
 * @since 0.1.0
 * @category programs
 */
export const run = (options: DemoBrokerOptions): Effect.Effect<DemoBrokerSummary, unknown, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const say = (line: string) => (options.json ? Console.error(line) : Console.log(line))
    yield* checkBroker(options.amqpUrl)

    yield* sql`DROP TABLE IF EXISTS demo_invoices, demo_orders`
    yield* sql`CREATE TABLE demo_orders (id int PRIMARY KEY, amount_cents int NOT NULL, paid_at timestamptz)`
    yield* sql`CREATE TABLE demo_invoices (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id int NOT NULL, message_id uuid NOT NULL,
      issued_at timestamptz NOT NULL DEFAULT now())`
    yield* sql`INSERT INTO demo_orders (id, amount_cents)
      SELECT g, 100 + (g * 37) % 9900 FROM generate_series(1, ${options.orders}) g`

    const broker = yield* AmqpTransport.make(amqpOptions(options.amqpUrl))
    const pg = yield* PgTransport.make(Demo.transportOptions)
    const transport = yield* TransportRouter.make(pg, broker)
    const stack = Layer.mergeAll(
      Outbox.layer(),
      handlers,
      ScheduleRetryStrategy.layer({ default: { maxRetries: 20, delay: "200 millis", multiplier: 2, maxDelay: "5 seconds" } })
    ).pipe(
      Layer.provideMerge(PgIdempotencyStore.layer(Demo.idempotencyOptions)),
      Layer.provideMerge(Layer.succeed(Transport, transport))
    )

    return yield* Effect.gen(function*() {
      yield* transport.setup
      yield* (yield* IdempotencyStore).setup
      yield* sql`DELETE FROM ${sql(Demo.transportOptions.table!)}`
      yield* sql`DELETE FROM ${sql(Demo.idempotencyOptions.table!)}`
      yield* broker.purge("amqp")
      yield* say(
        `effect-outbox broker demo: paying ${options.orders} orders with ${options.producers} producers, ` +
          `${Math.round(options.rollbackShare * 100)}% rolled back on purpose; outbox → RabbitMQ → invoices`
      )

      let committed = 0
      let rolledBack = 0
      const forwarded = new Set<string>()
      let received = 0
      const pay = (orderId: number) =>
        sql.withTransaction(Effect.gen(function*() {
          const [order] = yield* sql<{ amount_cents: number }>`
            UPDATE demo_orders SET paid_at = now() WHERE id = ${orderId} AND paid_at IS NULL RETURNING amount_cents`
          yield* Outbox.dispatch(new Demo.OrderPaid({ orderId, amountCents: order!.amount_cents }))
          if (((orderId * 7919) % 1000) / 1000 < options.rollbackShare) return yield* new RolledBackOnPurpose()
        })).pipe(
          Effect.tap(() => Effect.sync(() => committed++)),
          Effect.catchTag("RolledBackOnPurpose", () => Effect.sync(() => rolledBack++))
        )

      // Two workers, as two services would run them: the forwarder drains the outbox into RabbitMQ, the
      // consumer drains RabbitMQ into invoices.
      const forwarder = yield* Effect.fork(Worker.run({
        transports: ["outbox"],
        batchSize: 100,
        concurrency: 8,
        sleep: "20 millis",
        onEvent: (event) => Effect.sync(() => event._tag === "Handled" && forwarded.add(event.messageId))
      }))
      const consumer = yield* Effect.fork(Worker.run({
        transports: ["amqp"],
        batchSize: 100,
        concurrency: 4,
        sleep: "20 millis",
        onEvent: (event) => Effect.sync(() => event._tag === "Handled" && received++)
      }))
      const ids = Array.from({ length: options.orders }, (_, i) => i + 1)
      const producers = yield* Effect.fork(Effect.forEach(ids, pay, { concurrency: options.producers, discard: true }))

      const counts = Effect.gen(function*() {
        const [row] = yield* sql<{ pending: number; failed: number; invoices: number }>`
          SELECT (SELECT count(*)::int FROM ${sql(Demo.transportOptions.table!)} WHERE queue_name = 'outbox') AS pending,
                 (SELECT count(*)::int FROM ${sql(Demo.transportOptions.table!)} WHERE queue_name = 'failed') AS failed,
                 (SELECT count(*)::int FROM demo_invoices) AS invoices`
        const atBroker = (yield* transport.stats("amqp")).ready
        return { ...row!, atBroker }
      })
      const progress = Effect.gen(function*() {
        const c = yield* counts
        yield* say(
          `  paid ${String(committed).padStart(6)} · rolled back ${String(rolledBack).padStart(5)} · ` +
            `outbox ${String(c.pending).padStart(5)} · forwarded ${String(forwarded.size).padStart(6)} · ` +
            `at broker ${String(c.atBroker).padStart(5)} · invoices ${String(c.invoices).padStart(6)} · failed ${c.failed}`
        )
        return c
      })
      const ticker = yield* Effect.fork(progress.pipe(Effect.repeat(Schedule.spaced("300 millis"))))
      yield* Fiber.join(producers)
      // Drained: nothing in the outbox, nothing at the broker, every forwarded message received.
      const drained = counts.pipe(
        Effect.repeat({
          schedule: Schedule.spaced("20 millis"),
          until: (c) => c.pending === 0 && c.atBroker === 0 && received >= forwarded.size
        }),
        Effect.timeout("2 minutes")
      )
      yield* drained

      // Publish a share of the forwarded messages again — same message id, same body — as a forwarder killed
      // between the broker's confirm and the outbox delete would. The idempotent consumer must skip them all.
      const picked = yield* sql<{ message_id: string; id: number; amount_cents: number }>`
        SELECT i.message_id::text AS message_id, o.id, o.amount_cents FROM demo_invoices i
        JOIN demo_orders o ON o.id = i.order_id
        WHERE (o.id * 37) % 1000 < ${Math.round(options.redeliverShare * 1000)} ORDER BY o.id`
      const again: Array<OutgoingMessage> = picked.map((row) => ({
        messageId: row.message_id as MessageId,
        type: "OrderPaid",
        body: JSON.stringify({ _tag: "OrderPaid", orderId: row.id, amountCents: row.amount_cents }),
        headers: JSON.stringify({ type: "OrderPaid" }),
        delayMs: 0
      }))
      const receivedBefore = received
      yield* transport.send("amqp", again)
      yield* Effect.sync(() => received).pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (n) => n >= receivedBefore + again.length }),
        Effect.timeout("1 minute")
      )
      yield* Fiber.interrupt(forwarder)
      yield* Fiber.interrupt(consumer)
      yield* Fiber.interrupt(ticker)
      const final = yield* progress
      yield* say(
        `  published ${again.length} forwarded messages again on purpose: ${received - receivedBefore} received, ` +
          `skipped by the idempotent invoice consumer`
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
      const summary: DemoBrokerSummary = {
        committed,
        rolledBack,
        handled: result!.handled,
        failed: final.failed,
        duplicates: result!.total - result!.handled,
        forwarded: forwarded.size,
        received,
        redelivered: again.length,
        invoices: result!.total
      }
      const ok = summary.forwarded === summary.committed && summary.handled === summary.committed &&
        summary.failed === 0 && summary.duplicates === 0 && result!.rolled_back_handled === 0 &&
        result!.orders === summary.committed && summary.invoices === summary.committed &&
        summary.received >= summary.forwarded + summary.redelivered
      yield* say("")
      yield* say("Summary")
      yield* say(`  committed payments             ${summary.committed}`)
      yield* say(`  rolled back on purpose         ${summary.rolledBack}`)
      yield* say(`  forwarded to RabbitMQ          ${summary.forwarded}`)
      yield* say(`  received from RabbitMQ         ${summary.received} (${summary.redelivered} published again on purpose)`)
      yield* say(`  failed (failure queue)         ${summary.failed}`)
      yield* say(`  invoiced twice (duplicates)    ${summary.duplicates}`)
      yield* say(`  rolled-back orders invoiced    ${result!.rolled_back_handled}`)
      yield* say(`  invoices issued                ${summary.invoices} (for ${result!.orders} orders)`)
      yield* say(
        ok
          ? "  ✔ every committed payment went outbox → RabbitMQ → invoice exactly once; no rolled-back one ever did"
          : "  ✘ CONTRACT BROKEN"
      )
      if (options.json) yield* Console.log(JSON.stringify(summary))
      if (!ok) return yield* Effect.fail(new Error("The broker demo found a broken guarantee"))
      return summary
    }).pipe(Effect.provide(stack))
  }).pipe(Effect.scoped)
