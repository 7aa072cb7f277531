/**
 * An HTTP API with the outbox and its worker in one process.
 *
 * `POST /orders` creates an order; `POST /orders/:id/pay` marks it paid and dispatches `OrderPaid` in the same
 * transaction; the worker, a scoped fiber of the same process, issues the invoice. On SIGTERM or SIGINT the
 * HTTP server stops accepting, the worker lets its in-flight messages finish, and the process exits 0.
 *
 * Start it with `DATABASE_URL=postgres://… PORT=3000 npx tsx examples/http-api/main.ts`. At start it creates its
 * own tables and runs the outbox's migrations explicitly (`setup`, what `outbox setup-transports` does), then
 * prints `listening on <port>`; each outcome of the worker is one line (`handled …`, `retried …`, `failed …`).
 * With `OTEL_EXPORTER_OTLP_ENDPOINT` set it exports its traces there (see tracing.ts).
 *
 * The outbox dashboard is mounted under `/outbox`, behind the application's own check: HTTP Basic, user `admin`,
 * password `DASHBOARD_PASSWORD` (not set: closed). Its retry and remove need `OUTBOX_DASHBOARD_TOKEN` besides.
 */
import { HttpRouter, HttpServer, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Config, Console, Effect, Layer, Option, Redacted, Schema } from "effect"
import { TransportAdmin } from "effect-outbox"
import * as Dashboard from "effect-outbox/Dashboard"
import { createServer } from "node:http"
import { OutboxLive, pay, WorkerLive } from "./app.js"
import { TracingLive } from "./tracing.js"

/** The application's tables; the outbox's own come from `setup` below. */
export const createTables = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS orders (
    id bigserial PRIMARY KEY,
    amount_cents integer NOT NULL,
    paid_at timestamptz
  )`
  yield* sql`CREATE TABLE IF NOT EXISTS invoices (
    order_id bigint NOT NULL REFERENCES orders (id),
    message_id uuid NOT NULL UNIQUE,
    issued_at timestamptz NOT NULL DEFAULT now()
  )`
})

/** Explicit setup at start: the application's tables, then the outbox's migrations. */
const Setup = Layer.effectDiscard(Effect.gen(function*() {
  yield* createTables
  yield* (yield* TransportAdmin.TransportAdmin).setup
}))

const OrderBody = Schema.Struct({ amountCents: Schema.Int })
const OrderPath = Schema.Struct({ id: Schema.NumberFromString.pipe(Schema.int()) })

const routes = HttpRouter.empty.pipe(
  HttpRouter.post(
    "/orders",
    Effect.gen(function*() {
      const { amountCents } = yield* HttpServerRequest.schemaBodyJson(OrderBody)
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ id: string }>`INSERT INTO orders (amount_cents) VALUES (${amountCents}) RETURNING id`
      return yield* HttpServerResponse.json({ id: Number(row!.id) }, { status: 201 })
    })
  ),
  HttpRouter.post(
    "/orders/:id/pay",
    Effect.gen(function*() {
      const { id } = yield* HttpRouter.schemaPathParams(OrderPath)
      yield* pay(id)
      return HttpServerResponse.empty({ status: 204 })
    })
  )
)

// #region dashboard
/**
 * The dashboard behind this application's own authentication (a stand-in for yours): HTTP Basic, user `admin`,
 * password `DASHBOARD_PASSWORD`; without one it stays closed.
 */
const guardedDashboard = Effect.gen(function*() {
  const password = yield* Config.option(Config.redacted("DASHBOARD_PASSWORD"))
  const expected = Option.map(password, (p) => `Basic ${Buffer.from(`admin:${Redacted.value(p)}`).toString("base64")}`)
  const dashboard = yield* Dashboard.router({ basePath: "/outbox" })
  return Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (Option.isNone(expected) || request.headers["authorization"] !== expected.value) {
      return HttpServerResponse.text("authentication required\n", {
        status: 401,
        headers: { "www-authenticate": `Basic realm="outbox"` }
      })
    }
    return yield* dashboard
  })
})

const app = (dashboard: Effect.Effect.Success<typeof guardedDashboard>) =>
  routes.pipe(
    HttpRouter.mountApp("/outbox", dashboard),
    Effect.catchTags({
      ParseError: (error) => HttpServerResponse.text(error.message, { status: 400 }),
      RequestError: () => HttpServerResponse.text("unreadable body", { status: 400 }),
      OrderNotFound: (error) => HttpServerResponse.text(`no unpaid order ${error.orderId}`, { status: 404 })
    })
  )
// #endregion

const HttpLive = Layer.unwrapScoped(Effect.map(guardedDashboard, (dashboard) => HttpServer.serve(app(dashboard)))).pipe(
  Layer.tap(() =>
    HttpServer.addressWith((address) => Console.log(`listening on ${HttpServer.formatAddress(address)}`))
  ),
  Layer.provide(
    NodeHttpServer.layerConfig(createServer, { port: Config.integer("PORT").pipe(Config.withDefault(3000)) })
  )
)

// The server is built last, so it is closed first: no request is accepted once the worker is stopping.
// The tracer first: the server's and the worker's fibers are forked with it (see tracing.ts).
const App = HttpLive.pipe(
  Layer.provide(WorkerLive),
  Layer.provide(Setup),
  Layer.provideMerge(OutboxLive),
  Layer.provide(TracingLive)
)

Layer.launch(App).pipe(NodeRuntime.runMain)
