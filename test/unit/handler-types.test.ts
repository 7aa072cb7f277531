/**
 * The types users write against: a handler's error and requirement types are inferred from whatever effect it
 * returns (a conditional of several effects, a value it succeeds with), they flow into `Handlers.layer`, and
 * `Outbox.dispatch` takes schema class instances, not plain objects. `tsc --noEmit` (test/ is in tsconfig)
 * checks the `expectTypeOf` assertions and the `@ts-expect-error` lines; the tests run the same handlers and
 * dispatches on the in-memory layers, so what compiles also works.
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { describe, expect, expectTypeOf, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { Envelope } from "../../src/domain/Envelope.js"
import {
  MessageEncodeError,
  type OutboxConfigError,
  UnrecoverableMessageHandlingError
} from "../../src/domain/Errors.js"
import type * as Message from "../../src/domain/Message.js"
import type * as MessageId from "../../src/domain/MessageId.js"
import * as MemoryIdempotencyStore from "../../src/layers/MemoryIdempotencyStore.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as IdempotencyStore from "../../src/services/IdempotencyStore.js"
import * as Outbox from "../../src/services/Outbox.js"
import { OrderPaid, OrderShipped } from "../support/messages.js"

/** A service of the application, as a handler would need it. */
class Invoices extends Context.Tag("test/Invoices")<Invoices, {
  readonly issue: (orderId: number) => Effect.Effect<void, SqlError>
  readonly list: Effect.Effect<ReadonlyArray<{ readonly orderId: number }>>
}>() {}

const issued: Array<number> = []
const InvoicesLive = Layer.succeed(Invoices, {
  issue: (orderId) =>
    orderId === 13
      ? Effect.fail(new SqlError({ message: "unlucky order" }))
      : Effect.sync(() => void issued.push(orderId)),
  list: Effect.sync(() => issued.map((orderId) => ({ orderId })))
})

const issue = (orderId: number) => Effect.flatMap(Invoices, (invoices) => invoices.issue(orderId))

// A conditional of two effects: the error type is the union of both branches' (TS2375 when E came from one).
const guarded = Handlers.handler(OrderPaid, (paid) =>
  paid.amount < 0
    ? Effect.fail(new UnrecoverableMessageHandlingError({ message: "negative amount" }))
    : issue(paid.orderId))

// An effect that succeeds with rows: the value is ignored.
const listing = Handlers.handler(OrderShipped, () => Effect.flatMap(Invoices, (invoices) => invoices.list))

// Idempotent, with a typed error of its own and the envelope used.
const idempotent = Handlers.handler(
  OrderPaid,
  (paid, envelope) => envelope.messageId.length > 0 ? issue(paid.orderId) : Effect.die("no message id"),
  { name: "invoices", idempotent: true }
)

describe("handler types", () => {
  it("infer the error of every branch and the services of the handler", () => {
    expectTypeOf(guarded).toEqualTypeOf<
      Handlers.Handler<OrderPaid, UnrecoverableMessageHandlingError | SqlError, Invoices>
    >()
    expectTypeOf(guarded.handle).parameters.toEqualTypeOf<[OrderPaid, Envelope<OrderPaid>]>()
  })

  it("accept a handler that succeeds with a value", () => {
    expectTypeOf(listing).toEqualTypeOf<Handlers.Handler<OrderShipped, never, Invoices>>()
    expectTypeOf(listing.handle).returns.toEqualTypeOf<Effect.Effect<unknown, never, Invoices>>()
  })

  it("accept a handler that returns an SQL statement (an effect of its rows)", () => {
    // Only the types matter here: the handler is declared, never run.
    const sql = undefined as unknown as SqlClient.SqlClient
    const insert = Handlers.handler(
      OrderPaid,
      (paid, envelope) => sql`INSERT INTO invoices VALUES (${paid.orderId}, ${envelope.messageId})`,
      { name: "invoices", idempotent: true }
    )
    expectTypeOf(insert).toEqualTypeOf<
      Handlers.Handler<OrderPaid, Handlers.IdempotentError<SqlError>, IdempotencyStore.IdempotencyStore>
    >()
  })

  it("add the idempotency store's errors and service to an idempotent handler's own", () => {
    expectTypeOf(idempotent).toEqualTypeOf<
      Handlers.Handler<
        OrderPaid,
        Handlers.IdempotentError<SqlError>,
        Invoices | IdempotencyStore.IdempotencyStore
      >
    >()
  })

  it("let IdempotencyStore.idempotent take any effect, like handler", () => {
    const wrapped = Handlers.handler(
      OrderPaid,
      IdempotencyStore.idempotent("invoices")((paid) =>
        paid.amount < 0
          ? Effect.fail(new UnrecoverableMessageHandlingError({ message: "negative amount" }))
          : Effect.flatMap(Invoices, (invoices) => invoices.list)
      ),
      { name: "invoices" }
    )
    expectTypeOf(wrapped).toEqualTypeOf<
      Handlers.Handler<
        OrderPaid,
        Handlers.IdempotentError<UnrecoverableMessageHandlingError>,
        Invoices | IdempotencyStore.IdempotencyStore
      >
    >()
  })

  it("make Handlers.layer require the services the handlers need", () => {
    const handlers = Handlers.layer([guarded, listing, idempotent])
    expectTypeOf(handlers).toEqualTypeOf<
      Layer.Layer<Handlers.Handlers, OutboxConfigError, Invoices | IdempotencyStore.IdempotencyStore>
    >()
    expectTypeOf(Handlers.layer([listing])).toEqualTypeOf<
      Layer.Layer<Handlers.Handlers, OutboxConfigError, Invoices>
    >()
    expectTypeOf(Handlers.layer([Handlers.handler(OrderPaid, () => Effect.void)])).toEqualTypeOf<
      Layer.Layer<Handlers.Handlers, OutboxConfigError, never>
    >()
  })

  it("reject a handler that does not return an effect", () => {
    // @ts-expect-error a number is not an effect
    Handlers.handler(OrderPaid, () => 42)
    // @ts-expect-error a promise is not an effect
    Handlers.handler(OrderPaid, () => Promise.resolve())
    // @ts-expect-error nothing is not an effect either
    Handlers.handler(OrderPaid, () => {})
    // @ts-expect-error the message parameter is the class's instance type
    Handlers.handler(OrderPaid, (paid: OrderShipped) => Effect.log(paid.carrier))
  })

  it.effect("run: each handler's outcome follows from its effect, the success values ignored", () =>
    Effect.gen(function*() {
      issued.length = 0
      const summary = yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: -5 }))
        yield* Outbox.dispatch(new OrderShipped({ orderId: 1, carrier: "ups" }))
        return yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })
      }).pipe(
        Effect.provide(
          Layer.mergeAll(Outbox.layer(), Handlers.layer([guarded, listing]), ScheduleRetryStrategy.layerDefault).pipe(
            Layer.provideMerge(MemoryTransport.layer()),
            Layer.provide(InvoicesLive)
          )
        )
      )
      expect(summary).toMatchObject({ handled: 2, retried: 0, failed: 1 })
      expect(issued).toEqual([1])
    }))

  it.effect("run: an idempotent handler issues once per message", () =>
    Effect.gen(function*() {
      issued.length = 0
      const summary = yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new OrderPaid({ orderId: 7, amount: 5 }))
        return yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })
      }).pipe(
        Effect.provide(
          Layer.mergeAll(Outbox.layer(), Handlers.layer([idempotent]), ScheduleRetryStrategy.layerDefault).pipe(
            Layer.provideMerge(MemoryTransport.layer()),
            Layer.provide(Layer.merge(InvoicesLive, MemoryIdempotencyStore.layer()))
          )
        )
      )
      expect(summary).toMatchObject({ handled: 1, retried: 0, failed: 0 })
      expect(issued).toEqual([7])
    }))
})

describe("dispatch types", () => {
  it("accept schema class instances, one or several, of one class or several", () => {
    expectTypeOf(Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))).toEqualTypeOf<
      Effect.Effect<MessageId.MessageId, Outbox.DispatchError, Outbox.Outbox>
    >()
    const both = [new OrderPaid({ orderId: 1, amount: 5 }), new OrderShipped({ orderId: 1, carrier: "ups" })]
    Effect.flatMap(Outbox.Outbox, (outbox) => outbox.dispatchAll(both))
    Effect.flatMap(Outbox.Outbox, (outbox) => outbox.dispatchAll([new OrderPaid({ orderId: 1, amount: 5 })]))
    // A value whose type says it is a message (a router's, a forwarder's) is accepted too.
    const tagged: Message.Tagged = new OrderPaid({ orderId: 1, amount: 5 })
    Outbox.dispatch(tagged)
    // A generic helper hands its message on by taking MessageInstance<M>.
    const send = <M extends Message.Tagged>(message: Outbox.MessageInstance<M>) => Outbox.dispatch(message)
    send(new OrderShipped({ orderId: 1, carrier: "ups" }))
    // @ts-expect-error and rejects plain objects the same way
    send({ _tag: "OrderShipped", orderId: 1, carrier: "ups" })
  })

  it("reject plain object literals", () => {
    // @ts-expect-error a plain object is not a schema class instance
    Outbox.dispatch({ _tag: "OrderPaid", orderId: 1, amount: 5 })
    const plain = { _tag: "OrderPaid", orderId: 1, amount: 5 }
    // @ts-expect-error nor is a variable holding one
    Outbox.dispatch(plain)
    Effect.flatMap(Outbox.Outbox, (outbox) =>
      // @ts-expect-error nor is one among instances
      outbox.dispatchAll([new OrderPaid({ orderId: 1, amount: 5 }), { _tag: "OrderShipped", orderId: 1 }]))
    Effect.flatMap(Outbox.Outbox, (outbox) =>
      // @ts-expect-error nor is one given to the service's dispatch
      outbox.dispatch({ _tag: "OrderPaid" }))
  })

  it.effect("run: a plain object that gets past the compiler fails with MessageEncodeError", () =>
    Effect.gen(function*() {
      // Cast on purpose: the run-time check is what stands behind JavaScript callers.
      const plain = { _tag: "OrderPaid", orderId: 1, amount: 5 } as unknown as OrderPaid
      const error = yield* Effect.flip(Outbox.dispatch(plain))
      expect(error).toBeInstanceOf(MessageEncodeError)
      expect(error.message).toContain("not an instance of a Schema class")
    }).pipe(Effect.provide(Outbox.layer().pipe(Layer.provideMerge(MemoryTransport.layer())))))
})
