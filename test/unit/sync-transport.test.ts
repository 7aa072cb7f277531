/**
 * The sync transport on the in-memory layers: handled at dispatch by the registered handlers, with the worker's
 * decoding and outcome rules, failures back to the caller as a typed error, nothing stored, nothing to consume.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import type { Envelope } from "../../src/domain/Envelope.js"
import {
  MessageDecodeError,
  NoHandlerForMessageError,
  RecoverableMessageHandlingError,
  TransportError,
  UnrecoverableMessageHandlingError
} from "../../src/domain/Errors.js"
import { SyncHandlingError } from "../../src/domain/SyncErrors.js"
import * as MemoryIdempotencyStore from "../../src/layers/MemoryIdempotencyStore.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as SyncTransport from "../../src/layers/SyncTransport.js"
import * as TransportRouter from "../../src/layers/TransportRouter.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as IdempotencyStore from "../../src/services/IdempotencyStore.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport } from "../../src/services/Transport.js"
import { TransportAdmin } from "../../src/services/TransportAdmin.js"
import { exerciseTransport, lease } from "../../src/testing/TransportSuite.js"
import { OrderPaid } from "../support/messages.js"

class SendReceipt extends Schema.TaggedClass<SendReceipt>()("SendReceipt", {
  orderId: Schema.Int
}) {}

/** Another version of SendReceipt, as a consumer built against a newer schema would register it. */
class SendReceiptV2 extends Schema.TaggedClass<SendReceiptV2>()("SendReceipt", {
  orderId: Schema.Int,
  email: Schema.String
}) {}

class Oops extends Schema.TaggedError<Oops>()("Oops", { message: Schema.String }) {}

/** Outbox over a router of the memory transport (`outbox`, `failed`) and the sync transport (`sync`). */
const mixedStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(
  handlers: Hs,
  routes: Record<string, ReadonlyArray<string>> = { SendReceipt: ["sync"] }
) => {
  const handlersLayer = Handlers.layer(handlers, { messages: [SendReceipt, OrderPaid] })
  return Layer.mergeAll(Outbox.layer({ routes }), ScheduleRetryStrategy.layerDefault).pipe(
    Layer.provideMerge(
      Layer.unwrapEffect(Effect.gen(function*() {
        const memory = yield* MemoryTransport.make()
        const router = TransportRouter.make(memory, yield* SyncTransport.make())
        return Layer.effectContext(Effect.map(router, (r) =>
          Context.make(Transport, r).pipe(
            Context.add(TransportAdmin, r),
            Context.add(MemoryTransport.MemoryTransport, memory)
          )))
      }))
    ),
    Layer.provideMerge(handlersLayer)
  )
}

/** Only the sync transport: every message handled at dispatch. */
const syncStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(handlers: Hs) =>
  Outbox.layer({ defaultTransports: ["sync"] }).pipe(
    Layer.provideMerge(SyncTransport.layer()),
    Layer.provideMerge(Handlers.layer(handlers, { messages: [SendReceipt, OrderPaid] }))
  )

/** The SyncHandlingError `self` fails with (a defect when it fails otherwise or succeeds). */
const handlingError = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.flatMap(
    Effect.flip(SyncHandlingError.surface(self)),
    (error) => error instanceof SyncHandlingError ? Effect.succeed(error) : Effect.die(error)
  )

const dispatchReceipt = (orderId = 1) => Outbox.dispatch(new SendReceipt({ orderId }))

describe("sync transport: handling at dispatch", () => {
  it.effect("runs the handler in the dispatching fiber before dispatch returns, with a stored message's envelope", () =>
    Effect.gen(function*() {
      const seen: Array<Envelope> = []
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new SendReceipt({ orderId: 7 }), { headers: { request: "r-1" } })
        expect(seen.length).toBe(1)
        const [envelope] = seen
        expect(envelope!.message).toEqual(new SendReceipt({ orderId: 7 }))
        expect(envelope!.message).toBeInstanceOf(SendReceipt)
        expect(envelope!.messageId).toBe(id)
        expect(envelope!.transport).toBe("sync")
        expect(envelope!.deliveries).toBe(1)
        expect(envelope!.headers.type).toBe("SendReceipt")
        expect(envelope!.headers.custom).toEqual({ request: "r-1" })
        expect(JSON.parse(envelope!.body!)).toEqual({ _tag: "SendReceipt", orderId: 7 })
        yield* Outbox.dispatch(new SendReceipt({ orderId: 8 }))
        expect(seen[1]!.transportId).not.toBe(envelope!.transportId)
      }).pipe(Effect.provide(syncStack([
        Handlers.handler(SendReceipt, (_m, envelope) => Effect.sync(() => void seen.push(envelope)))
      ])))
    }))

  it.effect("gives the handlers the services their layer was built with", () =>
    Effect.gen(function*() {
      class Mailer extends Context.Tag("test/Mailer")<Mailer, { readonly sent: Array<number> }>() {}
      const mailer = { sent: [] as Array<number> }
      const handlers = Handlers.layer([
        Handlers.handler(SendReceipt, (m) =>
          Effect.flatMap(Mailer, (x) => Effect.sync(() => void x.sent.push(m.orderId))))
      ]).pipe(Layer.provide(Layer.succeed(Mailer, mailer)))
      // The dispatching program has no Mailer in its context: the handlers' layer does.
      yield* Outbox.dispatch(new SendReceipt({ orderId: 3 })).pipe(
        Effect.provide(
          Outbox.layer({ defaultTransports: ["sync"] }).pipe(
            Layer.provideMerge(SyncTransport.layer()),
            Layer.provideMerge(handlers)
          )
        )
      )
      expect(mailer.sent).toEqual([3])
    }))

  it.effect("a handler failure fails the dispatch with SyncHandlingError, once, and is never retried", () =>
    Effect.gen(function*() {
      let calls = 0
      yield* Effect.gen(function*() {
        const raw = yield* Effect.flip(Outbox.dispatch(new SendReceipt({ orderId: 1 })))
        // Through the transport contract: a TransportError carrying it.
        expect(raw).toBeInstanceOf(TransportError)
        expect(raw).toMatchObject({ _tag: "TransportError", transport: "sync", operation: "handle" })
        const error = yield* handlingError(dispatchReceipt(2))
        expect(error).toBeInstanceOf(SyncHandlingError)
        expect(error.transport).toBe("sync")
        expect(error.type).toBe("SendReceipt")
        expect(error.reason.tag).toBe("Oops")
        expect(error.reason.message).toBe("no printer")
        expect(error.cause).toBeInstanceOf(Oops)
        expect(error.message).toBe("SendReceipt could not be handled on the sync transport sync: Oops: no printer")
        expect(Option.getOrThrow(SyncHandlingError.fromDispatchError(raw)).messageId).not.toBe(error.messageId)
        // Time passing retries nothing, and nothing was stored anywhere.
        yield* TestClock.adjust("1 hour")
        expect(calls).toBe(2)
        const memory = yield* MemoryTransport.MemoryTransport
        expect(yield* memory.messages).toEqual([])
        expect(yield* Worker.run({ transports: ["outbox", "failed"], stopWhenEmpty: true })).toMatchObject({
          handled: 0,
          failed: 0
        })
      }).pipe(Effect.provide(mixedStack([
        Handlers.handler(
          SendReceipt,
          () => Effect.suspend(() => (calls++, Effect.fail(new Oops({ message: "no printer" }))))
        )
      ])))
    }))

  it.effect("Unrecoverable, Recoverable and defects all surface to the caller, each with its own reason", () =>
    Effect.gen(function*() {
      const failWith = (
        orderId: number
      ): Effect.Effect<void, UnrecoverableMessageHandlingError | RecoverableMessageHandlingError> =>
        orderId === 1
          ? Effect.fail(new UnrecoverableMessageHandlingError({ message: "bad receipt" }))
          : orderId === 2
          ? Effect.fail(
            new RecoverableMessageHandlingError({ message: "printer busy", retryDelay: Duration.seconds(5) })
          )
          : Effect.die(new Error("printer on fire"))
      yield* Effect.gen(function*() {
        const unrecoverable = yield* handlingError(dispatchReceipt(1))
        expect(unrecoverable.reason).toMatchObject({ tag: "UnrecoverableMessageHandlingError", message: "bad receipt" })
        expect(unrecoverable.cause).toBeInstanceOf(UnrecoverableMessageHandlingError)
        const recoverable = yield* handlingError(dispatchReceipt(2))
        expect(recoverable.reason).toMatchObject({ tag: "RecoverableMessageHandlingError", message: "printer busy" })
        expect(recoverable.cause).toBeInstanceOf(RecoverableMessageHandlingError)
        const defect = yield* handlingError(dispatchReceipt(3))
        expect(defect.reason.tag).toBe("Error")
        expect(defect.reason.message).toBe("printer on fire")
        expect(defect.reason.cause).toContain("printer on fire")
        expect((defect.cause as Error).message).toBe("printer on fire")
      }).pipe(Effect.provide(syncStack([Handlers.handler(SendReceipt, (m) => failWith(m.orderId))])))
    }))

  it.effect("every handler of the type runs; the error names the ones that succeeded", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        const error = yield* handlingError(dispatchReceipt())
        expect(ran).toEqual(["print", "mail"])
        expect(error.handledBy).toEqual(["mail"])
        expect(error.reason.tag).toBe("Oops")
      }).pipe(Effect.provide(syncStack([
        Handlers.handler(SendReceipt, () =>
          Effect.zipRight(Effect.sync(() => ran.push("print")), new Oops({ message: "x" })), {
          name: "print"
        }),
        Handlers.handler(SendReceipt, () =>
          Effect.sync(() =>
            void ran.push("mail")
          ), { name: "mail" })
      ])))
    }))

  it.effect("a handler interrupting itself interrupts the dispatch", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(dispatchReceipt()).pipe(
        Effect.provide(syncStack([Handlers.handler(SendReceipt, () => Effect.interrupt)]))
      )
      expect(Exit.isInterrupted(exit)).toBe(true)
    }))
})

describe("sync transport: decoding as for a stored message", () => {
  it.effect("a consumer built against an incompatible schema gets a MessageDecodeError, and its handler never runs", () =>
    Effect.gen(function*() {
      let calls = 0
      yield* Effect.gen(function*() {
        const error = yield* handlingError(dispatchReceipt(4))
        expect(calls).toBe(0)
        expect(error.reason.tag).toBe("MessageDecodeError")
        expect(error.reason.message).toContain("email")
        expect(error.cause).toBeInstanceOf(MessageDecodeError)
        expect((error.cause as MessageDecodeError).reason).toBe("InvalidBody")
        expect(error.handledBy).toEqual([])
      }).pipe(Effect.provide(
        Outbox.layer({ defaultTransports: ["sync"] }).pipe(
          Layer.provideMerge(SyncTransport.layer()),
          Layer.provideMerge(Handlers.layer([Handlers.handler(SendReceiptV2, () => Effect.sync(() => void calls++))]))
        )
      ))
    }))

  it.effect("an unregistered type and a type without a handler from this transport fail the dispatch", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        const unknown = yield* handlingError(Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 })))
        expect(unknown.cause).toMatchObject({ _tag: "MessageDecodeError", reason: "UnknownType" })
        const noHandler = yield* handlingError(dispatchReceipt())
        expect(noHandler.cause).toBeInstanceOf(NoHandlerForMessageError)
        expect(noHandler.reason.message).toBe("No handler for SendReceipt received from transport sync")
      }).pipe(Effect.provide(
        Outbox.layer({ defaultTransports: ["sync"] }).pipe(
          Layer.provideMerge(SyncTransport.layer()),
          Layer.provideMerge(Handlers.layer([
            Handlers.handler(SendReceipt, () => Effect.void, { fromTransport: "outbox" })
          ]))
        )
      ))
    }))

  it.effect("a delayed message is refused before any handler runs", () =>
    Effect.gen(function*() {
      let calls = 0
      const error = yield* Effect.flip(Outbox.dispatch(new SendReceipt({ orderId: 1 }), { delay: "5 seconds" })).pipe(
        Effect.provide(syncStack([Handlers.handler(SendReceipt, () => Effect.sync(() => void calls++))]))
      )
      expect(error).toMatchObject({ _tag: "TransportError", transport: "sync", operation: "send" })
      expect(error.message).toContain("cannot delay")
      expect(calls).toBe(0)
    }))
})

describe("sync transport: beside stored transports", () => {
  it.effect("SendReceipt is handled at dispatch while OrderPaid is stored for the worker", () =>
    Effect.gen(function*() {
      const handled: Array<string> = []
      yield* Effect.gen(function*() {
        const memory = yield* MemoryTransport.MemoryTransport
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 5 }))
        yield* Outbox.dispatch(new SendReceipt({ orderId: 1 }))
        expect(handled).toEqual(["receipt 1 from sync"])
        expect((yield* memory.messagesOf("outbox")).map((m) => JSON.parse(m.headers).type)).toEqual(["OrderPaid"])
        expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })).toMatchObject({ handled: 1 })
        expect(handled).toEqual(["receipt 1 from sync", "paid 1 from outbox"])
      }).pipe(Effect.provide(mixedStack([
        Handlers.handler(
          OrderPaid,
          (m, e) => Effect.sync(() => void handled.push(`paid ${m.orderId} from ${e.transport}`))
        ),
        Handlers.handler(
          SendReceipt,
          (m, e) => Effect.sync(() => void handled.push(`receipt ${m.orderId} from ${e.transport}`))
        )
      ])))
    }))

  it.effect("dispatchAll: one batch per transport, in the order the transports first appear; a failure stops it", () =>
    Effect.gen(function*() {
      const storedWhenHandled: Array<number> = []
      let memory: MemoryTransport.MemoryTransportShape | undefined
      yield* Effect.gen(function*() {
        memory = yield* MemoryTransport.MemoryTransport
        const outbox = yield* Outbox.Outbox
        const stored = Effect.map(memory.messagesOf("outbox"), (rows) => rows.length)
        // outbox first: the receipt's handler already sees the stored OrderPaid.
        yield* outbox.dispatchAll([new OrderPaid({ orderId: 1, amount: 5 }), new SendReceipt({ orderId: 1 })])
        expect(storedWhenHandled).toEqual([1])
        // sync first: both receipts are handled, in order, before OrderPaid 2 is written.
        yield* outbox.dispatchAll([
          new SendReceipt({ orderId: 2 }),
          new OrderPaid({ orderId: 2, amount: 5 }),
          new SendReceipt({ orderId: 3 })
        ])
        expect(storedWhenHandled).toEqual([1, 1, 1])
        expect(yield* stored).toBe(2)
        // A failing receipt stops the dispatch: the OrderPaid after it is not written.
        const error = yield* handlingError(
          outbox.dispatchAll([new SendReceipt({ orderId: -1 }), new OrderPaid({ orderId: 3, amount: 5 })])
        )
        expect(error._tag).toBe("SyncHandlingError")
        expect(yield* stored).toBe(2)
      }).pipe(Effect.provide(mixedStack([
        Handlers.handler(SendReceipt, (m) =>
          m.orderId < 0
            ? Effect.fail(new Oops({ message: "negative" }))
            : Effect.suspend(() =>
              Effect.map(memory!.messagesOf("outbox"), (rows) => void storedWhenHandled.push(rows.length))
            ))
      ])))
    }))

  it.effect("an idempotent handler dedupes by message id across sync and stored deliveries", () =>
    Effect.gen(function*() {
      let effects = 0
      yield* Effect.gen(function*() {
        const id = yield* Outbox.dispatch(new SendReceipt({ orderId: 1 }))
        expect(effects).toBe(1)
        const store = yield* IdempotencyStore.IdempotencyStore
        expect(yield* store.isProcessed({ messageId: id, consumer: "receipts" })).toBe(true)
        // The same message was also stored for the worker: its delivery finds the record and skips the effect.
        expect(yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, idempotencyPurge: false }))
          .toMatchObject({ handled: 1, failed: 0 })
        expect(effects).toBe(1)
      }).pipe(Effect.provide(
        mixedStack([
          Handlers.handler(SendReceipt, () => Effect.sync(() => void effects++), { name: "receipts", idempotent: true })
        ], { SendReceipt: ["sync", "outbox"] }).pipe(Layer.provideMerge(MemoryIdempotencyStore.layer()))
      ))
    }))
})

describe("sync transport: nothing to consume or browse", () => {
  it.effect("a worker on it, alone or beside a stored transport, fails at once with a typed error that says why", () =>
    Effect.gen(function*() {
      const alone = yield* Effect.flip(Worker.run({ transports: ["sync"] })).pipe(
        Effect.provide(
          Layer.mergeAll(SyncTransport.layer(), ScheduleRetryStrategy.layerDefault).pipe(
            Layer.provideMerge(Handlers.layer([]))
          )
        )
      )
      expect(alone).toMatchObject({ _tag: "UnknownTransportError", transport: "sync" })
      expect(alone.message).toContain("is a sync transport")
      expect(alone.message).toContain("nothing to consume")
      const mixed = yield* Effect.flip(Worker.run({ transports: ["outbox", "sync"] })).pipe(
        Effect.provide(mixedStack([]))
      )
      expect(mixed.message).toContain("is a sync transport")
    }))

  it.effect("declares no capability; browsing fails with a TransportError, stats count nothing, names are checked", () =>
    Effect.gen(function*() {
      const sync = yield* SyncTransport.make({ transports: ["sync", "receipts"] })
      expect(sync.names).toEqual(["sync", "receipts"])
      expect(Option.getOrThrow(sync.capabilities("sync"))).toEqual({
        leases: false,
        browsing: false,
        countsDeliveries: false,
        stableIds: false,
        ackWithClaim: false,
        orderingKeys: false
      })
      expect(sync.capabilities("outbox")).toEqual(Option.none())
      expect(sync.lease("sync")).toEqual(Option.none())
      expect(sync.failureTransport("sync")).toEqual(Option.none())
      expect(yield* sync.setup).toEqual([])
      const list = yield* Effect.flip(sync.list("sync", { max: 10 }))
      expect(list).toMatchObject({ _tag: "TransportError", operation: "list" })
      expect(list.message).toContain("not supported by the sync transport")
      expect((yield* Effect.flip(sync.find("sync", "1")))._tag).toBe("TransportError")
      expect((yield* Effect.flip(sync.remove("receipts", ["1"])))._tag).toBe("TransportError")
      expect((yield* Effect.flip(sync.move("sync", "1", { to: "receipts", headers: undefined as never })))._tag)
        .toBe("TransportError")
      expect(yield* sync.stats("receipts")).toMatchObject({ ready: 0, delayed: 0, inFlight: 0, failed: 0 })
      expect((yield* Effect.flip(sync.send("outbox", [])))._tag).toBe("UnknownTransportError")
      expect((yield* Effect.flip(sync.stats("outbox")))._tag).toBe("UnknownTransportError")
      expect((yield* Effect.flip(SyncTransport.make({ transports: ["bad name"] })))._tag).toBe("OutboxConfigError")
      expect((yield* Effect.flip(SyncTransport.make({ transports: [] })))._tag).toBe("OutboxConfigError")
    }).pipe(Effect.provide(Handlers.layer([]))))
})

describe("sync transport: handlers that dispatch (makeWithoutHandlers)", () => {
  it.effect("a sync handler dispatches a follow-up to the outbox; the registry is the dispatching fiber's", () =>
    Effect.gen(function*() {
      // SendReceipt's handler needs the Outbox, which needs the Transport: the layers are built bottom-up, the
      // handlers last, and the sync transport finds them in the dispatching fiber.
      const transports = Layer.unwrapEffect(Effect.gen(function*() {
        const memory = yield* MemoryTransport.make()
        const router = yield* TransportRouter.make(memory, yield* SyncTransport.makeWithoutHandlers())
        return Layer.succeedContext(
          Context.make(Transport, router).pipe(
            Context.add(TransportAdmin, router),
            Context.add(MemoryTransport.MemoryTransport, memory)
          )
        )
      }))
      const handlers = Handlers.layer([
        Handlers.handler(
          SendReceipt,
          (m) => Effect.asVoid(Outbox.dispatch(new OrderPaid({ orderId: m.orderId, amount: 0 })))
        )
      ])
      const stack = handlers.pipe(
        Layer.provideMerge(Outbox.layer({ routes: { SendReceipt: ["sync"] } })),
        Layer.provideMerge(transports)
      )
      yield* Effect.gen(function*() {
        yield* Outbox.dispatch(new SendReceipt({ orderId: 9 }))
        const memory = yield* MemoryTransport.MemoryTransport
        expect((yield* memory.messagesOf("outbox")).map((m) => JSON.parse(m.body))).toEqual([
          { _tag: "OrderPaid", orderId: 9, amount: 0 }
        ])
      }).pipe(Effect.provide(stack))
      // Without Handlers in the dispatching fiber, the dispatch says what is missing.
      const missing = yield* Effect.flip(Outbox.dispatch(new SendReceipt({ orderId: 1 }))).pipe(
        Effect.provide(
          Outbox.layer({ defaultTransports: ["sync"] }).pipe(Layer.provide(SyncTransport.layerWithoutHandlers()))
        )
      )
      expect(missing).toMatchObject({ _tag: "TransportError", transport: "sync", operation: "send" })
      expect(missing.message).toContain("no Handlers service")
    }))
})

// A sync transport beside stored ones keeps the router's contract for them.
exerciseTransport({
  name: "router: memory + sync",
  layer: Handlers.layer([]),
  make: Effect.gen(function*() {
    const memory = yield* MemoryTransport.make({
      transports: { outbox: { redeliverTimeout: Duration.millis(lease) }, other: {} }
    })
    return yield* TransportRouter.make(memory, yield* SyncTransport.make())
  }),
  advance: (_router, ms) => TestClock.adjust(Duration.millis(ms))
})
