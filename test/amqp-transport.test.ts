/**
 * The RabbitMQ transport against a real broker: confirms, returns, nacks, the delay queues of retries, the
 * failure queue, requeues, lost connections — and a worker consuming the broker with its failures kept in
 * PostgreSQL.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { OutgoingMessage, ReceivedMessage } from "../src/domain/Envelope.js"
import * as Headers from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as AmqpTransport from "../src/layers/AmqpTransport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import * as Worker from "../src/programs/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import * as Cli from "../src/programs/Cli.js"
import * as Forwarder from "../src/programs/Forwarder.js"
import { amqpUrl, cleanup, startProxy, uniqueName, withChannel } from "./support/amqp.js"
import { runCli } from "./support/cli.js"
import { createDatabase, freshDatabase } from "./support/database.js"
import { pgLayer, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

const outgoing = (n: number, delayMs = 0): OutgoingMessage => ({
  messageId: MessageId.make(),
  type: "Test",
  body: JSON.stringify({ _tag: "Test", n }),
  headers: JSON.stringify({ type: "Test" }),
  delayMs
})

/** A fresh transport on its own exchange and queues (set up), removed when the scope closes. */
const fresh = (
  transports: Record<string, AmqpTransport.TransportOptions> = { amqp: { failureTransport: "amqp-failed" }, "amqp-failed": {} },
  options: { readonly url?: string; readonly setup?: boolean } = {}
) =>
  Effect.gen(function*() {
    const url = options.url ?? amqpUrl()
    const prefix = uniqueName("amqp")
    const queues = Object.fromEntries(
      Object.entries(transports).map(([name, o]) => [name, { ...o, queue: `${prefix}.${name}` }])
    )
    yield* Effect.addFinalizer(() =>
      Effect.promise(() => cleanup(amqpUrl(), prefix, Object.values(queues).map((o) => o.queue)))
    )
    const transport = yield* AmqpTransport.make({ url, exchange: { name: prefix }, transports: queues, claimWait: "2 seconds" })
    if (options.setup !== false) yield* transport.setup
    return { transport, prefix, queue: (name: string) => queues[name]!.queue }
  })

/** Claims until `n` messages were taken (deliveries are pushed asynchronously). */
const claimN = (transport: AmqpTransport.AmqpTransportShape, name: string, n: number) =>
  Effect.gen(function*() {
    const taken: Array<ReceivedMessage> = []
    while (taken.length < n) {
      taken.push(...(yield* transport.claim(name, n - taken.length)))
      if (taken.length < n) yield* Effect.sleep("20 millis")
    }
    return taken
  }).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error(`fewer than ${n} messages`) }))

const numbers = (rows: ReadonlyArray<{ readonly body: string }>) => rows.map((r) => JSON.parse(r.body).n as number)

describe("AMQP transport", () => {
  it.scopedLive("send publishes persistent messages: message id, type, JSON body and stored headers as AMQP properties", () =>
    Effect.gen(function*() {
      const { queue, transport } = yield* fresh()
      const sent = { ...outgoing(1), headers: JSON.stringify({ type: "Test", custom: { tenant: "a" } }) }
      yield* transport.send("amqp", [sent])
      const raw = yield* Effect.promise(() => withChannel(amqpUrl(), (channel) => channel.get(queue("amqp"), { noAck: true })))
      if (raw === false) return expect.unreachable("no message in the queue")
      expect(raw.properties.messageId).toBe(sent.messageId)
      expect(raw.properties.type).toBe("Test")
      expect(raw.properties.contentType).toBe("application/json")
      expect(raw.properties.deliveryMode).toBe(2)
      expect(raw.properties.headers?.[AmqpTransport.headersHeader]).toBe(sent.headers)
      expect(raw.content.toString("utf8")).toBe(sent.body)
    }))

  it.scopedLive("claim returns the messages as sent, in order; ack removes them for good", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      const sent = [outgoing(1), outgoing(2), outgoing(3)]
      yield* transport.send("amqp", sent)
      const claimed = yield* claimN(transport, "amqp", 3)
      expect(numbers(claimed)).toEqual([1, 2, 3])
      expect(claimed.map((c) => c.messageId)).toEqual(sent.map((s) => s.messageId))
      expect(claimed[0]!.headers).toBe(sent[0]!.headers)
      expect(claimed[0]!.transport).toBe("amqp")
      expect(claimed.every((c) => c.deliveries === 1)).toBe(true)
      yield* transport.ack("amqp", claimed.map((c) => c.id))
      // Nothing comes back, not even after the connection is closed and opened again.
      yield* transport.disconnect
      expect(yield* transport.claim("amqp", 10)).toEqual([])
      expect(yield* transport.stats("amqp")).toMatchObject({ ready: 0, inFlight: 0, failed: 0 })
    }))

  it.scopedLive("a lost connection hands unacked messages back; settling them later is a no-op", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      const sent = outgoing(1)
      yield* transport.send("amqp", [sent])
      const [first] = yield* claimN(transport, "amqp", 1)
      yield* transport.disconnect
      const [again] = yield* claimN(transport, "amqp", 1)
      expect(again!.messageId).toBe(sent.messageId)
      expect(again!.id).not.toBe(first!.id)
      yield* transport.ack("amqp", [first!.id]) // stale: no effect, no error
      yield* transport.ack("amqp", [again!.id])
      yield* transport.disconnect
      expect(yield* transport.claim("amqp", 10)).toEqual([])
    }))

  it.scopedLive("send fails when the broker returns the message as unroutable (mandatory)", () =>
    Effect.gen(function*() {
      const { queue, transport } = yield* fresh({ amqp: {}, ghost: {} })
      yield* Effect.promise(() => withChannel(amqpUrl(), (channel) => channel.deleteQueue(queue("ghost"))))
      const error = yield* Effect.flip(transport.send("ghost", [outgoing(1)]))
      expect(error).toMatchObject({ _tag: "TransportError", transport: "ghost", operation: "send" })
      expect(error.message).toMatch(/unroutable/)
      // The connection is still good.
      yield* transport.send("amqp", [outgoing(2)])
      expect(numbers(yield* claimN(transport, "amqp", 1))).toEqual([2])
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

  it.scopedLive("retry sends a copy through a delay queue: it comes back after the delay, same id, new headers", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      const sent = outgoing(1)
      yield* transport.send("amqp", [sent])
      const [first] = yield* claimN(transport, "amqp", 1)
      const headers = Headers.encode(Headers.withRedelivery(
        new Headers.Headers({ type: "Test" }),
        new Headers.Redelivery({ retryCount: 1, delayMs: 1500, errorTag: "Boom", errorMessage: "boom" })
      ))
      const started = Date.now()
      yield* transport.retry("amqp", first!.id, { delay: Duration.millis(1500), headers })
      expect(yield* transport.claim("amqp", 10)).toEqual([])
      const [again] = yield* claimN(transport, "amqp", 1)
      expect(Date.now() - started).toBeGreaterThanOrEqual(1400)
      expect(again!.messageId).toBe(sent.messageId)
      expect(again!.body).toBe(sent.body)
      expect(again!.headers).toBe(headers)
      expect(again!.deliveries).toBe(2)
      yield* transport.ack("amqp", [again!.id])
      expect(AmqpTransport.brokerDelay(1234)).toBe(1300)
      expect(AmqpTransport.brokerDelay(450)).toBe(500)
      expect(AmqpTransport.brokerDelay(81_234)).toBe(82_000)
    }))

  it.scopedLive("a delayed send waits in the broker", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      const started = Date.now()
      yield* transport.send("amqp", [outgoing(1, 800), outgoing(2)])
      expect(numbers(yield* claimN(transport, "amqp", 1))).toEqual([2])
      expect(numbers(yield* claimN(transport, "amqp", 1))).toEqual([1])
      expect(Date.now() - started).toBeGreaterThanOrEqual(750)
    }))

  it.scopedLive("fail publishes to the failure transport's queue with the new headers, then acks", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      const sent = outgoing(1)
      yield* transport.send("amqp", [sent])
      const [first] = yield* claimN(transport, "amqp", 1)
      yield* transport.fail("amqp", first!.id, { headers: `{"type":"Test","failed":true}` })
      const [failed] = yield* claimN(transport, "amqp-failed", 1)
      expect(failed!.messageId).toBe(sent.messageId)
      expect(failed!.body).toBe(sent.body)
      expect(failed!.headers).toBe(`{"type":"Test","failed":true}`)
      expect(failed!.transport).toBe("amqp-failed")
      yield* transport.disconnect
      expect(yield* transport.claim("amqp", 10)).toEqual([])
      expect(transport.failureTransport("amqp")).toEqual(Option.some("amqp-failed"))
      expect(transport.failureTransport("amqp-failed")).toEqual(Option.some("amqp-failed"))
    }))

  it.scopedLive("release requeues at once", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      yield* transport.send("amqp", [outgoing(1), outgoing(2)])
      const claimed = yield* claimN(transport, "amqp", 2)
      yield* transport.release("amqp", [claimed[0]!.id])
      const again = yield* claimN(transport, "amqp", 1)
      expect(again[0]!.messageId).toBe(claimed[0]!.messageId)
      expect(again[0]!.deliveries).toBe(1)
    }))

  it.scopedLive("a lost connection fails an in-flight send with a TransportError; the next send reconnects", () =>
    Effect.gen(function*() {
      const proxy = yield* Effect.acquireRelease(Effect.promise(() => startProxy(amqpUrl())), (p) => Effect.promise(p.close))
      const { transport } = yield* fresh(undefined, { url: proxy.url })
      yield* transport.send("amqp", [outgoing(1)])
      proxy.hold(true)
      const inFlight = yield* Effect.fork(transport.send("amqp", [outgoing(2)]))
      yield* Effect.sleep("200 millis")
      proxy.cut()
      const error = yield* Effect.flip(Fiber.join(inFlight))
      expect(error).toMatchObject({ _tag: "TransportError", transport: "amqp", operation: "send" })
      proxy.hold(false)
      yield* transport.send("amqp", [outgoing(3)])
      const claimed = yield* claimN(transport, "amqp", 2)
      expect(numbers(claimed)).toContain(3)
      expect(numbers(claimed)).toContain(1)
    }))

  it.scopedLive("an unreachable broker is a TransportError naming it", () =>
    Effect.gen(function*() {
      const transport = yield* AmqpTransport.make({ url: "amqp://guest:secret@127.0.0.1:1", transports: { amqp: {} } })
      const error = yield* Effect.flip(transport.send("amqp", [outgoing(1)]))
      expect(error).toMatchObject({ _tag: "TransportError", operation: "send" })
      expect(error.message).toMatch(/Cannot connect to RabbitMQ at amqp:\/\/guest:\*\*\*@127\.0\.0\.1:1/)
      expect(error.message).not.toMatch(/secret/)
    }))

  it.scopedLive("stats count ready messages; browsing by id is not supported", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      yield* transport.send("amqp", [outgoing(1), outgoing(2)])
      expect(yield* transport.stats("amqp")).toMatchObject({ transport: "amqp", ready: 2, failed: 0 })
      for (const result of [
        transport.list("amqp", { max: 10 }),
        transport.find("amqp", "1"),
        transport.remove("amqp", ["1"]),
        transport.move("amqp", "1", { to: "amqp-failed", headers: "{}" })
      ]) {
        const error = yield* Effect.flip(result as Effect.Effect<unknown, { readonly message: string }>)
        expect(error.message).toMatch(/not supported by the AMQP transport: use a PostgreSQL failure transport/)
      }
      expect((yield* Effect.flip(transport.send("nope", [outgoing(1)])))._tag).toBe("UnknownTransportError")
      expect(transport.lease("amqp")).toEqual(Option.none())
      expect(yield* transport.nextDue("amqp")).toEqual(Option.none())
    }))

  it.scopedLive("a delivery wakes a waiting subscriber", () =>
    Effect.gen(function*() {
      const { transport } = yield* fresh()
      const wake = yield* transport.wakeups(["amqp"])
      expect(yield* transport.claim("amqp", 1)).toEqual([])
      const waiting = yield* Effect.fork(wake(Duration.minutes(1)))
      yield* transport.send("amqp", [outgoing(1)])
      yield* Fiber.join(waiting).pipe(Effect.timeout("5 seconds"))
      expect(numbers(yield* claimN(transport, "amqp", 1))).toEqual([1])
    }))
})

describe("a worker consuming RabbitMQ, failures kept in PostgreSQL", () => {
  it.scopedLive("retries through the delay queues, fails into PostgreSQL's failed, and a retry from there goes back to the broker", () =>
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
        const transport = yield* Transport
        yield* transport.setup
        const ids = yield* Effect.forEach([1, 2, 3], (orderId) => Outbox.dispatch(new OrderPaid({ orderId, amount: 1 })))
        const events: Array<Worker.WorkerEvent> = []
        yield* Worker.run({
          transports: ["amqp"],
          sleep: "50 millis",
          limit: 7, // 1: 2 retries + handled; 2: 2 retries + failed; 3: handled
          onEvent: (event) => Effect.sync(() => events.push(event))
        }).pipe(Effect.timeout("30 seconds"))
        expect(attempts.get(1)).toBe(3)
        expect(attempts.get(3)).toBe(1)
        expect(events.filter((e) => e._tag === "Handled").map((e) => e.messageId).sort()).toEqual([ids[0], ids[2]].sort())
        expect(events.filter((e) => e._tag === "Retried").length).toBe(4)
        // The poison message is in PostgreSQL's failure transport, with its id, body and error.
        const [failed] = yield* transport.list("failed", { max: 10 })
        expect(failed!.messageId).toBe(ids[1])
        expect(JSON.parse(failed!.body)).toEqual({ _tag: "OrderPaid", orderId: 2, amount: 1 })
        const headers = JSON.parse(failed!.headers)
        expect(headers.originalTransport).toBe("amqp")
        expect(headers.errorDetails.message).toBe("poison")
        expect(headers.redeliveries.length).toBe(2)
        expect(yield* transport.stats("amqp")).toMatchObject({ ready: 0, failed: 1 })
        // failed:retry — back to the broker across backends, then handled.
        poisoned = false
        expect(yield* transport.move("failed", failed!.id, { to: "amqp", headers: `{"type":"OrderPaid"}` })).toBe(true)
        expect(yield* transport.list("failed", { max: 10 })).toEqual([])
        const summary = yield* Worker.run({ transports: ["amqp"], sleep: "50 millis", limit: 1 }).pipe(
          Effect.timeout("10 seconds")
        )
        expect(summary).toMatchObject({ handled: 1, failed: 0 })
      }).pipe(Effect.provide(stack))
    }), 60_000)
})

describe("the command line with a broker", () => {
  it.scopedLive("setup-transports declares the exchange, the queue and its binding; stats and consume reach the broker", () =>
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
          Handlers.handler(OrderPaid, (paid) => Effect.sync(() => handled.push(paid.orderId)), { fromTransport: "amqp" })
        ])
      })
      const setup = yield* runCli(cli, ["setup-transports", "--dsn", url])
      expect(setup.stderr).toBe("")
      expect(setup.stdout).toContain(`[OK] The "amqp" transport was set up successfully.`)
      // Declared and bound: a publish to the exchange with the queue's routing key lands in the queue.
      const depth = yield* Effect.promise(() =>
        withChannel(amqpUrl(), async (channel) => {
          channel.publish(prefix, queue, Buffer.from(JSON.stringify({ _tag: "OrderPaid", orderId: 5, amount: 1 })), {
            messageId: MessageId.make(),
            type: "OrderPaid",
            headers: { [AmqpTransport.headersHeader]: JSON.stringify({ type: "OrderPaid" }) }
          })
          await new Promise((resolve) => setTimeout(resolve, 100))
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
        Effect.provide(Outbox.layer().pipe(Layer.provide(PgTransport.layer({ table })), Layer.provide(Layer.orDie(pgLayer(url)))))
      )
      const forward = yield* runCli(cli, ["consume", "outbox", "--limit", "1", "--sleep", "0.05", "--dsn", url])
      expect(forward.stdout).toContain("Worker stopped (limit): handled 1, retried 0, failed 0.")
      yield* runCli(cli, ["consume", "amqp", "--limit", "1", "--sleep", "0.05", "--dsn", url])
      expect(handled).toEqual([5, 6])
    }), 60_000)
})
