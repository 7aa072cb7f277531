/**
 * The demo: pay orders, each `UPDATE orders` + `Outbox.dispatch(OrderPaid)` in one transaction (a share
 * rolled back on purpose), run the worker until the queue is drained, and prove the contract.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Schedule from "effect/Schedule"
import * as MysqlIdempotencyStore from "../layers/MysqlIdempotencyStore.js"
import * as MysqlTransport from "../layers/MysqlTransport.js"
import * as PgIdempotencyStore from "../layers/PgIdempotencyStore.js"
import * as PgTransport from "../layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../layers/ScheduleRetryStrategy.js"
import * as Handlers from "../services/Handlers.js"
import { IdempotencyStore } from "../services/IdempotencyStore.js"
import * as Outbox from "../services/Outbox.js"
import { Transport } from "../services/Transport.js"
import { TransportAdmin } from "../services/TransportAdmin.js"
import {
  checkOptions,
  clearTransports,
  createTables,
  type DemoOptions,
  type DemoSummary,
  idempotencyOptions,
  invoiceCounts,
  invoicedAgain,
  issueInvoice,
  OrderPaid,
  payments,
  printSummary,
  queueCounts,
  sayer,
  transportOptions
} from "./demoShared.js"
import * as OutboxMetrics from "./OutboxMetrics.js"
import * as Worker from "./worker/Worker.js"

export {
  /** @since 0.1.0 */
  type DemoOptions,
  /** @since 0.1.0 */
  type DemoSummary,
  /** @since 0.1.0 */
  idempotencyOptions,
  /** @since 0.1.0 */
  OrderPaid,
  /** @since 0.1.0 */
  transportOptions
} from "./demoShared.js"

/**
 * The demo's handler: issue an invoice for each paid order, through an idempotent consumer.
 *
 * @since 0.1.0
 * @category layers
 */
export const handlers = Handlers.layer([issueInvoice()])

/**
 * Runs the demo on the `SqlClient` in context: PostgreSQL's, or MySQL's (a `MysqlClient`).
 *
 * @since 0.1.0
 * @category programs
 */
export const run = (options: DemoOptions): Effect.Effect<DemoSummary, unknown, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    yield* checkOptions(options)
    const say = sayer(options.json)
    yield* createTables(options.orders)

    const mysql = (yield* SqlClient.SqlClient).onDialectOrElse({ mysql: () => true, orElse: () => false })
    const stack = Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layerDefault).pipe(
      Layer.provideMerge(
        mysql ? MysqlIdempotencyStore.layer(idempotencyOptions) : PgIdempotencyStore.layer(idempotencyOptions)
      ),
      Layer.provideMerge(mysql ? MysqlTransport.layer(transportOptions) : PgTransport.layer(transportOptions))
    )

    return yield* Effect.gen(function*() {
      yield* (yield* TransportAdmin).setup
      yield* (yield* IdempotencyStore).setup
      // A previous run's leftovers go; its idempotency records name message ids this run never makes.
      yield* clearTransports(["outbox", "failed"])
      yield* say(
        `effect-outbox demo: paying ${options.orders} orders with ${options.producers} producers, ` +
          `${Math.round(options.rollbackShare * 100)}% rolled back on purpose`
      )

      const { counts: paid, pay } = payments(options.rollbackShare)
      const ids = Array.from({ length: options.orders }, (_, i) => i + 1)
      const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], batchSize: 100, sleep: "20 millis" }))
      const producers = yield* Effect.fork(Effect.forEach(ids, pay, { concurrency: options.producers, discard: true }))

      const counts = Effect.zipWith(queueCounts("outbox"), invoiceCounts, (queue, invoices) => ({
        ...queue,
        invoices: invoices.total
      }))
      const progress = Effect.gen(function*() {
        const c = yield* counts
        yield* say(
          `  paid ${String(paid.committed).padStart(6)} · rolled back ${String(paid.rolledBack).padStart(5)} · ` +
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
      const again = yield* invoicedAgain(options.redeliverShare, 4999)
      yield* (yield* Transport).send("outbox", again)
      const redelivered = yield* Worker.run({ transports: ["outbox"], batchSize: 100, stopWhenEmpty: true })
      yield* say(
        `  delivered ${again.length} handled messages again on purpose: ${redelivered.handled} skipped by the ` +
          `idempotent invoice consumer`
      )

      const invoices = yield* invoiceCounts
      // The worker's own metrics (OutboxMetrics), as a scrape of /metrics would show them.
      const meanMs = (state: { readonly count: number; readonly sum: number }) =>
        state.count === 0 ? "–" : `${(state.sum / state.count * 1000).toFixed(1)} ms (${state.count} messages)`
      const handlerTime = yield* Metric.value(
        Metric.taggedWithLabels(OutboxMetrics.handlerDuration, OutboxMetrics.messageLabels("outbox", OrderPaid._tag))
      )
      const startDelay = yield* Metric.value(
        Metric.taggedWithLabels(OutboxMetrics.messageAge, OutboxMetrics.transportLabels("outbox"))
      )
      const summary: DemoSummary = {
        committed: paid.committed,
        rolledBack: paid.rolledBack,
        handled: invoices.handled,
        failed: (yield* queueCounts("outbox")).failed,
        duplicates: invoices.total - invoices.handled
      }
      return yield* printSummary({
        json: options.json,
        summary,
        lines: [
          ["committed payments", summary.committed],
          ["rolled back on purpose", summary.rolledBack],
          ["messages handled", summary.handled],
          ["failed (failure queue)", summary.failed],
          ["handled twice (duplicates)", summary.duplicates],
          ["rolled-back orders handled", invoices.rolledBackHandled],
          ["redelivered on purpose", again.length],
          ["invoices issued", `${invoices.total} (for ${invoices.orders} orders)`],
          ["handler time, mean", meanMs(handlerTime)],
          ["commit to handler start, mean", meanMs(startDelay)]
        ],
        ok: summary.handled === summary.committed && summary.failed === 0 && summary.duplicates === 0 &&
          invoices.rolledBackHandled === 0 && invoices.orders === summary.committed &&
          invoices.total === summary.committed && redelivered.handled === again.length,
        okLine: "every committed payment was announced and invoiced exactly once; no rolled-back one ever was"
      })
    }).pipe(Effect.provide(stack))
  })
