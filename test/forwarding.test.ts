/**
 * Forwarding to a broker against a real PostgreSQL and a real RabbitMQ: the outbox is the first hop, the
 * broker the second; an outbox row is deleted only after the broker confirmed the publish.
 *
 * The broker-outage test stops and starts a node of its own (started here, on its own ports), never the broker
 * the other test files share.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Schedule from "effect/Schedule"
import * as AmqpTransport from "../src/layers/amqp/AmqpTransport.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Forwarder from "../src/programs/Forwarder.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { amqpUrl, cleanup, uniqueName } from "./support/amqp.js"
import { spawnScript } from "./support/cli.js"
import { createDatabase } from "./support/database.js"
import { pgLayer, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"
import { type RunningBroker, startBroker } from "./support/rabbitmq.js"

let url = ""
let ownBroker: RunningBroker | undefined
beforeAll(async () => {
  ;[url, ownBroker] = await Promise.all([createDatabase("forward"), startBroker()])
}, 90_000)
afterAll(async () => {
  await ownBroker?.destroy()
}, 60_000)

/** One test's chain: its own outbox table, exchange and queue; the transports of both hops under one router. */
const chain = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(options: {
  readonly broker?: string
  readonly handlers: Hs
  readonly routing?: Parameters<typeof Outbox.layer>[0]
  readonly retry?: ScheduleRetryStrategy.Options
}) => {
  const table = uniqueTable("fwd")
  const prefix = uniqueName("fwd")
  const queue = `${prefix}.amqp`
  const brokerUrl = options.broker ?? amqpUrl()
  const transport = TransportRouter.layer(
    PgTransport.make({ table, autoSetup: true }),
    AmqpTransport.make({ url: brokerUrl, exchange: { name: prefix }, transports: { amqp: { queue } } })
  )
  const handlers = Handlers.layer(options.handlers).pipe(
    Layer.provide(PgIdempotencyStore.layer({ table: `${table}_idem`, autoSetup: true }))
  )
  const layer = Layer.mergeAll(
    Outbox.layer(options.routing),
    handlers,
    ScheduleRetryStrategy.layer(options.retry)
  ).pipe(
    Layer.provideMerge(transport),
    Layer.provideMerge(Layer.orDie(pgLayer(url)))
  )
  return {
    table,
    prefix,
    queue,
    layer,
    cleanup: Effect.promise(() => cleanup(brokerUrl, prefix, [queue]))
  }
}

const setup = Effect.flatMap(TransportAdmin, (t) => t.setup)

const rows = (table: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ message_id: string; body: string; queue_name: string }>`
      SELECT message_id::text AS message_id, body, queue_name FROM ${sql(table)} ORDER BY id`)

const waitUntil = (condition: () => boolean, timeout: Duration.DurationInput = "20 seconds") =>
  Effect.sync(condition).pipe(
    Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (ok) => ok }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error("condition not met in time") })
  )

interface Received {
  readonly messageId: string
  readonly type: string
  readonly body: string | undefined
  readonly headers: string
}

const quiet = Logger.withMinimumLogLevel(LogLevel.None)

describe("forwarding to RabbitMQ", () => {
  it.live(
    "forwarded messages arrive once, with the same message id, type and body; the outbox is emptied",
    () =>
      Effect.gen(function*() {
        const received: Array<Received> = []
        const c = chain({
          handlers: [
            ...Forwarder.handlers([OrderPaid], { to: "amqp" }),
            Handlers.handler(OrderPaid, (_m, envelope) =>
              Effect.sync(() =>
                received.push({
                  messageId: envelope.messageId,
                  type: envelope.headers.type,
                  body: envelope.body,
                  headers: JSON.stringify(envelope.headers)
                })
              ), { fromTransport: "amqp" })
          ]
        })
        yield* Effect.addFinalizer(() => c.cleanup)
        yield* Effect.gen(function*() {
          yield* setup
          const sql = yield* SqlClient.SqlClient
          yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => i + 1), (orderId) =>
            sql.withTransaction(Outbox.dispatch(new OrderPaid({ orderId, amount: orderId * 1.5 }), {
              headers: { tenant: "acme" }
            })))
          const original = yield* rows(c.table)
          expect(original.length).toBe(20)
          const forwarded: Array<string> = []
          const forwarder = yield* Effect.fork(Worker.run({
            transports: ["outbox"],
            sleep: "50 millis",
            onEvent: (e) =>
              Effect.sync(() =>
                e._tag === "Handled" && forwarded.push(e.messageId)
              )
          }))
          const consumer = yield* Effect.fork(Worker.run({ transports: ["amqp"], sleep: "50 millis" }))
          yield* waitUntil(() => received.length >= 20)
          yield* Fiber.interrupt(forwarder)
          yield* Fiber.interrupt(consumer)
          // No duplicate anywhere: none received, none left in the outbox to forward, none waiting at the broker
          // (a message the stopped consumer held is back in the queue, so it would count as ready).
          expect(received.length).toBe(20)
          expect(yield* rows(c.table)).toEqual([])
          expect(yield* Effect.flatMap(TransportAdmin, (t) => t.stats("amqp"))).toMatchObject({ ready: 0, inFlight: 0 })
          expect(received.map((r) => r.messageId)).toEqual(original.map((o) => o.message_id))
          expect(received.map((r) => r.body)).toEqual(original.map((o) => o.body))
          expect(received.every((r) => r.type === "OrderPaid")).toBe(true)
          // The far side starts fresh: the type and application headers, no stamps of the first hop.
          expect(JSON.parse(received[0]!.headers)).toEqual({ type: "OrderPaid", custom: { tenant: "acme" } })
          expect(forwarded.sort()).toEqual(original.map((o) => o.message_id).sort())
          expect(yield* Effect.flatMap(TransportAdmin, (t) => t.stats("amqp"))).toMatchObject({ failed: 0 })
        }).pipe(Effect.provide(c.layer), quiet)
      }).pipe(Effect.scoped),
    60_000
  )

  it.live(
    "broker stopped during forwarding: outbox rows stay, are retried, and all arrive when it is back",
    () =>
      Effect.gen(function*() {
        const broker = ownBroker!
        const received = new Set<string>()
        let deliveries = 0
        const c = chain({
          broker: broker.url,
          retry: { default: { maxRetries: 1000, delay: "200 millis", multiplier: 1.5, maxDelay: "1 second" } },
          handlers: [
            ...Forwarder.handlers([OrderPaid], { to: "amqp" }),
            Handlers.handler(OrderPaid, (_m, envelope) =>
              Effect.sync(() => {
                deliveries++
                received.add(envelope.messageId)
              }), { fromTransport: "amqp" })
          ]
        })
        yield* Effect.addFinalizer(() => c.cleanup)
        yield* Effect.gen(function*() {
          yield* setup
          const outbox = yield* Outbox.Outbox
          const dispatched = [
            ...yield* outbox.dispatchAll(
              Array.from({ length: 40 }, (_, i) => new OrderPaid({ orderId: i, amount: 1 }))
            )
          ]
          let retried = 0
          const forwarder = yield* Effect.fork(Worker.run({
            transports: ["outbox"],
            batchSize: 5,
            sleep: "50 millis",
            onEvent: (e) => Effect.sync(() => e._tag === "Retried" && retried++)
          }))
          const consumer = yield* Effect.fork(Worker.run({ transports: ["amqp"], sleep: "50 millis" }))
          yield* waitUntil(() => received.size >= 5)

          // The broker goes down mid-stream; more orders are paid meanwhile.
          yield* Effect.promise(() => broker.stop())
          dispatched.push(
            ...yield* outbox.dispatchAll(
              Array.from({ length: 20 }, (_, i) => new OrderPaid({ orderId: 100 + i, amount: 1 }))
            )
          )
          yield* waitUntil(() => retried >= 3)
          const waiting = yield* rows(c.table)
          expect(waiting.length).toBeGreaterThanOrEqual(20)
          expect(waiting.every((row) => row.queue_name === "outbox")).toBe(true)

          yield* Effect.promise(() => broker.start())
          yield* waitUntil(() => dispatched.every((id) => received.has(id)), "60 seconds")
          yield* Fiber.interrupt(forwarder)
          yield* Fiber.interrupt(consumer)
          // Nothing lost: every message arrived, the outbox is empty, nothing failed.
          expect(dispatched.filter((id) => !received.has(id))).toEqual([])
          expect(yield* rows(c.table)).toEqual([])
          expect(deliveries).toBeGreaterThanOrEqual(60)
          expect(retried).toBeGreaterThanOrEqual(3)
        }).pipe(Effect.provide(c.layer), quiet)
      }).pipe(Effect.scoped),
    120_000
  )

  it.live(
    "a forwarder killed with SIGKILL between publish and delete duplicates at the broker; the idempotent consumer invoices once",
    () =>
      Effect.gen(function*() {
        let invoices = 0
        const invoiceTable = uniqueTable("invoices")
        const c = chain({
          handlers: [
            ...Forwarder.handlers([OrderPaid], { to: "amqp" }),
            Handlers.handler(OrderPaid, (paid, envelope) =>
              Effect.flatMap(SqlClient.SqlClient, (sql) =>
                sql`INSERT INTO ${sql(invoiceTable)} (order_id, message_id)
                VALUES (${paid.orderId}, ${envelope.messageId})`).pipe(
                  Effect.tap(() =>
                    Effect.sync(() => invoices++)
                  )
                ), { name: "invoice", fromTransport: "amqp", idempotent: true })
          ]
        })
        yield* Effect.addFinalizer(() =>
          c.cleanup
        )
        yield* Effect.gen(function*() {
          yield* setup
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE ${sql(invoiceTable)} (order_id int NOT NULL, message_id uuid NOT NULL)`
          const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 7, amount: 70 }))

          const worker = spawnScript(
            "test/fixtures/forwarding-worker.ts",
            [url, c.table, amqpUrl(), c.prefix, c.queue],
            {}
          )
          yield* Effect.addFinalizer(() => Effect.sync(() => worker.kill("SIGKILL")))
          expect(yield* Effect.promise(() => worker.waitFor(/^FORWARDED /))).toBe(`FORWARDED ${id}`)
          worker.kill("SIGKILL")
          expect((yield* Effect.promise(() => worker.exited)).signal).toBe("SIGKILL")

          // The broker confirmed, the outbox row was never deleted.
          const transport = yield* TransportAdmin
          expect((yield* rows(c.table)).map((r) => r.message_id)).toEqual([id])
          expect(yield* transport.stats("amqp")).toMatchObject({ ready: 1 })

          // One lease later another forwarder takes the row and forwards it again: a duplicate, not a loss.
          yield* sql`UPDATE ${sql(c.table)} SET delivered_at = delivered_at - interval '1 minute'`
          expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({
            handled: 1,
            failed: 0
          })
          expect(yield* rows(c.table)).toEqual([])
          yield* Effect.sync(() => undefined).pipe(
            Effect.zipRight(transport.stats("amqp")),
            Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (s) => s.ready === 2 }),
            Effect.timeout("5 seconds")
          )

          // The far side gets both copies and issues one invoice.
          const handled: Array<string> = []
          yield* Worker.run({
            transports: ["amqp"],
            sleep: "50 millis",
            limit: 2,
            onEvent: (e) => Effect.sync(() => e._tag === "Handled" && handled.push(e.messageId))
          }).pipe(Effect.timeout("20 seconds"))
          expect(handled).toEqual([id, id])
          expect(invoices).toBe(1)
          const [count] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(invoiceTable)}`
          expect(count!.n).toBe(1)
        }).pipe(Effect.provide(c.layer), quiet)
      }).pipe(Effect.scoped),
    90_000
  )

  it.live(
    "a forwarder cannot send into the outbox: explicit transports win over routing, and it runs only for its transport",
    () =>
      Effect.gen(function*() {
        const received: Array<string> = []
        const c = chain({
          routing: { routes: { OrderPaid: ["outbox"] } },
          handlers: [
            ...Forwarder.handlers([OrderPaid], { to: "amqp" }),
            Handlers.handler(OrderPaid, (_m, envelope) => Effect.sync(() => received.push(envelope.messageId)), {
              fromTransport: "amqp"
            })
          ]
        })
        yield* Effect.addFinalizer(() => c.cleanup)
        yield* Effect.gen(function*() {
          yield* setup
          const transport = yield* TransportAdmin
          // The dispatch override wins over the route: straight to the broker, nothing in the outbox.
          const direct = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }), { transportNames: ["amqp"] })
          expect(yield* rows(c.table)).toEqual([])
          // A routed one goes to the outbox, and the forwarder sends it on explicitly — never through routing.
          const routed = yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
          expect((yield* rows(c.table)).map((r) => r.message_id)).toEqual([routed])

          const events: Array<Worker.WorkerEvent> = []
          yield* Worker.run({
            transports: ["outbox", "amqp"],
            sleep: "50 millis",
            limit: 3,
            onEvent: (e) => Effect.sync(() => events.push(e))
          }).pipe(Effect.timeout("20 seconds"))
          yield* Worker.run({ transports: ["outbox", "amqp"], sleep: "50 millis", timeLimit: "500 millis" })
          // The forwarder ran once, for the outbox message; the broker's copies were only consumed.
          const handled = events.filter((e) => e._tag === "Handled")
          expect(handled.filter((e) => e.transport === "outbox").map((e) => e.messageId)).toEqual([routed])
          expect(received.sort()).toEqual([direct, routed].sort())
          expect(events.filter((e) => e._tag === "Retried" || e._tag === "Failed")).toEqual([])
          expect(yield* rows(c.table)).toEqual([])
          expect(yield* transport.stats("amqp")).toMatchObject({ ready: 0, inFlight: 0 })
        }).pipe(Effect.provide(c.layer), quiet)
      }).pipe(Effect.scoped),
    60_000
  )

  it.live(
    "a forwarder pointed at the transport it reads refuses, and the message goes to the failure queue",
    () =>
      Effect.gen(function*() {
        const c = chain({ handlers: Forwarder.handlers([OrderPaid], { to: "outbox" }) })
        yield* Effect.addFinalizer(() => c.cleanup)
        yield* Effect.gen(function*() {
          yield* setup
          const id = yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
          expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({
            handled: 0,
            failed: 1
          })
          const [failed] = yield* rows(c.table)
          expect(failed).toMatchObject({ message_id: id, queue_name: "failed" })
          const [stored] = yield* Effect.flatMap(TransportAdmin, (t) => t.list("failed", { max: 1 }))
          expect(JSON.parse(stored!.headers).errorDetails.message).toMatch(
            /Refusing to forward OrderPaid .* into outbox/
          )
        }).pipe(Effect.provide(c.layer), quiet)
      }).pipe(Effect.scoped),
    60_000
  )
})
