/**
 * The CDC transport (PgCdcTransport): what it writes to the WAL (read back through a `test_decoding` slot), its
 * setup's checks and objects, its slot lag, the connector configuration it prints — and, end to end on the run's
 * Kafka Connect with Debezium and Kafka broker, business transactions dispatched through it and consumed by the Kafka
 * transport into an idempotent handler.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { afterEach, describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Schedule from "effect/Schedule"
import * as KafkaTransport from "../src/layers/kafka/KafkaTransport.js"
import * as PgCdcTransport from "../src/layers/PgCdcTransport.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Cli from "../src/programs/Cli.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { dropSlot, eventually } from "./support/cdc.js"
import { runCli } from "./support/cli.js"
import { awaitConnectorRunning, createConnector, deleteConnector } from "./support/connect.js"
import { createDatabase, pgLayer, query } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"
import { kafkaBootstrap, kafkaConnectUrl, uniqueName } from "./support/kafka-transport.js"
import { OrderPaid } from "./support/messages.js"

const quiet = Logger.withMinimumLogLevel(LogLevel.None)

/** What a test left to remove when it failed half-way (connectors, slots). */
const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined)
})

/** Unique names of one test: the event table, its publication and slot, the aggregate type. */
const names = () => {
  const table = uniqueTable("cdc")
  return { table, publication: `${table}_pub`, slot: `${table}_slot`, aggregateType: uniqueName("Orders") }
}

/** The outbox and `failed` in a table, `cdc` through PgCdcTransport, OrderPaid routed to `cdc`. */
const cdcStack = (url: string, options: PgCdcTransport.Options) =>
  Layer.mergeAll(
    Outbox.layer({ routes: { OrderPaid: ["cdc"] } }),
    Handlers.layer([]),
    ScheduleRetryStrategy.layerDefault
  ).pipe(
    Layer.provideMerge(
      TransportRouter.layer(
        PgTransport.make({ table: uniqueTable("outbox"), autoSetup: true }),
        PgCdcTransport.make(options)
      )
    ),
    Layer.provideMerge(Layer.orDie(pgLayer(url)))
  )

/** The changes a `test_decoding` slot has seen since it was created, as text lines. */
const changes = (url: string, slot: string) =>
  Effect.promise(() =>
    query<{ data: string }>(url, "SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL)", [slot])
  ).pipe(Effect.map((rows) => rows.map((r) => r.data)))

describe("PgCdcTransport on PostgreSQL", () => {
  it.live(
    "table mode: setup makes the table and an inserts-only publication; a committed dispatch reaches the WAL, the table stays empty, a rolled-back one never",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => createDatabase("cdc"))
        const n = names()
        const options: PgCdcTransport.Options = {
          mode: "table",
          table: n.table,
          publication: n.publication,
          slot: n.slot
        }
        yield* Effect.gen(function*() {
          const admin = yield* TransportAdmin
          const applied = yield* admin.setup
          expect(applied).toEqual(expect.arrayContaining([`table ${n.table}`, `publication ${n.publication}`]))
          expect((yield* admin.setup).filter((a) => a.includes(n.table) || a.includes(n.publication))).toEqual([])
          const [publication] = yield* Effect.promise(() =>
            query<{ pubinsert: boolean; pubdelete: boolean; pubupdate: boolean }>(
              url,
              "SELECT pubinsert, pubdelete, pubupdate FROM pg_publication WHERE pubname = $1",
              [n.publication]
            )
          )
          expect(publication).toEqual({ pubinsert: true, pubdelete: false, pubupdate: false })

          yield* Effect.promise(() =>
            query(url, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", [n.slot])
          )
          cleanups.push(() => dropSlot(url, n.slot))
          const sql = yield* SqlClient.SqlClient
          const committed = yield* sql.withTransaction(
            Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }), {
              orderingKey: "order-1",
              headers: { tenant: "acme" }
            })
          )
          const rolledBack = yield* sql.withTransaction(
            Effect.flatMap(Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 5 })), (id) => Effect.fail(id))
          ).pipe(Effect.flip)
          const alone = yield* Outbox.dispatch(new OrderPaid({ orderId: 3, amount: 5 }), { delay: "1 minute" })
          expect(yield* Effect.promise(() => query(url, `SELECT 1 FROM "${n.table}"`))).toEqual([])

          const lines = yield* changes(url, n.slot)
          const inserts = lines.filter((l) => l.includes(": INSERT:"))
          expect(inserts).toHaveLength(2)
          expect(inserts[0]).toContain(`id[uuid]:'${committed}'`)
          expect(inserts[0]).toContain(`aggregatetype[text]:'cdc'`)
          expect(inserts[0]).toContain(`aggregateid[text]:'order-1'`)
          expect(inserts[0]).toContain(`type[text]:'OrderPaid'`)
          expect(inserts[0]).toContain(`payload[text]:'{"orderId":1,"amount":5,"_tag":"OrderPaid"}'`)
          expect(inserts[0]).toContain(`"tenant":"acme"`)
          expect(inserts[0]).toMatch(/available_at\[bigint\]:\d{13}/)
          // Without a key, the record's key is the message id; a delay travels as when it is due.
          expect(inserts[1]).toContain(`aggregateid[text]:'${alone}'`)
          const due = (line: string) => Number(/available_at\[bigint\]:(\d+)/.exec(line)![1])
          expect(due(inserts[1]!) - due(inserts[0]!)).toBeGreaterThanOrEqual(60_000)
          expect(lines.join("\n")).not.toContain(rolledBack)

          const stats = yield* admin.stats("cdc")
          expect(stats.slot).toMatchObject({ name: n.slot, active: false })
          expect(stats.slot!.retainedBytes).toBeGreaterThan(0)
        }).pipe(Effect.provide(cdcStack(url, options)))
      }).pipe(quiet),
    60_000
  )

  it.live(
    "message mode: no table, each event a transactional logical decoding message under the prefix",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => createDatabase("cdc"))
        const n = names()
        const options: PgCdcTransport.Options = {
          mode: "message",
          messagePrefix: "shop",
          publication: n.publication,
          slot: n.slot,
          transports: { cdc: { aggregateType: (type) => `shop.${type}` } }
        }
        yield* Effect.gen(function*() {
          expect(yield* Effect.flatMap(TransportAdmin, (a) => a.setup)).toContain(`publication ${n.publication}`)
          yield* Effect.promise(() =>
            query(url, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", [n.slot])
          )
          cleanups.push(() => dropSlot(url, n.slot))
          const sql = yield* SqlClient.SqlClient
          const id = yield* sql.withTransaction(Outbox.dispatch(new OrderPaid({ orderId: 7, amount: 1 })))
          yield* sql.withTransaction(
            Effect.zipRight(Outbox.dispatch(new OrderPaid({ orderId: 8, amount: 1 })), Effect.fail("rolled back"))
          ).pipe(Effect.ignore)
          const messages = (yield* changes(url, n.slot)).filter((l) => l.startsWith("message:"))
          expect(messages).toHaveLength(1)
          expect(messages[0]).toContain("transactional: 1 prefix: shop")
          const content = JSON.parse(messages[0]!.slice(messages[0]!.indexOf("content:") + "content:".length))
          expect(content).toMatchObject({
            id,
            aggregatetype: "shop.OrderPaid",
            aggregateid: id,
            type: "OrderPaid",
            payload: `{"orderId":7,"amount":1,"_tag":"OrderPaid"}`
          })
        }).pipe(Effect.provide(cdcStack(url, options)))
      }).pipe(quiet),
    60_000
  )

  it.live(
    "setup says what to change when the connector's role may not replicate; a worker on it fails at once",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => createDatabase("cdc"))
        const role = uniqueName("cdc_reader").replaceAll("-", "_")
        yield* Effect.promise(() => query(url, `CREATE ROLE "${role}" NOLOGIN`))
        yield* Effect.gen(function*() {
          const error = yield* Effect.flip(Effect.flatMap(TransportAdmin, (a) => a.setup))
          expect(error.message).toContain(`ALTER ROLE "${role}" WITH REPLICATION`)
          const worker = yield* Effect.exit(Worker.run({ transports: ["cdc"] }))
          expect(Exit.isFailure(worker) && JSON.stringify(worker.cause)).toContain("is a CDC transport")
        }).pipe(Effect.provide(cdcStack(url, { table: uniqueTable("cdc"), connectorRole: role })))
        const missing = yield* Effect.flip(
          Effect.provide(
            Effect.flatMap(TransportAdmin, (a) => a.setup),
            cdcStack(url, { connectorRole: "nobody_here" })
          )
        )
        expect(missing.message).toContain("role nobody_here does not exist")
        const invalid = yield* Effect.flip(PgCdcTransport.resolve({ slot: "Bad-Slot" }))
        expect(invalid.message).toContain("invalid replication slot name")
      }).pipe(quiet),
    60_000
  )

  it.live(
    "the command line: setup-transports creates the event table and publication, stats shows the slot, cdc:connector prints the connector",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => createDatabase("cdc"))
        const n = names()
        const cli = Cli.make({
          transport: { table: uniqueTable("outbox") },
          cdc: { table: n.table, publication: n.publication, slot: n.slot }
        })
        const setup = yield* runCli(cli, ["setup-transports", "--dsn", url])
        expect(setup.exit._tag, setup.stderr).toBe("Success")
        expect(setup.stdout).toContain(`publication ${n.publication}`)
        const missing = yield* runCli(cli, ["stats", "cdc", "--dsn", url])
        expect(missing.stdout).toMatch(/cdc\s+\|\s+missing/)
        yield* Effect.promise(() =>
          query(url, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", [n.slot])
        )
        cleanups.push(() => dropSlot(url, n.slot))
        const stats = yield* runCli(cli, ["stats", "cdc", "--dsn", url, "--format", "json"])
        expect(JSON.parse(stats.stdout).transports.cdc.slot).toMatchObject({ name: n.slot, active: false })
        const rest = yield* runCli(cli, ["cdc:connector", "--dsn", url, "--name", "shop-cdc"])
        expect(rest.exit._tag, rest.stderr).toBe("Success")
        const connector = JSON.parse(rest.stdout)
        expect(connector.name).toBe("shop-cdc")
        expect(connector.config["slot.name"]).toBe(n.slot)
        expect(connector.config["database.dbname"]).toBe(new URL(url).pathname.slice(1))
        expect(connector.config["database.password"]).toMatch(/^\$\{file:/)
        const properties = yield* runCli(cli, ["cdc:connector", "--dsn", url, "--properties", "--with-password"])
        expect(properties.stdout.split("\n")[0]).toBe("name=effect-outbox-cdc")
        expect(properties.stdout).toContain(`database.password=${decodeURIComponent(new URL(url).password)}`)
      }).pipe(quiet),
    60_000
  )

  it.effect("connectorConfig: pgoutput, the publication and slot, no snapshot, the Event Router with our headers", () =>
    Effect.gen(function*() {
      const connector = yield* PgCdcTransport.connectorConfig({ mode: "table", table: "app.events" }, {
        name: "orders-cdc",
        database: { host: "db", port: 5432, user: "debezium", dbname: "shop" }
      })
      expect(connector.name).toBe("orders-cdc")
      expect(connector.config).toMatchObject({
        "plugin.name": "pgoutput",
        "table.include.list": "app.events",
        "publication.name": "app_events_publication",
        "publication.autocreate.mode": "disabled",
        "slot.name": "app_events_slot",
        "snapshot.mode": "no_data",
        "tombstones.on.delete": "false",
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter"
      })
      expect(connector.config["database.password"]).toMatch(/^\$\{file:/)
      const properties = PgCdcTransport.toProperties(connector)
      expect(properties.split("\n")[0]).toBe("name=orders-cdc")
      expect(properties).toContain(
        "transforms.outbox.table.fields.additional.placement=type:header:type,headers:header:x-outbox-headers,"
      )
      // The default: logical decoding messages, decoded before the router; no table to include.
      const message = yield* PgCdcTransport.connectorConfig({}, {
        database: { host: "db", port: 5432, user: "debezium", dbname: "shop" }
      })
      expect(message.config).toMatchObject({
        "transforms": "decode,outbox",
        "message.prefix.include.list": "effect-outbox",
        "publication.name": "outbox_events_publication"
      })
      expect(message.config["table.include.list"]).toBeUndefined()
    }))
})

describe("CDC end to end: Outbox.dispatch → PostgreSQL's WAL → Debezium on Kafka Connect → Kafka → the Kafka transport", () => {
  it.live.each(["table", "message"] as const)(
    "%s mode: committed dispatches are handled once each, in commit order per key; rolled-back ones never",
    (mode) =>
      Effect.gen(function*() {
        const connect = kafkaConnectUrl()
        const url = yield* Effect.promise(() => createDatabase("cdc"))
        const n = names()
        const topic = `outbox.event.${n.aggregateType}`
        const cdc: PgCdcTransport.Options = {
          mode,
          messagePrefix: n.table,
          table: n.table,
          publication: n.publication,
          slot: n.slot,
          transports: { cdc: { aggregateType: n.aggregateType } }
        }
        const effects = uniqueTable("effects")
        const handler = Handlers.handler(OrderPaid, (paid, envelope) =>
          Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql`INSERT INTO ${sql(effects)} (order_id, message_id, key, tenant)
              VALUES (${paid.orderId}, ${envelope.messageId}, ${envelope.orderingKey ?? null},
                      ${envelope.headers.custom?.tenant ?? null})`), { fromTransport: "orders", idempotent: true })
        const layer = Layer.mergeAll(
          Outbox.layer({ routes: { OrderPaid: ["cdc"] } }),
          Handlers.layer([handler]).pipe(
            Layer.provide(PgIdempotencyStore.layer({ table: `${effects}_idem`, autoSetup: true }))
          ),
          ScheduleRetryStrategy.layer()
        ).pipe(
          Layer.provideMerge(
            TransportRouter.layer(
              PgTransport.make({ table: uniqueTable("outbox"), autoSetup: true }),
              PgCdcTransport.make(cdc),
              KafkaTransport.make({
                brokers: kafkaBootstrap(),
                groupId: uniqueName("cdc"),
                transports: { orders: { topic, failureTransport: "failed" } }
              })
            )
          ),
          Layer.provideMerge(Layer.orDie(pgLayer(url)))
        )
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE ${
            sql(effects)
          } (n serial PRIMARY KEY, order_id int, message_id uuid, key text, tenant text)`
          yield* Effect.flatMap(TransportAdmin, (a) =>
            a.setup)
          const db = new URL(url)
          const connector = yield* PgCdcTransport.connectorConfig(cdc, {
            name: uniqueName("cdc-e2e"),
            topicPrefix: uniqueName("cdc"),
            database: {
              host: db.hostname,
              port: Number(db.port),
              user: decodeURIComponent(db.username),
              password: decodeURIComponent(db.password),
              dbname: db.pathname.slice(1)
            }
          })
          cleanups.push(() =>
            dropSlot(url, n.slot), () =>
            deleteConnector(connect, connector.name))
          yield* Effect.promise(() => createConnector(connect, connector.name, connector.config))
          yield* Effect.promise(() => awaitConnectorRunning(connect, connector.name))
          yield* Effect.promise(() =>
            eventually(`slot ${n.slot} created`, async () =>
              (await query(url, "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", [n.slot])).length > 0)
          )

          // Business transactions: an order row and its OrderPaid, one in five rolled back.
          yield* sql`CREATE TABLE ${sql(`${effects}_orders`)} (id int PRIMARY KEY)`
          const keys = ["k1", "k2", "k3", "k4"]
          const committed: Array<number> = []
          for (let orderId = 1; orderId <= 40; orderId++) {
            const work = Effect.zipRight(
              sql`INSERT INTO ${sql(`${effects}_orders`)} (id) VALUES (${orderId})`,
              Outbox.dispatch(new OrderPaid({ orderId, amount: orderId }), {
                orderingKey: keys[orderId % keys.length]!,
                headers: { tenant: "acme" }
              })
            )
            if (orderId % 5 === 0) {
              yield* sql.withTransaction(Effect.zipRight(work, Effect.fail("rolled back"))).pipe(Effect.ignore)
            } else {
              yield* sql.withTransaction(work)
              committed.push(orderId)
            }
          }
          const worker = yield* Effect.fork(Worker.run({ transports: ["orders"], concurrency: 4, sleep: "50 millis" }))
          const handled = () =>
            sql<{ order_id: number; message_id: string; key: string; tenant: string }>`
          SELECT order_id, message_id::text, key, tenant FROM ${sql(effects)} ORDER BY n`
          yield* handled().pipe(
            Effect.repeat({
              schedule: Schedule.spaced("200 millis"),
              until: (rows) =>
                rows.length >= committed.length
            }),
            Effect.timeout("90 seconds"),
            Effect.tapError(() =>
              Effect.promise(async () =>
                console.error(await (await fetch(`${connect}/connectors/${connector.name}/status`)).text())
              )
            )
          )
          yield* Fiber.interrupt(worker)
          const rows = yield* handled()
          expect(
            rows.map((r) =>
              r.order_id
            ).sort((a, b) => a - b)
          ).toEqual(committed)
          expect(new Set(rows.map((r) => r.message_id)).size).toBe(committed.length)
          // The application headers travel in x-outbox-headers.
          expect(new Set(rows.map((r) => r.tenant))).toEqual(new Set(["acme"]))
          for (const key of keys) {
            const ofKey = rows.filter((r) => r.key === key).map((r) => r.order_id)
            expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b))
          }
          const stats = yield* Effect.flatMap(TransportAdmin, (a) => a.stats("cdc"))
          expect(stats.slot).toMatchObject({ name: n.slot, active: true })
        }).pipe(Effect.provide(layer))
      }).pipe(quiet),
    240_000
  )
})
