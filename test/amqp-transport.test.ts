/**
 * The RabbitMQ transport against a real broker, where it differs from a store: publisher confirms, returns and
 * nacks, the delay queues of retries and delayed sends, copies into the failure queue, lost connections, the
 * declared capabilities and the refused browsing — and a worker consuming the broker with its failures kept in
 * PostgreSQL. What every backend shares runs in the conformance suite (transport-amqp.test.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { ReceivedMessage } from "../src/domain/Envelope.js"
import * as Headers from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as AmqpTransport from "../src/layers/amqp/AmqpTransport.js"
import { unsupportedMessage } from "../src/layers/amqp/codec.js"
import { brokerDelay, delayQueueName } from "../src/layers/amqp/delays.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Cli from "../src/programs/Cli.js"
import * as Forwarder from "../src/programs/Forwarder.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { type Session, Transport } from "../src/services/Transport.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import {
  amqpUrl,
  cleanup,
  freshTransport,
  startProxy,
  uniqueName,
  withChannel,
  withConfirmChannel
} from "./support/amqp.js"
import { runCli } from "./support/cli.js"
import { createDatabase, freshDatabase } from "./support/database.js"
import { pgLayer, uniqueTable } from "./support/harness.js"
import { numbers, OrderPaid, outgoing } from "./support/messages.js"

/** A fresh transport on its own exchange and queues (set up), with a session on all of them. */
const fresh = (
  transports: Record<string, AmqpTransport.TransportOptions> = {
    amqp: { failureTransport: "amqp-failed" },
    "amqp-failed": {}
  },
  options: { readonly url?: string; readonly setup?: boolean } = {}
) =>
  Effect.gen(function*() {
    const made = yield* freshTransport(transports, options)
    const session = yield* made.transport.open(Object.keys(transports))
    return { ...made, session }
  })

/**
 * Claims until `n` messages were taken: deliveries are pushed asynchronously, so between claims it waits for
 * the session's next hint (a delivery). Bounded in claims, not in time.
 */
const claimN = (session: Session, name: string, n: number) =>
  Effect.gen(function*() {
    const taken: Array<ReceivedMessage> = []
    for (let attempt = 0; attempt < 200 && taken.length < n; attempt++) {
      taken.push(...(yield* session.claim(name, n - taken.length, [])).messages)
      if (taken.length < n) yield* session.wait(Duration.millis(100))
    }
    if (taken.length < n) return yield* Effect.fail(new Error(`fewer than ${n} messages of ${name}: ${taken.length}`))
    return taken
  })

/** One claim that must find nothing. */
const claimNone = (session: Session, name: string) =>
  Effect.map(session.claim(name, 10, []), (claimed) => claimed.messages)

describe("AMQP transport", () => {
  it.scopedLive("send publishes persistent messages: message id, type, JSON body and stored headers as AMQP properties", () =>
    Effect.gen(function*() {
      const { queue, transport } = yield* fresh()
      const sent = {
        ...outgoing(1),
        headers: Headers.encode(new Headers.Headers({ type: "Test", custom: { tenant: "a" } }))
      }
      yield* transport.send("amqp", [sent])
      const raw = yield* Effect.promise(() =>
        withChannel(amqpUrl(), (channel) => channel.get(queue("amqp"), { noAck: true }))
      )
      if (raw === false) return expect.unreachable("no message in the queue")
      expect(raw.properties.messageId).toBe(sent.messageId)
      expect(raw.properties.type).toBe("Test")
      expect(raw.properties.contentType).toBe("application/json")
      expect(raw.properties.deliveryMode).toBe(2)
      expect(raw.properties.headers?.[AmqpTransport.headersHeader]).toBe(sent.headers)
      expect(raw.content.toString("utf8")).toBe(sent.body)
    }))

  it.scopedLive("declares its capabilities: no leases, no browsing, no delivery counts, no stable ids, acks apart from claims", () =>
    Effect.gen(function*() {
      const { session, transport } = yield* fresh()
      expect(transport.capabilities("amqp")).toEqual(Option.some({
        leases: false,
        browsing: false,
        countsDeliveries: false,
        stableIds: false,
        ackWithClaim: false,
        orderingKeys: false
      }))
      expect(transport.capabilities("nope")).toEqual(Option.none())
      expect(transport.lease("amqp")).toEqual(Option.none())
      expect(session.transports).toEqual(["amqp", "amqp-failed"])
      // Delays live in the broker: a claim never reports when the next message is due.
      expect((yield* session.claim("amqp", 10, [])).nextDue).toEqual(Option.none())
    }))

  it.scopedLive("acks reach the broker: acked (alone or riding on a claim) and failed messages never come back, not even after a reconnect", () =>
    Effect.gen(function*() {
      const { session, transport } = yield* fresh()
      const sent = [outgoing(1), outgoing(2), outgoing(3)]
      yield* transport.send("amqp", sent)
      const [a, b, c] = yield* claimN(session, "amqp", 3)
      yield* transport.ack("amqp", [a!.id])
      expect((yield* session.claim("amqp", 10, [b!.id])).messages).toEqual([])
      // A failure is a copy in the failure transport's queue (same message id and body, the new headers), and
      // the original is acked.
      const headers = new Headers.Headers({ type: "Test", originalTransport: "amqp" })
      yield* transport.fail(c!, headers)
      yield* transport.disconnect
      expect(yield* claimNone(session, "amqp")).toEqual([])
      expect(yield* transport.stats("amqp")).toMatchObject({ ready: 0, inFlight: 0, failed: 1 })
      const [failed] = yield* claimN(session, "amqp-failed", 1)
      expect(failed).toMatchObject({ messageId: sent[2]!.messageId, body: sent[2]!.body, transport: "amqp-failed" })
      expect(failed!.headers).toBe(Headers.encode(headers))
      expect(failed!.id).not.toBe(c!.id)
      expect(transport.failureTransport("amqp")).toEqual(Option.some("amqp-failed"))
      expect(transport.failureTransport("amqp-failed")).toEqual(Option.some("amqp-failed"))
    }))

  it.scopedLive("a lost connection hands unacked messages back with new ids; settling the old ids is a no-op", () =>
    Effect.gen(function*() {
      const { session, transport } = yield* fresh()
      const sent = outgoing(1)
      yield* transport.send("amqp", [sent])
      const [first] = yield* claimN(session, "amqp", 1)
      yield* transport.disconnect
      const [again] = yield* claimN(session, "amqp", 1)
      expect(again!.messageId).toBe(sent.messageId)
      expect(again!.id).not.toBe(first!.id)
      yield* transport.ack("amqp", [first!.id]) // stale: no effect, no error
      yield* transport.release("amqp", [first!.id])
      yield* transport.ack("amqp", [again!.id])
      yield* transport.disconnect
      expect(yield* claimNone(session, "amqp")).toEqual([])
    }))

  it.scopedLive("send fails when the broker returns the message as unroutable (mandatory)", () =>
    Effect.gen(function*() {
      const { queue, session, transport } = yield* fresh({ amqp: {}, ghost: {} })
      yield* Effect.promise(() => withChannel(amqpUrl(), (channel) => channel.deleteQueue(queue("ghost"))))
      const error = yield* Effect.flip(transport.send("ghost", [outgoing(1)]))
      expect(error).toMatchObject({ _tag: "TransportError", transport: "ghost", operation: "send" })
      expect(error.message).toMatch(/unroutable/)
      // The connection is still good.
      yield* transport.send("amqp", [outgoing(2)])
      expect(numbers(yield* claimN(session, "amqp", 1))).toEqual([2])
    }))

  it.scopedLive("send fails when the broker nacks the message (a full queue that rejects publishes)", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh({
        amqp: { failureTransport: "amqp", queueArguments: { "x-max-length": 1, "x-overflow": "reject-publish" } }
      })
      yield* transport.send("amqp", [outgoing(1)])
      const error = yield* Effect.flip(transport.send("amqp", [outgoing(2)]))
      expect(error).toMatchObject({ _tag: "TransportError", operation: "send" })
      expect(error.message).toMatch(/nack/)
    }))

  it.scopedLive("retry publishes a copy through a delay queue: back after the delay, same message id, new headers and id", () =>
    Effect.gen(function*() {
      const { queue, session, transport } = yield* fresh()
      const sent = outgoing(1)
      yield* transport.send("amqp", [sent])
      const [first] = yield* claimN(session, "amqp", 1)
      const headers = Headers.withRedelivery(
        new Headers.Headers({ type: "Test" }),
        new Headers.Redelivery({ retryCount: 1, delayMs: 1500, errorTag: "Boom", errorMessage: "boom" })
      )
      const started = Date.now()
      yield* transport.retry(first!, { delay: Duration.millis(1500), headers })
      // Waiting in the delay queue, not in the transport's queue.
      const delayed = yield* Effect.promise(() =>
        withChannel(amqpUrl(), (channel) => channel.checkQueue(delayQueueName(queue("amqp"), brokerDelay(1500))))
      )
      expect(delayed.messageCount).toBe(1)
      expect(yield* claimNone(session, "amqp")).toEqual([])
      const [again] = yield* claimN(session, "amqp", 1)
      expect(Date.now() - started).toBeGreaterThanOrEqual(1400)
      expect(again!.messageId).toBe(sent.messageId)
      expect(again!.id).not.toBe(first!.id)
      expect(again!.body).toBe(sent.body)
      expect(again!.headers).toBe(Headers.encode(headers))
      // Deliveries come from the retry history.
      expect(again!.deliveries).toBe(2)
      yield* transport.ack("amqp", [again!.id])
      // A retry of a message no longer held (settled already, or back in the queue after a loss) is a no-op.
      yield* transport.retry(first!, { delay: Duration.millis(100), headers })
      expect(yield* claimNone(session, "amqp")).toEqual([])
    }))

  it("rounds delays up onto a few shared delay queues", () => {
    expect(brokerDelay(0)).toBe(0)
    expect(brokerDelay(1)).toBe(100)
    expect(brokerDelay(450)).toBe(500)
    expect(brokerDelay(1234)).toBe(1300)
    expect(brokerDelay(81_234)).toBe(82_000)
    expect(delayQueueName("q", 1300)).toBe("q.delay.1300")
  })

  it.scopedLive("a delayed send waits in the broker", () =>
    Effect.gen(function*() {
      const { session, transport } = yield* fresh()
      const started = Date.now()
      yield* transport.send("amqp", [outgoing(1, 800), outgoing(2)])
      expect(numbers(yield* claimN(session, "amqp", 1))).toEqual([2])
      expect(numbers(yield* claimN(session, "amqp", 1))).toEqual([1])
      expect(Date.now() - started).toBeGreaterThanOrEqual(750)
    }))

  it.scopedLive("fail refuses a failure transport the broker does not serve (TransportRouter's job)", () =>
    Effect.gen(function*() {
      const { session, transport } = yield* fresh({ amqp: {} })
      yield* transport.send("amqp", [outgoing(1)])
      const [first] = yield* claimN(session, "amqp", 1)
      const error = yield* Effect.flip(transport.fail(first!, new Headers.Headers({ type: "Test" })))
      expect(error).toMatchObject({ _tag: "TransportError", operation: "fail" })
      expect(error.message).toMatch(/failure transport failed of amqp is not served by the AMQP transport/)
    }))

  it.scopedLive("a lost connection fails an in-flight send with a TransportError; the next send reconnects", () =>
    Effect.gen(function*() {
      const proxy = yield* Effect.acquireRelease(
        Effect.promise(() => startProxy(amqpUrl())),
        (p) => Effect.promise(p.close)
      )
      const { session, transport } = yield* fresh(undefined, { url: proxy.url })
      yield* transport.send("amqp", [outgoing(1)])
      proxy.hold(true)
      const inFlight = yield* Effect.fork(transport.send("amqp", [outgoing(2)]))
      // The publish reached the proxy and waits there, unconfirmed: now the network goes.
      yield* Effect.promise(() => proxy.holding())
      proxy.cut()
      const error = yield* Effect.flip(Fiber.join(inFlight))
      expect(error).toMatchObject({ _tag: "TransportError", transport: "amqp", operation: "send" })
      proxy.hold(false)
      yield* transport.send("amqp", [outgoing(3)])
      const claimed = yield* claimN(session, "amqp", 2)
      expect(numbers(claimed)).toContain(3)
      expect(numbers(claimed)).toContain(1)
    }))

  it.scopedLive("an unreachable broker is a TransportError naming it, without its password", () =>
    Effect.gen(function*() {
      const transport = yield* AmqpTransport.make({ url: "amqp://guest:secret@127.0.0.1:1", transports: { amqp: {} } })
      const error = yield* Effect.flip(transport.send("amqp", [outgoing(1)]))
      expect(error).toMatchObject({ _tag: "TransportError", operation: "send" })
      expect(error.message).toMatch(/Cannot connect to RabbitMQ at amqp:\/\/guest:\*\*\*@127\.0\.0\.1:1/)
      expect(error.message).not.toMatch(/secret/)
    }))

  it.scopedLive("stats count ready messages; browsing fails with a TransportError; unknown names are UnknownTransportError", () =>
    Effect.gen(function*() {
      const { session, transport } = yield* fresh()
      yield* transport.send("amqp", [outgoing(1), outgoing(2)])
      expect(yield* transport.stats("amqp")).toMatchObject({ transport: "amqp", ready: 2, failed: 0, inFlight: 0 })
      for (
        const result of [
          transport.list("amqp", { max: 10 }),
          transport.find("amqp", "1"),
          transport.remove("amqp", ["1"]),
          transport.move("amqp", "1", { to: "amqp-failed", headers: new Headers.Headers({ type: "Test" }) })
        ]
      ) {
        const error = yield* Effect.flip(
          result as Effect.Effect<unknown, { readonly _tag: string; readonly message: string }>
        )
        expect(error._tag).toBe("TransportError")
        expect(error.message).toContain(unsupportedMessage)
      }
      const [claimed] = yield* claimN(session, "amqp", 1)
      expect(yield* transport.stats("amqp")).toMatchObject({ inFlight: 1 })
      const unknown: ReadonlyArray<Effect.Effect<unknown, { readonly _tag: string }, Scope.Scope>> = [
        transport.send("nope", [outgoing(1)]),
        transport.ack("nope", ["1"]),
        transport.retry({ ...claimed!, transport: "nope" }, {
          delay: Duration.zero,
          headers: new Headers.Headers({ type: "Test" })
        }),
        transport.fail({ ...claimed!, transport: "nope" }, new Headers.Headers({ type: "Test" })),
        transport.keepalive("nope", ["1"]),
        transport.release("nope", ["1"]),
        transport.list("nope", { max: 1 }),
        transport.find("nope", "1"),
        transport.remove("nope", ["1"]),
        transport.move("nope", "1", { to: "amqp", headers: new Headers.Headers({ type: "Test" }) }),
        transport.stats("nope"),
        transport.purge("nope"),
        transport.open(["amqp", "nope"]),
        session.claim("nope", 1, [])
      ]
      for (const effect of unknown) expect((yield* Effect.flip(effect))._tag).toBe("UnknownTransportError")
    }))

  it.scopedLive("a delivery wakes a waiting session; without a session the consumer is cancelled", () =>
    Effect.gen(function*() {
      const { queue, session, transport } = yield* fresh()
      expect(yield* claimNone(session, "amqp")).toEqual([])
      const waiting = yield* Effect.fork(session.wait(Duration.minutes(1)))
      yield* transport.send("amqp", [outgoing(1)])
      yield* Fiber.join(waiting).pipe(Effect.timeout("5 seconds"))
      expect(numbers(yield* claimN(session, "amqp", 1))).toEqual([1])
      // A consumer lives while a session holds its transport: a second session's end leaves it running, the
      // last one's end cancels it (its buffer goes back to the broker).
      const consumers = (queue: string) =>
        Effect.promise(() => withChannel(amqpUrl(), (channel) => channel.checkQueue(queue))).pipe(
          Effect.map((ok) => ok.consumerCount)
        )
      yield* Effect.scoped(Effect.flatMap(transport.open(["amqp"]), (other) => claimNone(other, "amqp")))
      expect(yield* consumers(queue("amqp"))).toBe(1)
      const solo = yield* freshTransport({ solo: { failureTransport: "solo" } })
      yield* solo.transport.send("solo", [outgoing(2), outgoing(3)])
      yield* Effect.scoped(Effect.flatMap(solo.transport.open(["solo"]), (only) => claimN(only, "solo", 1)))
      expect(yield* consumers(solo.queue("solo"))).toBe(0)
      expect(yield* solo.transport.stats("solo")).toMatchObject({ ready: 1, inFlight: 1 })
    }))

  it.scopedLive("layerConfig reads its options from Config (here the URL from AMQP_URL)", () =>
    Effect.gen(function*() {
      const prefix = uniqueName("cfg")
      const queue = `${prefix}.amqp`
      yield* Effect.addFinalizer(() => Effect.promise(() => cleanup(amqpUrl(), prefix, [queue])))
      const layer = AmqpTransport.layerConfig({
        url: Config.redacted("AMQP_URL"),
        exchange: { name: Config.succeed(prefix) },
        transports: Config.succeed({ amqp: { queue, failureTransport: "amqp" } })
      }).pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["AMQP_URL", amqpUrl()]])))))
      const stats = yield* Effect.gen(function*() {
        yield* (yield* TransportAdmin).setup
        yield* (yield* Transport).send("amqp", [outgoing(1)])
        return yield* (yield* AmqpTransport.AmqpTransport).stats("amqp")
      }).pipe(Effect.provide(layer))
      expect(stats).toMatchObject({ queue, ready: 1 })
      const missing = yield* Effect.flip(
        Layer.build(
          AmqpTransport.layerConfig({ url: Config.redacted("AMQP_URL") }).pipe(
            Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map())))
          )
        )
      )
      expect(missing._tag).toBe("OutboxConfigError")
      expect(missing.message).toContain("AMQP_URL")
    }))
})

describe("a worker consuming RabbitMQ, failures kept in PostgreSQL", () => {
  it.scopedLive(
    "retries through the delay queues, fails into PostgreSQL's failed, and a retry from there goes back to the broker",
    () =>
      Effect.gen(function*() {
        const prefix = uniqueName("worker")
        const queue = `${prefix}.amqp`
        yield* Effect.addFinalizer(() => Effect.promise(() => cleanup(amqpUrl(), prefix, [queue])))
        const attempts = new Map<number, number>()
        let poisoned = true
        const handlers = Handlers.layer([
          Handlers.handler(OrderPaid, (paid) =>
            Effect.suspend(() => {
              const n = (attempts.get(paid.orderId) ?? 0) + 1
              attempts.set(paid.orderId, n)
              if (paid.orderId === 1 && n <= 2) return Effect.fail(new Error(`flaky ${n}`))
              if (paid.orderId === 2 && poisoned) return Effect.fail(new Error("poison"))
              return Effect.void
            }), { fromTransport: "amqp" })
        ])
        const transportLayer = TransportRouter.layer(
          PgTransport.make({ table: uniqueTable("amqpfail"), autoSetup: true }),
          AmqpTransport.make({ url: amqpUrl(), exchange: { name: prefix }, transports: { amqp: { queue } } })
        )
        const stack = Layer.mergeAll(
          Outbox.layer({ routes: { OrderPaid: ["amqp"] } }),
          handlers,
          ScheduleRetryStrategy.layer({ default: { maxRetries: 2, delay: "300 millis", multiplier: 1 } })
        ).pipe(Layer.provideMerge(transportLayer), Layer.provideMerge(freshDatabase()))
        yield* Effect.gen(function*() {
          const admin = yield* TransportAdmin
          yield* admin.setup
          const ids = yield* Effect.forEach([1, 2, 3], (orderId) =>
            Outbox.dispatch(new OrderPaid({ orderId, amount: 1 })))
          const events: Array<Worker.WorkerEvent> = []
          yield* Worker.run({
            transports: ["amqp"],
            sleep: "50 millis",
            limit: 7, // 1: 2 retries + handled; 2: 2 retries + failed; 3: handled
            onEvent: (event) =>
              Effect.sync(() => events.push(event))
          }).pipe(Effect.timeout("30 seconds"))
          expect(attempts.get(1)).toBe(3)
          expect(attempts.get(3)).toBe(1)
          expect(events.filter((e) => e._tag === "Handled").map((e) => e.messageId).sort()).toEqual(
            [ids[0], ids[2]].sort()
          )
          expect(events.filter((e) => e._tag === "Retried").length).toBe(4)
          // The poison message is in PostgreSQL's failure transport, with its id, body and error.
          const [failed] = yield* admin.list("failed", { max: 10 })
          expect(failed!.messageId).toBe(ids[1])
          expect(JSON.parse(failed!.body)).toEqual({ _tag: "OrderPaid", orderId: 2, amount: 1 })
          const headers = JSON.parse(failed!.headers)
          expect(headers.originalTransport).toBe("amqp")
          expect(headers.errorDetails.message).toBe("poison")
          expect(headers.redeliveries.length).toBe(2)
          expect(yield* admin.stats("amqp")).toMatchObject({ ready: 0, failed: 1 })
          // failed:retry — back to the broker across backends, then handled.
          poisoned = false
          expect(
            yield* admin.move("failed", failed!.id, { to: "amqp", headers: new Headers.Headers({ type: "OrderPaid" }) })
          )
            .toBe(true)
          expect(yield* admin.list("failed", { max: 10 })).toEqual([])
          const summary = yield* Worker.run({ transports: ["amqp"], sleep: "50 millis", limit: 1 }).pipe(
            Effect.timeout("10 seconds")
          )
          expect(summary).toMatchObject({ handled: 1, failed: 0 })
        }).pipe(Effect.provide(stack))
      }),
    60_000
  )
})

describe("the command line with a broker", () => {
  it.scopedLive(
    "setup-transports declares the exchange, the queue and its binding; stats and consume reach the broker",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => createDatabase("amqpcli"))
        const prefix = uniqueName("cli")
        const queue = `${prefix}.amqp`
        yield* Effect.addFinalizer(() => Effect.promise(() => cleanup(amqpUrl(), prefix, [queue])))
        const handled: Array<number> = []
        const table = uniqueTable("amqpcli")
        const cli = Cli.make({
          transport: { table },
          amqp: { url: amqpUrl(), exchange: { name: prefix }, transports: { amqp: { queue } } },
          idempotency: false,
          handlers: Handlers.layer([
            ...Forwarder.handlers([OrderPaid], { to: "amqp" }),
            Handlers.handler(OrderPaid, (paid) => Effect.sync(() => handled.push(paid.orderId)), {
              fromTransport: "amqp"
            })
          ])
        })
        const setup = yield* runCli(cli, ["setup-transports", "--dsn", url])
        expect(setup.stderr).toBe("")
        expect(setup.stdout).toContain(`[OK] The "amqp" transport was set up successfully.`)
        // Declared and bound: a confirmed publish to the exchange with the queue's routing key is in the queue.
        const depth = yield* Effect.promise(() =>
          withConfirmChannel(amqpUrl(), async (channel) => {
            channel.publish(prefix, queue, Buffer.from(JSON.stringify({ _tag: "OrderPaid", orderId: 5, amount: 1 })), {
              messageId: MessageId.make(),
              type: "OrderPaid",
              mandatory: true,
              headers: { [AmqpTransport.headersHeader]: Headers.encode(new Headers.Headers({ type: "OrderPaid" })) }
            })
            await channel.waitForConfirms()
            return (await channel.checkQueue(queue)).messageCount
          })
        )
        expect(depth).toBe(1)
        const stats = yield* runCli(cli, ["stats", "amqp", "--dsn", url, "--format", "json"])
        expect(JSON.parse(stats.stdout).transports.amqp).toMatchObject({ queue, ready: 1 })
        const consume = yield* runCli(cli, ["consume", "amqp", "--limit", "1", "--sleep", "0.05", "--dsn", url])
        expect(consume.stdout).toContain("Worker stopped (limit): handled 1, retried 0, failed 0.")
        expect(handled).toEqual([5])
        // A forwarder mounted in the command line: `consume outbox` sends on to the broker.
        yield* Outbox.dispatch(new OrderPaid({ orderId: 6, amount: 1 })).pipe(
          Effect.provide(
            Outbox.layer().pipe(Layer.provide(PgTransport.layer({ table })), Layer.provide(Layer.orDie(pgLayer(url))))
          )
        )
        const forward = yield* runCli(cli, ["consume", "outbox", "--limit", "1", "--sleep", "0.05", "--dsn", url])
        expect(forward.stdout).toContain("Worker stopped (limit): handled 1, retried 0, failed 0.")
        yield* runCli(cli, ["consume", "amqp", "--limit", "1", "--sleep", "0.05", "--dsn", url])
        expect(handled).toEqual([5, 6])
      }),
    60_000
  )
})
