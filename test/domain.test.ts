import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Headers from "../src/domain/Headers.js"
import * as Identifier from "../src/domain/Identifier.js"
import * as Message from "../src/domain/Message.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as RetryDelay from "../src/domain/RetryDelay.js"
import * as Routing from "../src/domain/Routing.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import { OrderPaid } from "./support/messages.js"

const delays = <Out, In>(schedule: Schedule.Schedule<Out, In>, attempts: number, input: In) =>
  Effect.forEach(
    Array.from({ length: attempts }, (_, i) => i + 1),
    (attempt) =>
      RetryDelay.delayForAttempt(schedule, attempt, input).pipe(
        Effect.map(Option.map(Duration.toMillis)),
        Effect.map(Option.getOrNull)
      )
  )

describe("retry delays from a Schedule", () => {
  it.effect("defaults: 1, 3, 9, 27, 81 s, then give up", () =>
    Effect.gen(function*() {
      expect(yield* delays(RetryDelay.exponential(), 7, undefined)).toEqual([
        1000,
        3000,
        9000,
        27000,
        81000,
        null,
        null
      ])
    }))

  it.effect("caps each delay at maxDelay and honours maxRetries", () =>
    Effect.gen(function*() {
      const schedule = RetryDelay.exponential({
        maxRetries: 8,
        delay: "10 seconds",
        multiplier: 10,
        maxDelay: "1 hour"
      })
      expect(yield* delays(schedule, 9, undefined)).toEqual([
        10_000,
        100_000,
        1_000_000,
        3_600_000,
        3_600_000,
        3_600_000,
        3_600_000,
        3_600_000,
        null
      ])
      expect(yield* delays(RetryDelay.exponential({ maxRetries: 0 }), 1, undefined)).toEqual([null])
    }))

  it.effect("jitter spreads each delay within ±jitter and never past the cap", () =>
    Effect.gen(function*() {
      const schedule = RetryDelay.exponential({ jitter: 0.5, maxDelay: "5 seconds" })
      const runs = yield* Effect.forEach(Array.from({ length: 30 }, (_, seed) => seed), (seed) =>
        delays(schedule, 5, undefined).pipe(Effect.withRandom(Random.make(seed))))
      for (const run of runs) {
        run.forEach((ms, i) => {
          const nominal = Math.min(1000 * 3 ** i, 5000)
          expect(ms!).toBeGreaterThanOrEqual(Math.min(nominal * 0.5, 5000) - 1)
          expect(ms!).toBeLessThanOrEqual(5000)
        })
      }
      expect(
        new Set(runs.map((r) =>
          r[0]
        )).size
      ).toBeGreaterThan(1)
    }))

  it.effect("any user Schedule works, including one that looks at the error", () =>
    Effect.gen(function*() {
      const spaced = Schedule.spaced("2 seconds").pipe(Schedule.intersect(Schedule.recurs(2)))
      expect(yield* delays(spaced, 3, undefined)).toEqual([2000, 2000, null])
      const onlyTimeouts = Schedule.fixed("1 second").pipe(
        Schedule.whileInput((error: { readonly _tag: string }) => error._tag === "Timeout")
      )
      expect(yield* delays(onlyTimeouts, 1, { _tag: "Timeout" })).toEqual([1000])
      expect(yield* delays(onlyTimeouts, 1, { _tag: "Other" })).toEqual([null])
    }))

  it.effect("invalid options are a typed configuration error", () =>
    Effect.gen(function*() {
      for (const bad of [{ maxRetries: -1 }, { multiplier: 0.5 }, { jitter: 2 }, { maxRetries: 1.5 }]) {
        const error = yield* Effect.flip(ScheduleRetryStrategy.make({ default: bad }))
        expect(error._tag).toBe("OutboxConfigError")
      }
      const perTransport = yield* Effect.flip(ScheduleRetryStrategy.make({ transports: { outbox: { jitter: -1 } } }))
      expect(perTransport.message).toContain("jitter")
    }))

  it.effect("per-transport policies override the default", () =>
    Effect.gen(function*() {
      const strategy = yield* ScheduleRetryStrategy.make({
        default: { maxRetries: 1 },
        transports: { fast: Schedule.spaced("100 millis").pipe(Schedule.intersect(Schedule.recurs(3))) }
      })
      const ask = (transport: string, attempt: number) =>
        strategy.delayFor({ transport, attempt, error: new Error("x") }).pipe(
          Effect.map(Option.map(Duration.toMillis)),
          Effect.map(Option.getOrNull)
        )
      expect([yield* ask("outbox", 1), yield* ask("outbox", 2)]).toEqual([1000, null])
      expect([yield* ask("fast", 3), yield* ask("fast", 4)]).toEqual([100, null])
    }))
})

describe("routing", () => {
  it("sends unrouted types to the default transport, routed ones to their transports, overrides win", () => {
    const routing: Routing.Routing = { routes: { OrderPaid: ["outbox", "audit", "outbox"] } }
    expect(Routing.resolve(routing, "Other")).toEqual(["outbox"])
    expect(Routing.resolve(routing, "OrderPaid")).toEqual(["outbox", "audit"])
    expect(Routing.resolve(routing, "OrderPaid", ["amqp"])).toEqual(["amqp"])
    expect(Routing.resolve({ defaultTransports: ["async"] }, "Other")).toEqual(["async"])
  })
})

describe("headers", () => {
  it("round-trip through JSON and keep the redelivery history bounded (first + most recent)", () => {
    let headers = new Headers.Headers({ type: "OrderPaid" })
    for (let i = 1; i <= 25; i++) {
      headers = Headers.withRedelivery(
        headers,
        new Headers.Redelivery({ retryCount: i, delayMs: i, errorTag: "E", errorMessage: "m" })
      )
    }
    expect(headers.redeliveries!.map((r) => r.retryCount)).toEqual([1, 17, 18, 19, 20, 21, 22, 23, 24, 25])
    expect(Headers.retryCount(headers)).toBe(25)
    const decoded = Headers.decode(Headers.encode(headers))
    expect(Either.getOrThrow(decoded)).toEqual(headers)
  })

  it("reports corrupt headers as a decode error", () => {
    for (const raw of ["{", "[]", `{"type":1}`, "null"]) {
      const decoded = Headers.decode(raw)
      expect(Either.isLeft(decoded) && decoded.left.reason).toBe("CorruptHeaders")
    }
  })
})

describe("messages", () => {
  it("encode with their own schema and decode back", () =>
    Effect.gen(function*() {
      const body = yield* Message.encodeBody(new OrderPaid({ orderId: 1, amount: 2 }))
      expect(JSON.parse(body)).toEqual({ _tag: "OrderPaid", orderId: 1, amount: 2 })
      const decoded = Message.decodeBody(OrderPaid, body)
      expect(Either.getOrThrow(decoded)).toEqual(new OrderPaid({ orderId: 1, amount: 2 }))
    }).pipe(Effect.runPromise))

  it("tell corrupt JSON from schema-invalid bodies", () => {
    const corrupt = Message.decodeBody(OrderPaid, "{")
    expect(Either.isLeft(corrupt) && corrupt.left.reason).toBe("CorruptBody")
    const invalid = Message.decodeBody(OrderPaid, `{"_tag":"OrderPaid","orderId":1.5,"amount":1}`)
    expect(Either.isLeft(invalid) && invalid.left.reason).toBe("InvalidBody")
  })

  it("decode to the same instances as the schema's own decode: transformations, filters, nested classes", () => {
    class Line extends Schema.Class<Line>("Line")({ sku: Schema.String, qty: Schema.Int }) {}
    class Placed extends Schema.TaggedClass<Placed>()("Placed", {
      at: Schema.DateFromString,
      lines: Schema.Array(Line),
      note: Schema.optionalWith(Schema.String, { default: () => "none" })
    }) {
      get total() {
        return this.lines.reduce((n, l) => n + l.qty, 0)
      }
    }
    const body = (qty: number, extra = "") =>
      `{"_tag":"Placed","at":"2026-11-30T10:00:00.000Z","lines":[{"sku":"a","qty":${qty}}]${extra}}`
    for (const qty of [1, 2, 3]) {
      const decoded = Either.getOrThrow(Message.decodeBody(Placed, body(qty)))
      const expected = Schema.decodeUnknownSync(Placed)(JSON.parse(body(qty)))
      expect(decoded).toBeInstanceOf(Placed)
      expect(decoded).toEqual(expected)
      expect(Object.keys(decoded)).toEqual(Object.keys(expected))
      expect(decoded.at).toBeInstanceOf(Date)
      expect(decoded.lines[0]).toBeInstanceOf(Line)
      expect(decoded.note).toBe("none")
      expect(decoded.total).toBe(qty)
    }
    const invalid = Message.decodeBody(Placed, body(1.5))
    expect(Either.isLeft(invalid) && invalid.left.reason).toBe("InvalidBody")

    // A filter on the class schema still applies.
    class Positive extends Schema.TaggedClass<Positive>()(
      "Positive",
      Schema.Struct({ n: Schema.Number }).pipe(Schema.filter((s) => s.n > 0 || "n must be positive"))
    ) {}
    expect(Either.isRight(Message.decodeBody(Positive, `{"_tag":"Positive","n":1}`))).toBe(true)
    expect(Either.isRight(Message.decodeBody(Positive, `{"_tag":"Positive","n":2}`))).toBe(true)
    const negative = Message.decodeBody(Positive, `{"_tag":"Positive","n":-1}`)
    expect(Either.isLeft(negative) && negative.left.message).toContain("n must be positive")
  })

  it("keep a class's own constructor when it adds or changes properties", () => {
    class Stamped extends Schema.TaggedClass<Stamped>()("Stamped", { n: Schema.Number }) {
      readonly seen = true
    }
    class Doubled extends Schema.TaggedClass<Doubled>()("Doubled", { n: Schema.Number }) {
      constructor(props: { readonly n: number }, options?: boolean) {
        super({ n: props.n * 2 }, options)
      }
    }
    for (const n of [1, 2]) {
      const stamped = Either.getOrThrow(Message.decodeBody(Stamped, `{"_tag":"Stamped","n":${n}}`))
      expect(stamped.seen).toBe(true)
      expect(stamped.n).toBe(n)
      const doubled = Either.getOrThrow(Message.decodeBody(Doubled, `{"_tag":"Doubled","n":${n}}`))
      expect(doubled.n).toBe(n * 2)
    }
  })

  it("get time-ordered UUIDv7 ids", () => {
    const ids = Array.from({ length: 100 }, () => MessageId.make())
    expect(new Set(ids).size).toBe(100)
    expect([...ids].sort()).toEqual(ids)
    expect(ids[0]![14]).toBe("7")
  })
})

describe("identifiers", () => {
  it.effect("accept plain and schema-qualified table names, reject hostile ones", () =>
    Effect.gen(function*() {
      expect(yield* Identifier.validateTableName("messenger_messages")).toBe("messenger_messages")
      expect(yield* Identifier.validateTableName("app.outbox")).toBe("app.outbox")
      for (
        const bad of ["", "x; DROP TABLE users", "a.b.c", "1abc", "out\"box", "a".repeat(64), "outbox--", "tab le"]
      ) {
        const error = yield* Effect.flip(Identifier.validateTableName(bad))
        expect(error._tag).toBe("OutboxConfigError")
      }
      for (const bad of ["", "a b", "x'; --", "q".repeat(191)]) {
        expect((yield* Effect.flip(Identifier.validateQueueName(bad)))._tag).toBe("OutboxConfigError")
      }
    }))
})
