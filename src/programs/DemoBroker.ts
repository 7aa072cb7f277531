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
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as AmqpTransport from "../layers/amqp/AmqpTransport.js"
import * as PgIdempotencyStore from "../layers/PgIdempotencyStore.js"
import * as PgTransport from "../layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../layers/TransportRouter.js"
import * as Handlers from "../services/Handlers.js"
import { IdempotencyStore } from "../services/IdempotencyStore.js"
import * as Outbox from "../services/Outbox.js"
import { Transport } from "../services/Transport.js"
import { TransportAdmin } from "../services/TransportAdmin.js"
import * as Shared from "./demoShared.js"
import * as Forwarder from "./Forwarder.js"
import * as Worker from "./worker/Worker.js"

/**
 * Options of the broker demo.
 *
 * @since 0.1.0
 * @category models
 */
export interface DemoBrokerOptions extends Shared.DemoOptions {
  /** The RabbitMQ URL. */
  readonly amqpUrl: string
}

/**
 * The summary, as printed with `--json`.
 *
 * @since 0.1.0
 * @category models
 */
export interface DemoBrokerSummary extends Shared.DemoSummary {
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
  ...Forwarder.handlers([Shared.OrderPaid], { to: "amqp" }),
  Shared.issueInvoice({ fromTransport: "amqp" })
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

/**
 * Runs the broker demo on the `SqlClient` in context and the broker at `amqpUrl`.
 *
 * @since 0.1.0
 * @category programs
 */
export const run = (options: DemoBrokerOptions): Effect.Effect<DemoBrokerSummary, unknown, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    yield* Shared.checkOptions(options)
    const say = Shared.sayer(options.json)
    yield* checkBroker(options.amqpUrl)
    yield* Shared.createTables(options.orders)

    const broker = yield* AmqpTransport.make(amqpOptions(options.amqpUrl))
    const pg = yield* PgTransport.make(Shared.transportOptions)
    const router = yield* TransportRouter.make(pg, broker)
    const stack = Layer.mergeAll(
      Outbox.layer(),
      handlers,
      ScheduleRetryStrategy.layer({
        default: { maxRetries: 20, delay: "200 millis", multiplier: 2, maxDelay: "5 seconds" }
      })
    ).pipe(
      Layer.provideMerge(PgIdempotencyStore.layer(Shared.idempotencyOptions)),
      Layer.provideMerge(
        Layer.succeedContext(Context.make(Transport, router).pipe(Context.add(TransportAdmin, router)))
      )
    )

    return yield* Effect.gen(function*() {
      const admin = yield* TransportAdmin
      const transport = yield* Transport
      yield* admin.setup
      yield* (yield* IdempotencyStore).setup
      yield* Shared.clearTransports(["outbox", "failed"])
      yield* broker.purge("amqp")
      yield* say(
        `effect-outbox broker demo: paying ${options.orders} orders with ${options.producers} producers, ` +
          `${Math.round(options.rollbackShare * 100)}% rolled back on purpose; outbox → RabbitMQ → invoices`
      )

      const { counts: paid, pay } = Shared.payments(options.rollbackShare)
      const forwarded = new Set<string>()
      let received = 0

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
        const outbox = yield* Shared.queueCounts("outbox")
        const atBroker = (yield* admin.stats("amqp")).ready
        const invoices = (yield* Shared.invoiceCounts).total
        return { ...outbox, atBroker, invoices }
      })
      const progress = Effect.gen(function*() {
        const c = yield* counts
        yield* say(
          `  paid ${String(paid.committed).padStart(6)} · rolled back ${String(paid.rolledBack).padStart(5)} · ` +
            `outbox ${String(c.pending).padStart(5)} · forwarded ${String(forwarded.size).padStart(6)} · ` +
            `at broker ${String(c.atBroker).padStart(5)} · invoices ${
              String(c.invoices).padStart(6)
            } · failed ${c.failed}`
        )
        return c
      })
      const ticker = yield* Effect.fork(progress.pipe(Effect.repeat(Schedule.spaced("300 millis"))))
      yield* Fiber.join(producers)
      // Drained: nothing in the outbox, nothing at the broker, every forwarded message received.
      yield* counts.pipe(
        Effect.repeat({
          schedule: Schedule.spaced("20 millis"),
          until: (c) => c.pending === 0 && c.atBroker === 0 && received >= forwarded.size
        }),
        Effect.timeout("2 minutes")
      )

      // Publish a share of the forwarded messages again — same message id, same body — as a forwarder killed
      // between the broker's confirm and the outbox delete would. The idempotent consumer must skip them all.
      const copies = yield* Shared.invoicedAgain(options.redeliverShare, 37)
      const receivedBefore = received
      yield* transport.send("amqp", copies)
      yield* Effect.sync(() => received).pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (n) => n >= receivedBefore + copies.length }),
        Effect.timeout("1 minute")
      )
      yield* Fiber.interrupt(forwarder)
      yield* Fiber.interrupt(consumer)
      yield* Fiber.interrupt(ticker)
      const final = yield* progress
      yield* say(
        `  published ${copies.length} forwarded messages again on purpose: ${received - receivedBefore} received, ` +
          `skipped by the idempotent invoice consumer`
      )

      const invoices = yield* Shared.invoiceCounts
      const summary: DemoBrokerSummary = {
        committed: paid.committed,
        rolledBack: paid.rolledBack,
        handled: invoices.handled,
        failed: final.failed,
        duplicates: invoices.total - invoices.handled,
        forwarded: forwarded.size,
        received,
        redelivered: copies.length,
        invoices: invoices.total
      }
      return yield* Shared.printSummary({
        json: options.json,
        summary,
        lines: [
          ["committed payments", summary.committed],
          ["rolled back on purpose", summary.rolledBack],
          ["forwarded to RabbitMQ", summary.forwarded],
          ["received from RabbitMQ", `${summary.received} (${summary.redelivered} published again on purpose)`],
          ["failed (failure queue)", summary.failed],
          ["invoiced twice (duplicates)", summary.duplicates],
          ["rolled-back orders invoiced", invoices.rolledBackHandled],
          ["invoices issued", `${summary.invoices} (for ${invoices.orders} orders)`]
        ],
        ok: summary.forwarded === summary.committed && summary.handled === summary.committed &&
          summary.failed === 0 && summary.duplicates === 0 && invoices.rolledBackHandled === 0 &&
          invoices.orders === summary.committed && summary.invoices === summary.committed &&
          summary.received >= summary.forwarded + summary.redelivered,
        okLine: "every committed payment went outbox → RabbitMQ → invoice exactly once; no rolled-back one ever did"
      })
    }).pipe(Effect.provide(stack))
  }).pipe(Effect.scoped)
