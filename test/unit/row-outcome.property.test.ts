/**
 * Properties of the way from a stored row to an outcome, on its pure part (no database, no worker): whatever
 * text a row's body and headers hold — any JSON, nesting up to 10 000 levels, `\u0000` escapes, lone surrogates,
 * megabytes, prototype keys, text that is not JSON — decoding it never throws, every error text it produces is
 * bounded, and the outcome decided for it can be stored and read back. The arbitraries live in
 * test/support/rowText.ts; the database side is test/row-outcome.property.test.ts.
 *
 * Each property runs with a random seed; on failure fast-check prints the seed, the path and the shrunk
 * counterexample (replay with `{ seed, path }`).
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Option from "effect/Option"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { ReceivedMessage } from "../../src/domain/Envelope.js"
import {
  MessageDecodeError,
  NoHandlerForMessageError,
  RecoverableMessageHandlingError,
  UnrecoverableMessageHandlingError
} from "../../src/domain/Errors.js"
import * as Headers from "../../src/domain/Headers.js"
import * as Message from "../../src/domain/Message.js"
import * as Outcome from "../../src/domain/Outcome.js"
import type * as RetryDelay from "../../src/domain/RetryDelay.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import { decode, handle } from "../../src/programs/worker/handle.js"
import * as Handlers from "../../src/services/Handlers.js"
import type { RetryStrategyShape } from "../../src/services/RetryStrategy.js"
import {
  anyString,
  bodyText,
  bounds,
  headersText,
  jsonValue,
  maxJsonDepth,
  nest,
  OrderPaid,
  OrderShipped,
  overBounds,
  Payload,
  preview,
  prototypeKeys,
  shown,
  validBody
} from "../support/rowText.js"

// --- what the properties share -----------------------------------------------------------------------------------

/** What the handler of OrderPaid does in the current run of a property. */
type Behaviour =
  | { readonly _tag: "succeed" }
  | { readonly _tag: "fail"; readonly value: unknown }
  | { readonly _tag: "die"; readonly value: unknown }
  | { readonly _tag: "recoverable"; readonly message: string; readonly retryDelayMs: number | undefined }
  | { readonly _tag: "unrecoverable"; readonly message: string }

let behaviour: Behaviour = { _tag: "succeed" }

const act = (b: Behaviour): Effect.Effect<void, unknown> => {
  switch (b._tag) {
    case "succeed":
      return Effect.void
    case "fail":
      return Effect.fail(b.value)
    case "die":
      return Effect.die(b.value)
    case "recoverable":
      return Effect.fail(
        new RecoverableMessageHandlingError({
          message: b.message,
          ...(b.retryDelayMs === undefined ? {} : { retryDelay: Duration.millis(b.retryDelayMs) })
        })
      )
    case "unrecoverable":
      return Effect.fail(new UnrecoverableMessageHandlingError({ message: b.message }))
  }
}

/** OrderPaid has a handler (`record`); Payload has one for another transport only; OrderShipped has none. */
const registry = Effect.runSync(
  Handlers.make([
    Handlers.handler(OrderPaid, () => Effect.suspend(() => act(behaviour)), { name: "record" }),
    Handlers.handler(Payload, () => Effect.void, { name: "payload", fromTransport: "elsewhere" })
  ], { messages: [OrderShipped] })
)

const row = (body: string, headers: string, deliveries = 1): ReceivedMessage => ({
  id: "1",
  transport: "outbox",
  messageId: "01890a5d-ac96-774b-bcce-b302099a8057",
  body,
  headers,
  // as a claim of a row with infinite timestamps gives them
  createdAt: new Date(Number.NaN),
  availableAt: new Date(Number.NEGATIVE_INFINITY),
  deliveries
})

/** The bound error texts of an `ErrorDetails`, as `overBounds` reports them. */
const detailsOverBounds = (prefix: string, details: Headers.ErrorDetails) =>
  overBounds([
    [`${prefix}.tag`, details.tag, bounds.name],
    [`${prefix}.message`, details.message, bounds.message],
    [`${prefix}.cause`, details.cause, bounds.cause]
  ])

/** Headers as stored by a retry or a move to the failure queue: they encode, and decode back to a Right. */
const expectStorable = (headers: Headers.Headers) => {
  const text = Headers.encode(headers)
  const back = Headers.decode(text)
  expect(
    Either.isRight(back) ? "readable" : `unreadable: ${back.left.message.slice(0, 300)}`,
    `headers written ${preview(text)}`
  ).toBe("readable")
  return Either.getOrThrow(back)
}

const zeroSafe = (n: number) => (Object.is(n, -0) ? 0 : n)

// --- failure values ----------------------------------------------------------------------------------------------

/** A value as fast-check shows it in a counterexample. */
const described = <A extends object>(value: A, description: string): A =>
  Object.defineProperty(value, fc.toStringMethod, { value: () => description })

const short = (value: unknown): string =>
  value === undefined ? "undefined" : typeof value === "string" ? preview(value) : fc.stringify(value).slice(0, 120)

/** An array nested `n` deep, built without recursion. */
const deepArray = (n: number): unknown => {
  const root: Array<unknown> = []
  let current = root
  for (let i = 1; i < n; i++) {
    const next: Array<unknown> = []
    current.push(next)
    current = next
  }
  return root
}

/** Errors with odd or huge messages and tags, long (or cyclic) `cause` chains, and conversions that throw. */
const oddError = fc.record({
  message: fc.oneof(anyString, jsonValue, fc.constant(undefined)),
  tag: fc.option(fc.oneof(anyString, jsonValue), { nil: undefined }),
  name: fc.option(anyString, { nil: undefined }),
  chain: fc.oneof(fc.nat(6), fc.nat(20_000)),
  cyclic: fc.boolean(),
  throwing: fc.constantFrom("none", "toString", "toPrimitive")
}).map(({ chain, cyclic, message, name, tag, throwing }) => {
  const error = new Error(typeof message === "string" ? message : "") as Error & Record<PropertyKey, unknown>
  if (typeof message !== "string") Object.defineProperty(error, "message", { value: message })
  if (tag !== undefined) error._tag = tag
  if (name !== undefined) error.name = name
  let current: Record<string, unknown> = error
  for (let i = 0; i < chain; i++) {
    const next = new Error(`cause ${i}`)
    current.cause = next
    current = next as unknown as Record<string, unknown>
  }
  if (cyclic) current.cause = error
  if (throwing === "toString") {
    error.toString = () => {
      throw new Error("toString exploded")
    }
  }
  if (throwing === "toPrimitive") {
    error[Symbol.toPrimitive] = () => {
      throw new Error("toPrimitive exploded")
    }
  }
  return described(
    error,
    `oddError(${
      JSON.stringify({ message: short(message), tag: short(tag), name: short(name), chain, cyclic, throwing })
    })`
  )
})

/** Anything a handler can fail or die with, whose properties can be read. */
const failureValue: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.anything({
      withNullPrototype: true,
      withBigInt: true,
      withDate: true,
      withMap: true,
      withSet: true,
      withBoxedValues: true,
      withSparseArray: true,
      withTypedArray: true,
      maxDepth: 3
    })
  },
  { weight: 3, arbitrary: oddError },
  { weight: 1, arbitrary: anyString },
  {
    weight: 1,
    arbitrary: fc.integer({ min: 1, max: 10_000 }).map((n) =>
      described(deepArray(n) as object, `an array nested ${n} deep`)
    )
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom<unknown>(
      Symbol("s"),
      10n ** 400n,
      Object.create(null),
      Object.assign(Object.create(null), { message: Object.create(null) })
    )
  }
)

/** A cause with odd values: failures, defects, interruptions, in sequence and in parallel, some very long. */
const oddCause: fc.Arbitrary<Cause.Cause<unknown>> = fc.letrec<{ cause: Cause.Cause<unknown> }>((tie) => ({
  cause: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    failureValue.map((v) => described(Cause.fail(v), `Cause.fail(${short(v)})`)),
    failureValue.map((v) => described(Cause.die(v), `Cause.die(${short(v)})`)),
    fc.constant(described(Cause.interrupt(FiberId.none), "Cause.interrupt(FiberId.none)")),
    fc.tuple(tie("cause"), tie("cause")).map(([a, b]) =>
      described(Cause.sequential(a, b), `Cause.sequential(${fc.stringify(a)}, ${fc.stringify(b)})`)
    ),
    fc.tuple(tie("cause"), tie("cause")).map(([a, b]) =>
      described(Cause.parallel(a, b), `Cause.parallel(${fc.stringify(a)}, ${fc.stringify(b)})`)
    ),
    fc.tuple(fc.integer({ min: 1, max: 5_000 }), failureValue).map(([n, v]) => {
      let cause: Cause.Cause<unknown> = Cause.fail(v)
      for (let i = 0; i < n; i++) cause = Cause.sequential(cause, Cause.fail(i))
      return described(cause, `Cause.fail(${short(v)}) then ${n} more failures in sequence`)
    })
  )
})).cause

/** Values whose property reads themselves throw: getters of `_tag`, `name`, `message`, `cause`, proxies. */
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom("_tag", "name", "message", "cause", "stack").map((key) => {
    const error = new Error("hostile")
    Object.defineProperty(error, key, {
      get() {
        throw new Error(`${key} getter exploded`)
      }
    })
    return described(error, `an Error whose ${key} getter throws`) as unknown
  }),
  fc.constantFrom("get", "has", "all").map((trap) => {
    const description = `a Proxy whose ${trap === "all" ? "every" : trap} trap throws`
    const boom = () => {
      throw new Error(`proxy ${trap} exploded`)
    }
    // fast-check still reads its description (to show the counterexample)
    const get = (_: object, key: PropertyKey) => key === fc.toStringMethod ? () => description : boom()
    // fast-check also asks whether the value clones itself (a symbol): only that question is answered
    const has = (_: object, key: PropertyKey) => typeof key === "symbol" ? false : boom()
    const handler: ProxyHandler<object> = trap === "get"
      ? { get }
      : trap === "has"
      ? { has, get: (_, key) => key === fc.toStringMethod ? () => description : undefined }
      : { get, has, ownKeys: boom, getOwnPropertyDescriptor: boom, getPrototypeOf: boom }
    return new Proxy({}, handler) as unknown
  })
)

const behaviourArb: fc.Arbitrary<Behaviour> = fc.oneof(
  fc.constant<Behaviour>({ _tag: "succeed" }),
  failureValue.map((value): Behaviour => ({ _tag: "fail", value })),
  failureValue.map((value): Behaviour => ({ _tag: "die", value })),
  fc.tuple(anyString, fc.option(fc.constantFrom(0, 1, 3_600_000), { nil: undefined })).map((
    [message, retryDelayMs]
  ): Behaviour => ({ _tag: "recoverable", message, retryDelayMs })),
  anyString.map((message): Behaviour => ({ _tag: "unrecoverable", message }))
)

const strategyOf = (policy: ScheduleRetryStrategy.Policy): RetryStrategyShape =>
  Effect.runSync(ScheduleRetryStrategy.make({ default: policy }))

/** Strategies that give up within a few retries (a large budget is `huge attempts` below). */
const smallStrategy = fc.constantFrom(
  { maxRetries: 0 },
  { maxRetries: 1, delay: "1 millis" },
  { maxRetries: 5 },
  { maxRetries: 3, delay: "1 second", multiplier: 1, maxDelay: "1 second", jitter: 1 }
)

const deliveries = fc.oneof(
  fc.constantFrom(0, 1, 2, 2 ** 31 - 2, 2 ** 31 - 1),
  fc.integer({ min: 0, max: 2 ** 31 - 1 })
)

// --- the properties ----------------------------------------------------------------------------------------------

describe("decoding a stored row's text", () => {
  it("Headers.decode never throws: a Right, or a CorruptHeaders MessageDecodeError with a bounded message and type", () => {
    fc.assert(
      fc.property(shown(headersText), ({ text: raw }) => {
        const result = Headers.decode(raw)
        if (Either.isRight(result)) {
          expect(result.right).toBeInstanceOf(Headers.Headers)
          return
        }
        expect(result.left).toBeInstanceOf(MessageDecodeError)
        expect(result.left.reason).toBe("CorruptHeaders")
        expect(
          overBounds([["message", result.left.message, bounds.message], ["type", result.left.type, bounds.name]])
        ).toEqual([])
      }),
      { numRuns: 300 }
    )
  })

  it("Headers.decode accepts only JSON: a Right's text parses, and names the same type", () => {
    fc.assert(
      fc.property(
        shown(fc.oneof(
          headersText,
          fc.string({ unit: fc.constantFrom("\t", "\n", "\u0001", "\u001f", "a") }).map((s) => `{"type":"${s}"}`)
        )),
        ({ text: raw }) => {
          const result = Headers.decode(raw)
          if (Either.isLeft(result)) return
          let parsed: unknown
          try {
            parsed = JSON.parse(raw)
          } catch (error) {
            expect.fail(`decoded to a Right although not JSON (${String(error)}): ${preview(raw)}`)
          }
          expect((parsed as { type: unknown }).type).toBe(result.right.type)
        }
      ),
      { numRuns: 300 }
    )
  })

  it("Message.decodeBody never throws: a Right of the class, or a CorruptBody/InvalidBody error with a bounded message", () => {
    fc.assert(
      fc.property(shown(bodyText), fc.constantFrom(OrderPaid, Payload, OrderShipped), ({ text: body }, cls) => {
        const result = Message.decodeBody(cls as Message.MessageClass, body)
        if (Either.isRight(result)) {
          expect(result.right).toBeInstanceOf(cls)
          return
        }
        expect(result.left).toBeInstanceOf(MessageDecodeError)
        expect(["CorruptBody", "InvalidBody"]).toContain(result.left.reason)
        expect(result.left.type).toBe(cls._tag)
        expect(
          overBounds([["message", result.left.message, bounds.message], ["type", result.left.type, bounds.name]])
        ).toEqual([])
      }),
      { numRuns: 300 }
    )
  })

  it("valid text still decodes: OrderPaid bodies, and Payload bodies nested up to the limit", () => {
    const limit = Math.min(1_000, (maxJsonDepth ?? 10_000) - 1)
    fc.assert(
      fc.property(
        fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
        fc.double({ noNaN: true, noDefaultInfinity: true }).map(zeroSafe),
        fc.integer({ min: 1, max: limit }),
        fc.constantFrom("array", "object", "mixed") as fc.Arbitrary<"array" | "object" | "mixed">,
        (orderId, amount, depth, shape) => {
          const paid = Message.decodeBody(OrderPaid, validBody(orderId, amount))
          expect(Either.isRight(paid) && [paid.right.orderId, paid.right.amount]).toEqual([orderId, amount])
          const data = nest(shape === "mixed" ? depth - (depth % 2) : depth, shape)
          const payload = Message.decodeBody(Payload, `{"_tag":"Payload","data":${data}}`)
          expect(
            Either.isRight(payload) ? JSON.stringify(payload.right.data) : payload.left.message.slice(0, 200),
            `a Payload whose data nests ${depth} deep`
          ).toBe(JSON.stringify(JSON.parse(data)))
        }
      ),
      { numRuns: 200 }
    )
  })

  it("headers round trip: stored headers that decode are written back as they were; what cannot be kept (a number past the float range, a custom header named __proto__) is CorruptHeaders, never changed silently", () => {
    const stamps = fc.record({
      type: anyString,
      custom: fc.dictionary(fc.oneof(fc.constantFrom(...prototypeKeys), anyString), anyString, { maxKeys: 4 }),
      handledBy: fc.array(anyString, { maxLength: 3 }),
      originalTransport: anyString
    }).map((fields) => JSON.stringify(fields))
    // numbers as JSON text: JSON.parse reads 1e400 as Infinity, which JSON.stringify writes as null
    const number = fc.oneof(
      fc.double({ noNaN: true, noDefaultInfinity: true }).map((n) => JSON.stringify(n)),
      fc.constantFrom("1e400", "-1e400", "1e-400", "9007199254740993")
    )
    const numbers = fc.tuple(number, number).map(([delayMs, retryDelayMs]) =>
      `{"type":"OrderPaid","delayMs":${delayMs},"redeliveries":[{"retryCount":1,"delayMs":${retryDelayMs},` +
      `"errorTag":"E","errorMessage":"m"}]}`
    )
    fc.assert(
      fc.property(shown(fc.oneof(stamps, numbers)), ({ text }) => {
        const decoded = Headers.decode(text)
        const parsed = JSON.parse(text) as {
          delayMs?: number
          redeliveries?: Array<{ delayMs: number }>
          custom?: object
        }
        const unkeepable = [
          parsed.delayMs,
          ...(parsed.redeliveries ?? []).map((r) => r.delayMs)
        ].some((n) => n !== undefined && !Number.isFinite(n)) ||
          (parsed.custom !== undefined && Object.prototype.hasOwnProperty.call(parsed.custom, "__proto__"))
        if (unkeepable) {
          expect(Either.isLeft(decoded) && decoded.left.reason).toBe("CorruptHeaders")
          return
        }
        expect(Either.isRight(decoded) || decoded.left.message.slice(0, 300)).toBe(true)
        if (Either.isLeft(decoded)) return
        // What a retry writes back: the same stamps, the custom ones included.
        expect(JSON.parse(Headers.encode(decoded.right))).toEqual(JSON.parse(text))
      }),
      { numRuns: 200 }
    )
  })
})

describe("from a row to a rejection", () => {
  it("handle.decode never throws: an envelope, or a decode / no-handler error with bounded text and storable headers", () => {
    fc.assert(
      fc.property(shown(bodyText), shown(headersText), ({ text: body }, { text: headers }) => {
        const result = decode(row(body, headers), registry)
        if (Either.isRight(result)) {
          expect(result.right.envelope.message).toBeInstanceOf(OrderPaid)
          expect(result.right.handlers.map((h) => h.name)).toEqual(["record"])
          return
        }
        const { error } = result.left
        expect(error instanceof MessageDecodeError || error instanceof NoHandlerForMessageError).toBe(true)
        expect(
          overBounds([["message", error.message, bounds.message], ["type", error.type, bounds.name]])
        ).toEqual([])
        if (error instanceof MessageDecodeError && error.reason === "CorruptHeaders") {
          expect(result.left.headers.rawHeaders === headers).toBe(true)
        }
        expectStorable(result.left.headers)
      }),
      { numRuns: 300 }
    )
  })

  it("an undecodable row's outcome is a Fail with a bounded reason, its headers storable and readable back", () => {
    fc.assert(
      fc.property(shown(bodyText), shown(headersText), ({ text: body }, { text: headers }) => {
        const result = decode(row(body, headers), registry)
        if (Either.isRight(result)) return
        const outcome = Outcome.decide(
          { _tag: "Rejected", error: result.left.error },
          "outbox",
          result.left.headers,
          Option.none()
        )
        expect(outcome._tag).toBe("Fail")
        if (outcome._tag !== "Fail") return
        expect(detailsOverBounds("error", outcome.error)).toEqual([])
        expect(outcome.error.tag).toBe(result.left.error._tag)
        const stored = expectStorable(outcome.headers)
        expect(stored.errorDetails).toEqual(outcome.error)
        expect(stored.originalTransport).toBe(outcome.headers.originalTransport ?? "outbox")
      }),
      { numRuns: 300 }
    )
  })
})

describe("describing a failure", () => {
  it("Outcome.errorDetails never throws on any cause (odd, huge, deep, null-prototype, cyclic) and bounds tag, message and cause", () => {
    fc.assert(
      fc.property(oddCause, (cause) => {
        const details = Outcome.errorDetails(cause)
        expect(detailsOverBounds("details", details)).toEqual([])
        expectStorable(new Headers.Headers({ type: "OrderPaid", errorDetails: details }))
      }),
      { numRuns: 300 }
    )
  })

  it("Outcome.errorDetails never throws even on values whose property reads throw (getters, proxies)", () => {
    fc.assert(
      fc.property(hostileValue, fc.boolean(), (value, asDefect) => {
        const details = Outcome.errorDetails(asDefect ? Cause.die(value) : Cause.fail(value))
        expect(detailsOverBounds("details", details)).toEqual([])
      }),
      { numRuns: 60 }
    )
  })
})

describe("the whole way: handle(row) with a handler and a retry strategy", () => {
  it("any row, any handler behaviour, any delivery count: an Ack, a Retry or a Fail, bounded, storable, with a storable delay", async () => {
    await fc.assert(
      fc.asyncProperty(shown(bodyText), shown(headersText), deliveries, behaviourArb, smallStrategy, async (
        { text: body },
        { text: headers },
        count,
        does,
        policy
      ) => {
        behaviour = does
        const exit = await Effect.runPromiseExit(
          handle(row(body, headers, count), registry, strategyOf(policy), true).pipe(
            // a safety net for a computation that never ends (not a measure: a decision takes microseconds)
            Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "no outcome within 5 seconds" })
          )
        )
        expect(Exit.isSuccess(exit) || Cause.pretty(exit.cause).slice(0, 2_000)).toBe(true)
        if (Exit.isFailure(exit)) return
        const outcome = exit.value
        expect(["Ack", "Retry", "Fail"]).toContain(outcome._tag)
        if (outcome._tag === "Ack") {
          const decoded = decode(row(body, headers, count), registry)
          expect(Either.isRight(decoded)).toBe(true)
          const skipped = Either.isRight(decoded) && (decoded.right.envelope.headers.handledBy ?? []).includes("record")
          expect(does._tag === "succeed" || skipped).toBe(true)
        }
        if (outcome._tag === "Retry" || outcome._tag === "Fail") {
          expect(detailsOverBounds("error", outcome.error)).toEqual([])
          const stored = expectStorable(outcome.headers)
          if (outcome._tag === "Fail") expect(stored.errorDetails).toEqual(outcome.error)
        }
        if (outcome._tag === "Retry") {
          const ms = Duration.toMillis(outcome.delay)
          // the worker writes now() + delay as available_at: it must be a time
          expect(
            Number.isFinite(ms) && ms >= 0 && Number.isFinite(new Date(Date.now() + ms).getTime()),
            `delay ${ms} ms`
          )
            .toBe(true)
          const history = outcome.headers.redeliveries ?? []
          expect(history.length).toBeLessThanOrEqual(Headers.redeliveryHistorySize)
          expect(history[history.length - 1]?.retryCount).toBe(outcome.attempt)
          // the entry this decision recorded (the earlier ones are the row's own text)
          expect(
            overBounds([[
              "the new redelivery's errorMessage",
              history[history.length - 1]?.errorMessage,
              bounds.message
            ]])
          )
            .toEqual([])
        }
      }),
      { numRuns: 200 }
    )
  })

  it(
    "huge attempts: a strategy answers for attempt 2^31 − 1 (a delivery count, a stored retry count) at once, and by its budget",
    async () => {
      const policies: ReadonlyArray<
        { readonly policy: RetryDelay.ExponentialOptions; readonly delayMs: (attempt: number) => number }
      > = [
        // 1 s × 3^(n−1), capped at an hour
        {
          policy: { maxRetries: 2 ** 31 - 1, delay: "1 second", maxDelay: "1 hour" },
          delayMs: (n) => n > 8 ? 3_600_000 : 1_000 * 3 ** (n - 1)
        },
        { policy: { maxRetries: Number.MAX_SAFE_INTEGER, delay: "5 seconds", multiplier: 1 }, delayMs: () => 5_000 },
        // a budget just short of the attempt: it gives up (-1)
        {
          policy: { maxRetries: 2 ** 31 - 3, delay: "1 second", maxDelay: "1 hour" },
          delayMs: (n) => n > 2 ** 31 - 3 ? -1 : n > 8 ? 3_600_000 : 1_000 * 3 ** (n - 1)
        }
      ]
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(2 ** 31 - 1, 2 ** 31 - 2),
          fc.constantFrom("deliveries", "history"),
          fc.constantFrom(...policies),
          async (attempt, via, { delayMs, policy }) => {
            behaviour = { _tag: "fail", value: new Error("boom") }
            const headers = via === "history"
              ? Headers.encode(
                new Headers.Headers({
                  type: "OrderPaid",
                  redeliveries: [
                    new Headers.Redelivery({
                      retryCount: attempt - 1,
                      delayMs: 1_000,
                      errorTag: "Error",
                      errorMessage: "boom"
                    })
                  ]
                })
              )
              : `{"type":"OrderPaid"}`
            // via deliveries: the claims beyond 1 + retries recorded no outcome, so the strategy is asked about
            // attempt `deliveries - 1` (a worker died on it) before the handler runs, whose failure is then retry 1
            const count = via === "deliveries" ? attempt + 1 : attempt
            const exit = await Effect.runPromiseExit(
              handle(row(validBody(1, 1), headers, count), registry, strategyOf(policy), true).pipe(
                // a safety net, not a measure: an answer takes microseconds, stepping the schedule 2^31 times hours
                Effect.timeoutFail({
                  duration: "3 seconds",
                  onTimeout: () =>
                    `no outcome within 3 seconds for attempt ${attempt} (the schedule stepped per attempt?)`
                })
              )
            )
            expect(Exit.isSuccess(exit) || Cause.pretty(exit.cause).slice(0, 500)).toBe(true)
            if (Exit.isFailure(exit)) return
            const outcome = exit.value
            const gaveUp = delayMs(attempt) < 0
            const expected = gaveUp ? "Fail" : `Retry after ${delayMs(via === "deliveries" ? 1 : attempt)} ms`
            expect(
              outcome._tag === "Retry" ? `Retry after ${Duration.toMillis(outcome.delay)} ms` : outcome._tag,
              `attempt ${attempt} via ${via}, budget ${policy.maxRetries}`
            ).toBe(expected)
            if (gaveUp && outcome._tag === "Fail") {
              expect(outcome.error.tag).toBe(via === "deliveries" ? "WorkerDiedError" : "Error")
            }
          }
        ),
        { numRuns: 12, endOnFailure: true }
      )
    },
    60_000
  )

  it("the exponential strategy's delay for retry n is min(delay × multiplier^(n−1), maxDelay) while n ≤ maxRetries, none after", () => {
    const budget = fc.oneof(fc.integer({ min: 0, max: 60 }), fc.integer({ min: 990, max: 1_010 }))
    fc.assert(
      fc.property(
        budget.chain((maxRetries) =>
          fc.tuple(
            fc.constant(maxRetries),
            fc.oneof(
              fc.integer({ min: 1, max: 70 }),
              fc.integer({ min: Math.max(1, maxRetries - 2), max: maxRetries + 2 }),
              fc.integer({ min: 1, max: 5_000 })
            )
          )
        ),
        fc.integer({ min: 0, max: 10_000 }),
        fc.double({ min: 1, max: 10, noNaN: true }),
        fc.integer({ min: 0, max: 3_600_000 }),
        ([maxRetries, attempt], delayMs, multiplier, maxDelayMs) => {
          const strategy = strategyOf({
            maxRetries,
            delay: Duration.millis(delayMs),
            multiplier,
            maxDelay: Duration.millis(maxDelayMs)
          })
          const answer = Effect.runSync(strategy.delayFor({ transport: "outbox", attempt, error: new Error("boom") }))
          const context = `attempt ${attempt} of a budget of ${maxRetries} retries`
          if (attempt > maxRetries) {
            expect(Option.isNone(answer) ? "gives up" : `retries after ${Duration.format(answer.value)}`, context)
              .toBe("gives up")
            return
          }
          // (0 × an overflowing power is 0, not NaN)
          const expected = delayMs === 0 ? 0 : Math.min(delayMs * multiplier ** (attempt - 1), maxDelayMs)
          expect(Option.isSome(answer), context).toBe(true)
          const ms = Duration.toMillis(Option.getOrThrow(answer))
          // Durations keep nanoseconds: a microsecond of slack, or a billionth of the delay
          expect(Math.abs(ms - expected), context).toBeLessThanOrEqual(Math.max(1e-3, 1e-9 * expected))
        }
      ),
      { numRuns: 300 }
    )
  })
})
