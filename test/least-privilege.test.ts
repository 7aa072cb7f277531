/**
 * Least privilege: the owner runs `setup-transports`; a producer role with INSERT only dispatches; a worker role
 * with the README's grants ("Least privilege") consumes — handled, retried, failed, idempotent dedupe, lease
 * renewal, release, LISTEN wake-up, retention purge — and runs the operator commands. Neither role can run DDL or
 * the setup, and each documented grant is needed: without it the operation that uses it fails at once with
 * PostgreSQL's permission error.
 *
 * Roles are cluster-wide: their names are unique per run and they are dropped after the file. The database is
 * hardened first (no CONNECT, TEMP or CREATE for PUBLIC, no EXECUTE of the claim function for PUBLIC), so the
 * grants below are all the roles have.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import { RecoverableMessageHandlingError, UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import { Headers } from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Cli from "../src/programs/Cli.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import { IdempotencyStore } from "../src/services/IdempotencyStore.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { runCli } from "./support/cli.js"
import { pgLayer, query, testDatabase } from "./support/database.js"
import { claimWith } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const db = testDatabase("least_privilege")

const runId = `${process.pid}_${Date.now().toString(36)}`
const roles = {
  producer: `outbox_producer_${runId}`,
  worker: `outbox_worker_${runId}`,
  /** Gets the grants minus one, case by case. */
  probe: `outbox_probe_${runId}`
} as const
const password = "least-privilege"
const schema = "outbox"
const table = `${schema}.messages`
const idempotencyTable = `${schema}.outbox_idempotency`
const claimSignature = `${table}_claim(text, float8, int, bigint[], boolean, float8)`
const keySequences = `${table}_key_seq`
const keyStates = `${table}_keys`
const waitingWorkers = `${table}_waiting`

/** One privilege on one object (`ON <on>`), as the README's "Least privilege" grants them. */
interface Grant {
  readonly privilege: string
  readonly on: string
}

/** The README's grants, one privilege per entry (the README groups them by object). */
const documented = (database: string) => {
  const access: ReadonlyArray<Grant> = [
    { privilege: "CONNECT", on: `DATABASE "${database}"` },
    { privilege: "USAGE", on: `SCHEMA ${schema}` }
  ]
  return {
    // Nothing a later migration can add: the triggers of the table run with its owner's rights.
    producer: [
      ...access,
      { privilege: "INSERT", on: `TABLE ${table}` }
    ] as ReadonlyArray<Grant>,
    worker: [
      ...access,
      { privilege: "SELECT", on: `TABLE ${table}` },
      { privilege: "UPDATE", on: `TABLE ${table}` },
      { privilege: "DELETE", on: `TABLE ${table}` },
      { privilege: "EXECUTE", on: `FUNCTION ${claimSignature}` },
      { privilege: "SELECT", on: `TABLE ${keySequences}` },
      { privilege: "UPDATE", on: `TABLE ${keySequences}` },
      { privilege: "SELECT", on: `TABLE ${keyStates}` },
      { privilege: "INSERT", on: `TABLE ${keyStates}` },
      { privilege: "UPDATE", on: `TABLE ${keyStates}` },
      { privilege: "DELETE", on: `TABLE ${keyStates}` },
      { privilege: "SELECT", on: `TABLE ${idempotencyTable}` },
      { privilege: "INSERT", on: `TABLE ${idempotencyTable}` },
      { privilege: "UPDATE", on: `TABLE ${idempotencyTable}` },
      { privilege: "DELETE", on: `TABLE ${idempotencyTable}` },
      { privilege: "SELECT", on: `TABLE ${waitingWorkers}` },
      { privilege: "INSERT", on: `TABLE ${waitingWorkers}` },
      { privilege: "UPDATE", on: `TABLE ${waitingWorkers}` },
      { privilege: "DELETE", on: `TABLE ${waitingWorkers}` }
    ] as ReadonlyArray<Grant>
  }
}

const databaseName = () => new URL(db.url).pathname.slice(1)

const grant = (grants: ReadonlyArray<Grant>, role: string) =>
  grants.map((g) => `GRANT ${g.privilege} ON ${g.on} TO "${role}"`)

/** Every privilege a role may have been given here, taken back. */
const revokeAll = (role: string) => [
  `REVOKE ALL ON DATABASE "${databaseName()}" FROM "${role}"`,
  `REVOKE ALL ON SCHEMA ${schema} FROM "${role}"`,
  `REVOKE ALL ON ALL TABLES IN SCHEMA ${schema} FROM "${role}"`,
  `REVOKE ALL ON FUNCTION ${claimSignature} FROM "${role}"`
]

const asOwner = async (statements: ReadonlyArray<string>) => {
  for (const statement of statements) await query(db.url, statement)
}

const urlOf = (role: string) => {
  const url = new URL(db.url)
  url.username = role
  url.password = password
  return url.toString()
}

/** Runs an effect with a PgClient connected as `role`. */
const as = <A, E, R>(role: string, self: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => Effect.provide(self, Layer.orDie(pgLayer(urlOf(role)))))

/** The producer's stack: the outbox over the transport, nothing else. */
const producerStack = Outbox.layer().pipe(Layer.provideMerge(PgTransport.layer({ table })), Layer.orDie)

/** A statement run raw as the role in context: the SQLSTATE and message of its failure (or that it succeeded). */
const attempt = (text: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(text)).pipe(
    Effect.match({
      onSuccess: () => ({ code: "none", message: "it succeeded" }),
      onFailure: (error) => {
        const cause = error.cause as { readonly code?: string; readonly message?: string } | undefined
        return { code: cause?.code ?? "none", message: cause?.message ?? error.message }
      }
    })
  )

/** Recorded log lines (message and cause), for the worker's background failures (purge, lease renewal, acks). */
const recording = () => {
  const lines: Array<string> = []
  const show = (u: unknown): string =>
    typeof u === "object" && u !== null && "message" in u ? String((u as { message: unknown }).message) : String(u)
  const logger = Logger.make(({ cause, message }) => {
    const parts = Array.isArray(message) ? message.map(show) : [show(message)]
    lines.push([...parts, Cause.isEmpty(cause) ? "" : Cause.pretty(cause)].join(" "))
  })
  return { lines, layer: Logger.replace(Logger.defaultLogger, logger) }
}

/** The messages of a cause's errors and defects, and of their causes (a driver's error is two causes deep). */
const describeCause = (cause: Cause.Cause<unknown>): string => {
  const lines: Array<string> = []
  for (const error of [...Cause.failures(cause), ...Cause.defects(cause)]) {
    let current: unknown = error
    for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
      const { _tag, message } = current as { readonly _tag?: unknown; readonly message?: unknown }
      lines.push(`${typeof _tag === "string" ? `${_tag}: ` : ""}${String(message)}`)
      current = (current as { readonly cause?: unknown }).cause
    }
  }
  return lines.join("\n")
}

const messagesRows = () =>
  query<{ id: string; message_id: string; queue_name: string; headers: string; body: string }>(
    db.url,
    `SELECT id::text, message_id::text, queue_name, headers, body FROM ${table} ORDER BY id`
  )

const orderIdOf = (row: { readonly body: string }) => JSON.parse(row.body).orderId as number

beforeAll(async () => {
  const database = databaseName()
  // The owner's part: the schema, then the setup path (the command line's setup-transports).
  await asOwner([`CREATE SCHEMA ${schema}`])
  const setup = await Effect.runPromise(runCli(
    Cli.make({ transport: { table }, idempotency: { table: idempotencyTable, messagesTable: table } }),
    ["setup-transports", "--dsn", db.url]
  ))
  expect(Exit.isSuccess(setup.exit), setup.stderr).toBe(true)
  expect(setup.stdout).toContain("Applied migrations: 1_create_messages")
  expect(setup.stdout).toContain("idempotency 1_create_idempotency")
  // A hardened database: PUBLIC keeps nothing that could stand in for a missing grant.
  await asOwner([
    `REVOKE ALL ON DATABASE "${database}" FROM PUBLIC`,
    `REVOKE CREATE ON SCHEMA public FROM PUBLIC`,
    `REVOKE EXECUTE ON FUNCTION ${claimSignature} FROM PUBLIC`,
    ...Object.values(roles).map((role) => `CREATE ROLE "${role}" LOGIN PASSWORD '${password}'`),
    ...grant(documented(database).producer, roles.producer),
    ...grant(documented(database).worker, roles.worker),
    // The application's own tables and grants (not the outbox's): the producer pays orders, the worker invoices.
    `CREATE TABLE public.orders (id int PRIMARY KEY, paid boolean NOT NULL DEFAULT false)`,
    `INSERT INTO public.orders SELECT g FROM generate_series(1, 20) g`,
    `CREATE TABLE public.invoices (order_id int NOT NULL, message_id uuid NOT NULL)`,
    `GRANT SELECT, UPDATE ON public.orders TO "${roles.producer}"`,
    `GRANT INSERT ON public.invoices TO "${roles.worker}"`
  ])
})

afterAll(async () => {
  if (db.url === "") return
  const names = Object.values(roles)
  await query(db.url, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY($1)`, [names])
  for (const role of names) {
    await query(db.url, `DROP OWNED BY "${role}"`).catch(() => undefined)
    await query(db.url, `DROP ROLE IF EXISTS "${role}"`)
  }
})

/** The worker's stack: handlers (idempotent ones through the store), retry strategy, store and transport. */
const workerStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(handlers: Hs) =>
  Layer.mergeAll(Handlers.layer(handlers), ScheduleRetryStrategy.layer()).pipe(
    Layer.provideMerge(PgIdempotencyStore.layer({ table: idempotencyTable, messagesTable: table })),
    // A short lease, so that a one-second handler has its lease renewed a few times.
    Layer.provideMerge(PgTransport.layer({ table, transports: { outbox: { redeliverTimeout: "900 millis" } } })),
    Layer.orDie
  )

/** What the statements and layers of the two roles must never be allowed to do. */
const ddl = [
  `CREATE TABLE ${schema}.intruder (id int)`,
  `CREATE TABLE public.intruder (id int)`,
  `CREATE TEMP TABLE intruder (id int)`,
  `CREATE SCHEMA intruder`,
  `ALTER TABLE ${table} ADD COLUMN intruder int`,
  `ALTER TABLE ${idempotencyTable} ADD COLUMN intruder int`,
  `CREATE INDEX intruder_idx ON ${table} (body)`,
  `DROP TABLE ${table}`,
  `TRUNCATE ${table}`,
  `DROP FUNCTION ${claimSignature}`,
  `DELETE FROM ${table}_migrations`
]

const cleanUp = () =>
  Effect.promise(() =>
    asOwner([`DELETE FROM ${table}`, `DELETE FROM ${idempotencyTable}`, `DELETE FROM public.invoices`])
  )

describe("least privilege", () => {
  it.live("neither role can run DDL or the setup: setup-transports is the owner's", () =>
    Effect.gen(function*() {
      for (const role of [roles.producer, roles.worker]) {
        yield* as(
          role,
          Effect.gen(function*() {
            for (const statement of ddl) {
              const error = yield* attempt(statement)
              expect(error.code, `${role}: ${statement}: ${error.message}`).toBe("42501")
            }
            // The product's setup, run by mistake as the role: a typed failure that says why.
            const transport = yield* PgTransport.make({ table })
            const setup = yield* Effect.flip(transport.setup)
            expect(setup._tag).toBe("TransportError")
            expect(setup.message).toMatch(/^Setup of outbox\.messages failed: .*permission denied/)
            const auto = yield* Effect.flip(PgTransport.make({ table, autoSetup: true }))
            expect(auto.message).toContain("permission denied")
            const store = yield* PgIdempotencyStore.make({ table: idempotencyTable })
            expect((yield* Effect.flip(store.setup)).message).toContain("permission denied")
          })
        )
        // No privilege on the migrations tables either: only the setup reads them (the layers read nothing at start).
        const [privileges] = yield* Effect.promise(() =>
          query<{ any: boolean }>(
            db.url,
            `SELECT bool_or(has_table_privilege($1, t, p)) AS any
             FROM unnest(ARRAY[$2, $3]) t, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p`,
            [role, `${table}_migrations`, `${idempotencyTable}_migrations`]
          )
        )
        expect(privileges!.any).toBe(false)
      }
    }), 60_000)

  it.live(
    "a producer with INSERT only dispatches in its business transaction; it cannot read, claim, ack or delete",
    () =>
      Effect.gen(function*() {
        yield* cleanUp()
        yield* as(
          roles.producer,
          Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            const pay = (orderId: number) =>
              Effect.gen(function*() {
                yield* sql`UPDATE public.orders SET paid = true WHERE id = ${orderId}`
                yield* Outbox.dispatch(new OrderPaid({ orderId, amount: 10 }))
              })
            yield* sql.withTransaction(pay(1))
            yield* sql.withTransaction(Effect.zipRight(pay(2), Effect.fail("rolled back" as const))).pipe(Effect.ignore)
            // Several messages in one statement, and a delayed one.
            yield* sql.withTransaction(
              Effect.flatMap(Outbox.Outbox, (outbox) =>
                outbox.dispatchAll([
                  new OrderPaid({ orderId: 3, amount: 1 }),
                  new OrderPaid({ orderId: 4, amount: 1 })
                ]))
            )
            yield* Outbox.dispatch(new OrderPaid({ orderId: 5, amount: 1 }), { delay: Duration.minutes(1) })

            // What the worker does is refused, through the transport as in raw SQL.
            const transport = yield* Transport
            const claim = yield* Effect.flip(claimWith(transport, "outbox", 10))
            expect(claim._tag).toBe("StorageNotReadyError")
            expect(claim.message).toContain("permission denied for function messages_claim")
            const ack = yield* Effect.flip(transport.ack("outbox", ["1"]))
            expect(ack.message).toContain("permission denied for table messages")
            const stats = yield* Effect.flip(Effect.flatMap(TransportAdmin, (admin) => admin.stats("outbox")))
            expect(stats.message).toContain("permission denied for table messages")
            for (
              const statement of [
                `SELECT * FROM ${table}`,
                `DELETE FROM ${table}`,
                `UPDATE ${table} SET delivered_at = now()`,
                `SELECT * FROM ${table}_claim('outbox', 30000, 10, '{}', false)`,
                `SELECT * FROM ${idempotencyTable}`,
                `INSERT INTO ${idempotencyTable} (message_id, consumer) VALUES (gen_random_uuid(), 'x')`
              ]
            ) {
              const error = yield* attempt(statement)
              expect(error.code, `${statement}: ${error.message}`).toBe("42501")
            }
          }).pipe(Effect.provide(producerStack))
        )
        const stored = yield* Effect.promise(messagesRows)
        expect(stored.map(orderIdOf)).toEqual([1, 3, 4, 5])
        expect(stored.every((row) => row.queue_name === "outbox")).toBe(true)
        const paid = yield* Effect.promise(() => query<{ id: number }>(db.url, "SELECT id FROM orders WHERE paid"))
        expect(paid.map((row) => row.id)).toEqual([1])
      }),
    60_000
  )

  it.live(
    "a producer with INSERT only (nothing a migration adds) dispatches keyed messages in order and wakes a waiting worker",
    () =>
      Effect.gen(function*() {
        yield* cleanUp()
        yield* Effect.promise(() => asOwner([`DELETE FROM ${keySequences}`, `DELETE FROM ${keyStates}`]))
        const produce = (self: Effect.Effect<unknown, unknown, Outbox.Outbox | SqlClient.SqlClient>) =>
          as(roles.producer, Effect.orDie(self).pipe(Effect.provide(producerStack)))
        const paid = (orderId: number) => new OrderPaid({ orderId, amount: 1 })
        // One at a time, and several keys in one statement (a key's places in the order sent).
        yield* produce(Outbox.dispatch(paid(1), { orderingKey: "a" }))
        yield* produce(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql.withTransaction(Effect.flatMap(Outbox.Outbox, (outbox) =>
            Effect.zipRight(
              outbox.dispatch(paid(2), { orderingKey: "b" }),
              outbox.dispatchAll([paid(3), paid(4), paid(5)], { orderingKey: "a" })
            )))))
        const places = yield* Effect.promise(() =>
          query<{ body: string; ordering_key: string; ordering_seq: string }>(
            db.url,
            `SELECT body, ordering_key, ordering_seq FROM ${table} ORDER BY ordering_key, ordering_seq`
          )
        )
        expect(places.map((row) => [row.ordering_key, orderIdOf(row)])).toEqual([
          ["a", 1],
          ["a", 3],
          ["a", 4],
          ["a", 5],
          ["b", 2]
        ])

        // A worker waits (polling once a minute) until a keyed dispatch, then a plain one, wakes it.
        const handled: Array<number> = []
        const handlers = [Handlers.handler(OrderPaid, (m) =>
          Effect.sync(() => void handled.push(m.orderId)))]
        const drained = yield* as(
          roles.worker,
          Worker.run({ transports: ["outbox"], stopWhenEmpty: true, idempotencyPurge: false }).pipe(
            Effect.provide(workerStack(handlers))
          )
        )
        expect(drained.handled).toBe(5)
        for (const [orderId, orderingKey] of [[6, "c"], [7, undefined]] as const) {
          const worker = yield* as(
            roles.worker,
            Worker.run({ transports: ["outbox"], limit: 1, sleep: "1 minute", idempotencyPurge: false }).pipe(
              Effect.provide(workerStack(handlers))
            )
          ).pipe(Effect.fork)
          yield* Effect.promise(() =>
            query<{ listening: boolean }>(
              db.url,
              `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE usename = $1
                 AND application_name = 'effect-outbox listener' AND query LIKE 'LISTEN%')
                 AND EXISTS (SELECT 1 FROM ${waitingWorkers} WHERE expires_at > now()) AS listening`,
              [roles.worker]
            )
          ).pipe(
            Effect.repeat({ until: (rows) => rows[0]!.listening, schedule: Schedule.spaced("20 millis") }),
            Effect.timeout("20 seconds")
          )
          yield* produce(
            Outbox.dispatch(paid(orderId), orderingKey === undefined ? {} : { orderingKey })
          )
          // Long before the minute of polling: the table's trigger notified it.
          expect(yield* Fiber.join(worker).pipe(Effect.timeout("15 seconds"))).toMatchObject({ handled: 1 })
        }
        expect(handled.filter((orderId) => [1, 3, 4, 5].includes(orderId))).toEqual([1, 3, 4, 5])
        expect([...handled].sort()).toEqual([1, 2, 3, 4, 5, 6, 7])
      }),
    60_000
  )

  it.live(
    "a worker with the documented grants consumes: handled, retried, failed, dedupe, lease renewal, release, LISTEN, purge",
    () =>
      Effect.gen(function*() {
        yield* cleanUp()
        const log = recording()
        const audited: Array<number> = []
        const leases: Array<number> = []
        /** Whether message 7 was held (claimed with 6, in one batch) while 6 ran. */
        let heldWhileSixRan = false
        const sixRunning = yield* Deferred.make<void>()
        const deliveredAt = (orderId: number) =>
          Effect.promise(() =>
            query<{ at: Date }>(db.url, `SELECT delivered_at AS at FROM ${table} WHERE body LIKE $1`, [
              `%"orderId":${orderId},%`
            ])
          ).pipe(Effect.map((rows) => rows[0]?.at?.getTime() ?? 0))
        const handlers = [
          Handlers.handler(OrderPaid, (paid, envelope) =>
            Effect.gen(function*() {
              const sql = yield* SqlClient.SqlClient
              yield* sql`INSERT INTO public.invoices (order_id, message_id)
                VALUES (${paid.orderId}, ${envelope.messageId}::uuid)`
              if (paid.orderId === 6) {
                heldWhileSixRan = (yield* deliveredAt(7)) > 0
                yield* Deferred.succeed(sixRunning, undefined)
                yield* Effect.sleep("300 millis")
              }
              if (paid.orderId === 2) {
                // A slow handler: its lease (900 ms) is renewed while it runs.
                leases.push(yield* deliveredAt(2))
                yield* Effect.sleep("1200 millis")
                leases.push(yield* deliveredAt(2))
              }
              if (paid.orderId === 3 && envelope.deliveries === 1) {
                // Rolls back the invoice and the dedupe record; the retry runs it again.
                return yield* new RecoverableMessageHandlingError({ message: "try again", retryDelay: Duration.zero })
              }
            }), { name: "invoices", idempotent: true }),
          Handlers.handler(OrderPaid, (paid) =>
            paid.orderId === 4
              ? Effect.fail(new UnrecoverableMessageHandlingError({ message: "audit refused" }))
              : Effect.sync(() => void audited.push(paid.orderId)), { name: "audit" })
        ]
        const produce = (self: Effect.Effect<unknown, unknown, Outbox.Outbox | SqlClient.SqlClient>) =>
          as(roles.producer, Effect.orDie(self).pipe(Effect.provide(producerStack)))
        const dispatchAll = (orderIds: ReadonlyArray<number>) =>
          produce(Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql.withTransaction(Effect.flatMap(
              Outbox.Outbox,
              (outbox) => outbox.dispatchAll(orderIds.map((orderId) => new OrderPaid({ orderId, amount: 1 })))
            ))))
        yield* dispatchAll([1, 2, 3, 4])
        // Kept by the owner to deliver message 1 again on purpose, as a crash before its ack would.
        const first = (yield* Effect.promise(messagesRows)).find((row) => orderIdOf(row) === 1)

        const summary = yield* as(
          roles.worker,
          Worker.run({
            transports: ["outbox"],
            limit: 5,
            sleep: "10 millis",
            idempotencyPurge: { every: "100 millis" }
          }).pipe(Effect.provide(workerStack(handlers)), Effect.timeout("30 seconds"))
        ).pipe(Effect.provide(log.layer))
        expect(summary).toMatchObject({ handled: 3, retried: 1, failed: 1, stoppedBy: "limit" })
        expect(leases).toHaveLength(2)
        expect(leases[1]!).toBeGreaterThan(leases[0]!)
        const [failed, ...others] = yield* Effect.promise(messagesRows)
        expect(others).toEqual([])
        expect(orderIdOf(failed!)).toBe(4)
        expect(failed!.queue_name).toBe("failed")
        expect(JSON.parse(failed!.headers).errorDetails.message).toBe("audit refused")
        const invoices = () =>
          Effect.promise(() =>
            query<{ order_id: number; n: number }>(
              db.url,
              "SELECT order_id, count(*)::int AS n FROM invoices GROUP BY order_id ORDER BY order_id"
            )
          )
        expect(yield* invoices()).toEqual([1, 2, 3, 4].map((order_id) => ({ order_id, n: 1 })))

        // Message 1 again (same message id): the idempotent consumer skips it. Then the worker waits (sleep: one
        // minute) until the producer's dispatch wakes it through LISTEN/NOTIFY.
        yield* Effect.promise(() =>
          query(
            db.url,
            `INSERT INTO ${table} (message_id, body, headers, queue_name, available_at)
             VALUES ($1::uuid, $2, $3, 'outbox', now())`,
            [first!.message_id, first!.body, first!.headers]
          )
        )
        const second = yield* as(
          roles.worker,
          Worker.run({ transports: ["outbox"], limit: 2, sleep: "1 minute", idempotencyPurge: false }).pipe(
            Effect.provide(workerStack(handlers))
          )
        ).pipe(Effect.provide(log.layer), Effect.fork)
        const waiting = Effect.promise(() =>
          query<{ listening: boolean; pending: number }>(
            db.url,
            `SELECT
               EXISTS (SELECT 1 FROM pg_stat_activity WHERE usename = $1
                 AND application_name = 'effect-outbox listener' AND query LIKE 'LISTEN%') AS listening,
               (SELECT count(*)::int FROM ${table} WHERE queue_name = 'outbox') AS pending`,
            [roles.worker]
          )
        ).pipe(
          Effect.map((rows) => rows[0]!),
          Effect.repeat({ until: (s) => s.listening && s.pending === 0, schedule: Schedule.spaced("50 millis") }),
          Effect.timeout("20 seconds")
        )
        yield* waiting
        yield* Effect.sleep("300 millis")
        yield* produce(Outbox.dispatch(new OrderPaid({ orderId: 5, amount: 1 })))
        // Long before the minute of polling: the notification woke it.
        const woken = yield* Fiber.join(second).pipe(Effect.timeout("15 seconds"))
        expect(woken).toMatchObject({ handled: 2, retried: 0, failed: 0, stoppedBy: "limit" })
        expect(yield* invoices()).toEqual([1, 2, 3, 4, 5].map((order_id) => ({ order_id, n: 1 })))
        expect(audited.filter((orderId) => orderId === 1)).toHaveLength(2)

        // Stopped (SIGTERM) while 6 runs, with 7 claimed in the same batch but not started: 6 finishes and is acked,
        // 7 is given back at once (release).
        yield* dispatchAll([6, 7])
        const third = yield* as(
          roles.worker,
          Worker.run({ transports: ["outbox"], sleep: "10 millis", idempotencyPurge: false }).pipe(
            Effect.provide(workerStack(handlers))
          )
        ).pipe(Effect.provide(log.layer), Effect.fork)
        yield* Deferred.await(sixRunning).pipe(Effect.timeout("20 seconds"))
        yield* Fiber.interrupt(third).pipe(Effect.timeout("20 seconds"))
        expect(heldWhileSixRan).toBe(true)
        const released = yield* Effect.promise(() =>
          query<{ body: string; delivered_at: Date | null }>(
            db.url,
            `SELECT body, delivered_at FROM ${table} WHERE queue_name = 'outbox'`
          )
        )
        expect(released.map((row) => [orderIdOf(row), row.delivered_at])).toEqual([[7, null]])

        // The retention purge, as the worker: every record goes (1, 2, 3, 5, 6) but message 4's, still stored (in the
        // failure queue).
        const purged = yield* as(
          roles.worker,
          Effect.flatMap(IdempotencyStore, (store) => store.purgeExclusive({ olderThan: 0 })).pipe(
            Effect.provide(PgIdempotencyStore.layer({ table: idempotencyTable, messagesTable: table })),
            Effect.orDie
          )
        )
        expect(purged).toEqual(Option.some(5))
        const kept = yield* Effect.promise(() =>
          query<{ message_id: string }>(db.url, `SELECT message_id::text FROM ${idempotencyTable}`)
        )
        expect(kept.map((row) => row.message_id)).toEqual([failed!.message_id])

        // No background write of the worker (acks, lease renewal, releases, the purge job) was refused.
        const refused = log.lines.filter((line) =>
          /permission denied|failed, the messages|renewal failed|purge failed|restarting the loop/.test(line)
        )
        expect(refused).toEqual([])
      }),
    90_000
  )

  it.live(
    "the operator commands run with the worker's grants; setup-transports does not",
    () =>
      Effect.gen(function*() {
        yield* cleanUp()
        yield* as(
          roles.producer,
          Effect.forEach([8, 9], (orderId) => Outbox.dispatch(new OrderPaid({ orderId, amount: 1 }))).pipe(
            Effect.provide(producerStack)
          )
        )
        const refuse = Handlers.handler(
          OrderPaid,
          () => Effect.fail(new UnrecoverableMessageHandlingError({ message: "refused" }))
        )
        yield* as(
          roles.worker,
          Worker.run({ transports: ["outbox"], limit: 2, sleep: "10 millis", idempotencyPurge: false }).pipe(
            Effect.provide(workerStack([refuse])),
            Effect.timeout("30 seconds")
          )
        ).pipe(Effect.provide(recording().layer))
        const [eight, nine] = yield* Effect.promise(messagesRows)
        expect([eight, nine].map((row) => row!.queue_name)).toEqual(["failed", "failed"])
        const cli = Cli.make({ transport: { table }, idempotency: { table: idempotencyTable, messagesTable: table } })
        const run = (...args: Array<string>) => runCli(cli, [...args, "--dsn", urlOf(roles.worker)])
        for (
          const [args, output] of [
            [["stats"], "outbox"],
            [["failed:show"], "There are 2 messages"],
            [["failed:retry", eight!.id, "--force"], `sent back to "outbox"`],
            [["failed:remove", nine!.id, "--force"], "1 message(s) removed"],
            [["idempotency:purge", "--older-than", "1d"], "[OK] Deleted 0 record(s)"]
          ] as const
        ) {
          const result = yield* run(...args)
          const failure = Exit.isFailure(result.exit) ? describeCause(result.exit.cause) : ""
          expect(Exit.isSuccess(result.exit), `${args.join(" ")}: ${failure}`).toBe(true)
          expect(result.stdout).toContain(output)
        }
        const left = yield* Effect.promise(messagesRows)
        expect(left.map((row) => [orderIdOf(row), row.queue_name])).toEqual([[8, "outbox"]])
        // The setup is the owner's: run as the worker, it fails and says why.
        const setup = yield* run("setup-transports")
        expect(Exit.isFailure(setup.exit)).toBe(true)
        expect(describeCause(Exit.isFailure(setup.exit) ? setup.exit.cause : Cause.empty)).toContain(
          "permission denied"
        )
      }),
    60_000
  )

  it.live(
    "every documented grant is needed: without it, what uses it fails at once with the permission error",
    () =>
      Effect.gen(function*() {
        const grants = documented(databaseName())
        const transport = PgTransport.layer({ table })
        const claim = (acks: ReadonlyArray<string> = []) =>
          Effect.flatMap(Transport, (t) => claimWith(t, "outbox", 1, acks)).pipe(Effect.provide(transport))
        const store = PgIdempotencyStore.layer({ table: idempotencyTable, messagesTable: table })
        const runOnce = Effect.flatMap(
          IdempotencyStore,
          (s) => s.runOnce({ messageId: MessageId.make(), consumer: "probe" }, Effect.void)
        ).pipe(Effect.provide(store))
        const purge = Effect.flatMap(IdempotencyStore, (s) => s.purgeExclusive({ olderThan: 0 })).pipe(
          Effect.provide(store)
        )
        const keyed = Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }), { orderingKey: "probe" }).pipe(
          Effect.provide(producerStack)
        )
        // A due key with no message left: the claim looks at its sequence and deletes it.
        const emptyKey = [
          `INSERT INTO ${keySequences} VALUES ('outbox', 'probe-empty', 1) ON CONFLICT DO NOTHING`,
          `INSERT INTO ${keyStates} VALUES ('outbox', 'probe-empty', now() - interval '1 hour', NULL)
             ON CONFLICT (queue_name, ordering_key) DO UPDATE SET due_at = now() - interval '1 hour', blocked_by = NULL`
        ]
        // A keyed message in the failure queue, moved back by the operator (its key gets a row where it goes).
        const failedKeyed = [
          `DELETE FROM ${table} WHERE id = 9000000000001`,
          `DELETE FROM ${keyStates} WHERE ordering_key = 'probe-move'`,
          `INSERT INTO ${table} (id, message_id, body, headers, queue_name, available_at, ordering_key, ordering_seq)
             VALUES (9000000000001, gen_random_uuid(), '{"_tag":"OrderPaid","orderId":1,"amount":1}',
               '{"type":"OrderPaid"}', 'failed', now(), 'probe-move', 1)`
        ]
        const moveBack = Effect.flatMap(
          TransportAdmin,
          (admin) =>
            admin.move("failed", "9000000000001", { to: "outbox", headers: new Headers({ type: "OrderPaid" }) })
        ).pipe(Effect.provide(transport))
        // A session's wait announces it (producers then notify its queue).
        const announceWait = Effect.flatMap(
          Transport,
          (t) => Effect.scoped(Effect.flatMap(t.open(["outbox"]), (session) => session.wait(Duration.millis(10))))
        ).pipe(
          Effect.provide(transport)
        )
        const cases: ReadonlyArray<{
          readonly role: "producer" | "worker"
          readonly missing: Grant
          readonly setup?: ReadonlyArray<string>
          readonly run: Effect.Effect<unknown, unknown, SqlClient.SqlClient>
          readonly error: string
        }> = [
          {
            role: "producer",
            missing: grants.producer[2]!,
            run: Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })).pipe(Effect.provide(producerStack)),
            error: "permission denied for table messages"
          },
          {
            role: "producer",
            missing: grants.producer[2]!,
            run: keyed,
            error: "permission denied for table messages"
          },
          { role: "worker", missing: grants.worker[0]!, run: claim(), error: "permission denied for database" },
          { role: "worker", missing: grants.worker[1]!, run: claim(), error: "permission denied for schema outbox" },
          { role: "worker", missing: grants.worker[2]!, run: claim(), error: "permission denied for table messages" },
          { role: "worker", missing: grants.worker[3]!, run: claim(), error: "permission denied for table messages" },
          {
            role: "worker",
            missing: grants.worker[4]!,
            run: claim(["9223372036854775807"]),
            error: "permission denied for table messages"
          },
          {
            role: "worker",
            missing: grants.worker[5]!,
            run: claim(),
            error: "permission denied for function messages_claim"
          },
          ...[6, 7].map((i) => ({
            role: "worker" as const,
            missing: grants.worker[i]!,
            setup: emptyKey,
            run: claim(),
            error: "permission denied for table messages_key_seq"
          })),
          {
            role: "worker",
            missing: grants.worker[8]!,
            run: claim(),
            error: "permission denied for table messages_keys"
          },
          {
            role: "worker",
            missing: grants.worker[9]!,
            setup: failedKeyed,
            run: moveBack,
            error: "permission denied for table messages_keys"
          },
          {
            role: "worker",
            missing: grants.worker[10]!,
            run: claim(),
            error: "permission denied for table messages_keys"
          },
          {
            role: "worker",
            missing: grants.worker[11]!,
            setup: emptyKey,
            run: claim(),
            error: "permission denied for table messages_keys"
          },
          ...[12, 13].map((i) => ({
            role: "worker" as const,
            missing: grants.worker[i]!,
            run: runOnce,
            error: "permission denied for table outbox_idempotency"
          })),
          ...[14, 15].map((i) => ({
            role: "worker" as const,
            missing: grants.worker[i]!,
            run: purge,
            error: "permission denied for table outbox_idempotency"
          })),
          ...[16, 17, 18, 19].map((i) => ({
            role: "worker" as const,
            missing: grants.worker[i]!,
            run: announceWait,
            error: "permission denied for table messages_waiting"
          }))
        ]
        // Every entry of the documented lists has its case.
        expect(cases.map((c) => c.missing)).toEqual([
          ...grants.producer.slice(2),
          ...grants.producer.slice(2),
          ...grants.worker
        ])
        for (const c of cases) {
          const label = `${c.role} without ${c.missing.privilege} ON ${c.missing.on}`
          yield* Effect.promise(() =>
            asOwner([
              ...revokeAll(roles.probe),
              ...grant(grants[c.role].filter((g) => g !== c.missing), roles.probe),
              ...(c.setup ?? [])
            ])
          )
          const exit = yield* as(roles.probe, c.run).pipe(Effect.timeout("15 seconds"), Effect.exit)
          expect(Exit.isFailure(exit), label).toBe(true)
          if (Exit.isSuccess(exit)) continue
          const failure = describeCause(exit.cause)
          expect(failure, label).not.toContain("TimeoutException")
          expect(failure, label).toContain(c.error)
        }
      }),
    90_000
  )

  it.live("a worker missing a grant says which at once, and handles nothing", () =>
    Effect.gen(function*() {
      yield* cleanUp()
      yield* Effect.promise(() =>
        asOwner([
          ...revokeAll(roles.probe),
          ...grant(documented(databaseName()).worker.filter((g) => g.privilege !== "EXECUTE"), roles.probe)
        ])
      )
      yield* as(
        roles.producer,
        Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })).pipe(Effect.provide(producerStack))
      )
      const log = recording()
      let handled = 0
      const exit = yield* as(
        roles.probe,
        Worker.run({ transports: ["outbox"], sleep: "10 millis", idempotencyPurge: false }).pipe(
          Effect.provide(workerStack([Handlers.handler(OrderPaid, () => Effect.sync(() => void handled++))])),
          Effect.timeout("3 seconds"),
          Effect.exit
        )
      ).pipe(Effect.provide(log.layer))
      expect(handled).toBe(0)
      expect(yield* Effect.promise(messagesRows)).toHaveLength(1)
      // Its first claim is refused and the log says so at once, naming the object of the missing privilege.
      expect(log.lines.some((line) => line.includes("permission denied for function messages_claim"))).toBe(true)
      // It stops at once with a typed error naming what is missing: retrying cannot grant a privilege.
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isSuccess(exit)) return
      const failure = Cause.failureOption(exit.cause)
      expect(Option.map(failure, (error) => error._tag)).toEqual(Option.some("StorageNotReadyError"))
      expect(describeCause(exit.cause)).toContain("permission denied for function messages_claim")
      expect(describeCause(exit.cause)).toContain(`"Least privilege"`)
      expect(log.lines.filter((line) => line.includes("restarting the loop"))).toEqual([])
    }), 60_000)
})
