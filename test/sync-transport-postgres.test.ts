/**
 * The sync transport on a real PostgreSQL, beside the PostgreSQL outbox: a sync handler's SQL runs in the
 * caller's transaction — it commits and rolls back with the business change — inside a savepoint of the dispatch.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SyncHandlingError } from "../src/domain/SyncErrors.js"
import * as PgIdempotencyStore from "../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as SyncTransport from "../src/layers/SyncTransport.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as IdempotencyStore from "../src/services/IdempotencyStore.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import { testDatabase } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const { withPg } = testDatabase("sync_transport")

class SendReceipt extends Schema.TaggedClass<SendReceipt>()("SendReceipt", { orderId: Schema.Int }) {}

class PrinterJammed extends Schema.TaggedError<PrinterJammed>()("PrinterJammed", { message: Schema.String }) {}

/** Orders 1–5 unpaid, no receipt; the receipt handler inserts, then jams on order 5 (after its insert). */
const fixture = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const name = uniqueTable("sync")
  const orders = `${name}_orders`
  const receipts = `${name}_receipts`
  yield* sql`CREATE TABLE ${sql(orders)} (id int primary key, paid boolean not null default false)`
  yield* sql`INSERT INTO ${sql(orders)} SELECT g, false FROM generate_series(1, 5) g`
  yield* sql`CREATE TABLE ${sql(receipts)} (order_id int primary key, message_id uuid not null, paid boolean)`
  const seen: Array<number> = []
  const issueReceipt = (m: SendReceipt, envelope: { readonly messageId: string }) =>
    Effect.gen(function*() {
      seen.push(m.orderId)
      // Reads the caller's uncommitted UPDATE: the handler runs on the caller's transaction.
      yield* sql`INSERT INTO ${sql(receipts)}
        SELECT ${m.orderId}, ${envelope.messageId}, paid FROM ${sql(orders)} WHERE id = ${m.orderId}`
      if (m.orderId === 5) return yield* new PrinterJammed({ message: `receipt ${m.orderId} jammed` })
    })
  const store = `${name}_idem`
  const stack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(handlers: Hs) =>
    Layer.mergeAll(
      Outbox.layer({ routes: { SendReceipt: ["sync"] } }),
      ScheduleRetryStrategy.layerDefault
    ).pipe(
      Layer.provideMerge(TransportRouter.layer(PgTransport.make({ table: name }), SyncTransport.make())),
      Layer.provideMerge(Handlers.layer(handlers)),
      Layer.provideMerge(PgIdempotencyStore.layer({ table: store, autoSetup: true }))
    )
  const pay = (orderId: number) => sql`UPDATE ${sql(orders)} SET paid = true WHERE id = ${orderId}`
  const state = Effect.gen(function*() {
    const paid = yield* sql<{ id: number }>`SELECT id FROM ${sql(orders)} WHERE paid ORDER BY id`
    const issued = yield* sql<{ order_id: number; paid: boolean }>`
      SELECT order_id, paid FROM ${sql(receipts)} ORDER BY order_id`
    const stored = yield* sql<{ type: string }>`
      SELECT headers::jsonb->>'type' AS type FROM ${sql(name)} ORDER BY id`
    return {
      paid: paid.map((r) => r.id),
      receipts: issued.map((r) => [r.order_id, r.paid]),
      stored: stored.map((r) => r.type)
    }
  })
  return { sql, seen, issueReceipt, stack, pay, state, store, receipts }
})

const setup = Effect.flatMap(TransportAdmin, (admin) => admin.setup)

/** The SyncHandlingError `self` fails with (a defect when it fails otherwise or succeeds). */
const handlingError = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.flatMap(
    Effect.flip(SyncHandlingError.surface(self)),
    (error) => error instanceof SyncHandlingError ? Effect.succeed(error) : Effect.die(error)
  )

describe("sync transport on PostgreSQL", () => {
  it.live("a sync handler's insert commits with the caller's transaction, and rolls back with it", () =>
    withPg(Effect.gen(function*() {
      const { issueReceipt, pay, seen, sql, stack, state } = yield* fixture
      yield* Effect.gen(function*() {
        yield* setup
        // Committed: the order is paid, the receipt (which saw the payment) issued.
        yield* sql.withTransaction(Effect.zipRight(pay(1), Outbox.dispatch(new SendReceipt({ orderId: 1 }))))
        // The caller fails after the dispatch: both roll back, though the handler ran.
        const rolledBack = yield* Effect.flip(sql.withTransaction(
          pay(2).pipe(
            Effect.zipRight(Outbox.dispatch(new SendReceipt({ orderId: 2 }))),
            Effect.zipRight(Effect.fail("abort"))
          )
        ))
        expect(rolledBack).toBe("abort")
        expect(seen).toEqual([1, 2])
        expect(yield* state).toEqual({ paid: [1], receipts: [[1, true]], stored: [] })
        // Outside a transaction the handler's statement commits on its own.
        yield* Outbox.dispatch(new SendReceipt({ orderId: 3 }))
        expect((yield* state).receipts).toEqual([[1, true], [3, false]])
      }).pipe(Effect.provide(stack([Handlers.handler(SendReceipt, issueReceipt)])))
    })))

  it.live("a handler failure fails the dispatch and rolls the caller's transaction back", () =>
    withPg(Effect.gen(function*() {
      const { issueReceipt, pay, sql, stack, state } = yield* fixture
      yield* Effect.gen(function*() {
        yield* setup
        const error = yield* handlingError(sql.withTransaction(
          Effect.zipRight(pay(5), Outbox.dispatch(new SendReceipt({ orderId: 5 })))
        ))
        expect(error.cause).toBeInstanceOf(PrinterJammed)
        expect(yield* state).toEqual({ paid: [], receipts: [], stored: [] })
      }).pipe(Effect.provide(stack([Handlers.handler(SendReceipt, issueReceipt)])))
    })))

  it.live("a caller that catches the error keeps a usable transaction: the handler's SQL is rolled back to the savepoint", () =>
    withPg(Effect.gen(function*() {
      const { issueReceipt, pay, sql, stack, state } = yield* fixture
      yield* Effect.gen(function*() {
        yield* setup
        // The handler inserted its receipt, then failed: the insert is undone, the payment commits.
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* pay(5)
          const error = yield* handlingError(Outbox.dispatch(new SendReceipt({ orderId: 5 })))
          expect(error._tag).toBe("SyncHandlingError")
        }))
        expect(yield* state).toEqual({ paid: [5], receipts: [], stored: [] })
        // A failed statement in the handler (a duplicate receipt) would abort the whole transaction without the
        // savepoint; with it, the caller's next statement and its COMMIT succeed.
        yield* Outbox.dispatch(new SendReceipt({ orderId: 1 }))
        yield* sql.withTransaction(Effect.gen(function*() {
          const error = yield* handlingError(Outbox.dispatch(new SendReceipt({ orderId: 1 })))
          expect(error.reason.tag).toBe("SqlError")
          expect(error.reason.message).toContain("duplicate key")
          yield* pay(1)
        }))
        expect(yield* state).toEqual({ paid: [1, 5], receipts: [[1, false]], stored: [] })
      }).pipe(Effect.provide(stack([Handlers.handler(SendReceipt, issueReceipt)])))
    })))

  it.live("OrderPaid to the outbox and SendReceipt to sync in one transaction: both or neither", () =>
    withPg(Effect.gen(function*() {
      const { issueReceipt, pay, sql, stack, state } = yield* fixture
      const handledPaid: Array<number> = []
      yield* Effect.gen(function*() {
        yield* setup
        const payAndAnnounce = (orderId: number) =>
          Effect.zipRight(
            pay(orderId),
            Effect.flatMap(Outbox.Outbox, (outbox) =>
              outbox.dispatchAll([new OrderPaid({ orderId, amount: 10 }), new SendReceipt({ orderId })]))
          )
        yield* sql.withTransaction(payAndAnnounce(1))
        yield* Effect.flip(sql.withTransaction(Effect.zipRight(payAndAnnounce(2), Effect.fail("abort"))))
        // The receipt of order 5 fails after the OrderPaid row was written: the transaction takes both back.
        yield* Effect.flip(sql.withTransaction(payAndAnnounce(5)))
        expect(yield* state).toEqual({ paid: [1], receipts: [[1, true]], stored: ["OrderPaid"] })
        expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, idempotencyPurge: false }))
          .toMatchObject({ handled: 1, failed: 0 })
        expect(handledPaid).toEqual([1])
      }).pipe(Effect.provide(stack([
        Handlers.handler(SendReceipt, issueReceipt),
        Handlers.handler(OrderPaid, (m) => Effect.sync(() => void handledPaid.push(m.orderId)))
      ])))
    })))

  it.live("an idempotent sync handler's record commits and rolls back with the caller's transaction", () =>
    withPg(Effect.gen(function*() {
      const { issueReceipt, pay, sql, stack, state } = yield* fixture
      yield* Effect.gen(function*() {
        yield* setup
        const store = yield* IdempotencyStore.IdempotencyStore
        const committed = yield* sql.withTransaction(
          Effect.zipRight(pay(1), Outbox.dispatch(new SendReceipt({ orderId: 1 })))
        )
        let rolledBack = ""
        yield* Effect.flip(sql.withTransaction(Effect.gen(function*() {
          rolledBack = yield* Outbox.dispatch(new SendReceipt({ orderId: 2 }))
          return yield* Effect.fail("abort")
        })))
        expect(yield* store.isProcessed({ messageId: committed, consumer: "receipts" })).toBe(true)
        expect(yield* store.isProcessed({ messageId: rolledBack as never, consumer: "receipts" })).toBe(false)
        expect((yield* state).receipts).toEqual([[1, true]])
      }).pipe(
        Effect.provide(stack([Handlers.handler(SendReceipt, issueReceipt, { name: "receipts", idempotent: true })]))
      )
    })))
})
