/**
 * The outcome rules (SPEC §5) over a table of cases: no worker, no transport, no database.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import {
  MessageDecodeError,
  NoHandlerForMessageError,
  RecoverableMessageHandlingError,
  UnrecoverableMessageHandlingError,
  WorkerDiedError
} from "../../src/domain/Errors.js"
import * as Headers from "../../src/domain/Headers.js"
import * as Outcome from "../../src/domain/Outcome.js"

const fresh = new Headers.Headers({ type: "OrderPaid" })
const retried = (n: number, delayMs = 1_000) =>
  new Headers.Headers({
    type: "OrderPaid",
    redeliveries: Array.from({ length: n }, (_, i) =>
      new Headers.Redelivery({ retryCount: i + 1, delayMs, errorTag: "Boom", errorMessage: "boom" }))
  })
const failed = (...errors: ReadonlyArray<unknown>): Outcome.Happened => ({
  _tag: "HandlersFailed",
  causes: errors.map((e) => Cause.fail(e)),
  handledBy: []
})
const boom = new Error("boom")
const seconds = (n: number) => Option.some(Duration.seconds(n))

interface Case {
  readonly title: string
  readonly happened: Outcome.Happened
  readonly headers?: Headers.Headers
  /** The strategy's answer (when asked). */
  readonly answer?: Option.Option<Duration.Duration>
  readonly asks: boolean
  readonly expected: { readonly _tag: Outcome.Outcome["_tag"]; readonly delayMs?: number; readonly errorTag?: string }
}

const cases: ReadonlyArray<Case> = [
  { title: "success → ack", happened: Outcome.handled, asks: false, expected: { _tag: "Ack" } },
  { title: "interruption → release", happened: Outcome.interrupted, asks: false, expected: { _tag: "Release" } },
  {
    title: "corrupt headers → fail",
    happened: { _tag: "Rejected", error: new MessageDecodeError({ reason: "CorruptHeaders", message: "bad" }) },
    asks: false,
    expected: { _tag: "Fail", errorTag: "MessageDecodeError" }
  },
  {
    title: "unknown type → fail",
    happened: { _tag: "Rejected", error: new MessageDecodeError({ reason: "UnknownType", type: "X", message: "?" }) },
    asks: false,
    expected: { _tag: "Fail", errorTag: "MessageDecodeError" }
  },
  {
    title: "no handler → fail",
    happened: {
      _tag: "Rejected",
      error: new NoHandlerForMessageError({ type: "OrderPaid", transport: "outbox", message: "none" })
    },
    asks: false,
    expected: { _tag: "Fail", errorTag: "NoHandlerForMessageError" }
  },
  {
    title: "a worker died on it and the strategy gave up → fail",
    happened: { _tag: "Died", error: new WorkerDiedError({ message: "died", deliveries: 6 }) },
    asks: false,
    expected: { _tag: "Fail", errorTag: "WorkerDiedError" }
  },
  {
    title: "unrecoverable → fail without asking the strategy",
    happened: failed(new UnrecoverableMessageHandlingError({ message: "no" })),
    asks: false,
    expected: { _tag: "Fail", errorTag: "UnrecoverableMessageHandlingError" }
  },
  {
    title: "recoverable with a delay → retry after it, without asking",
    happened: failed(new RecoverableMessageHandlingError({ message: "later", retryDelay: Duration.seconds(7) })),
    asks: false,
    expected: { _tag: "Retry", delayMs: 7_000, errorTag: "RecoverableMessageHandlingError" }
  },
  {
    title: "two recoverable delays → the shorter",
    happened: failed(
      new RecoverableMessageHandlingError({ message: "a", retryDelay: Duration.seconds(9) }),
      new RecoverableMessageHandlingError({ message: "b", retryDelay: Duration.seconds(4) })
    ),
    asks: false,
    expected: { _tag: "Retry", delayMs: 4_000 }
  },
  {
    title: "recoverable without a delay → the strategy's delay",
    happened: failed(new RecoverableMessageHandlingError({ message: "later" })),
    answer: seconds(3),
    asks: true,
    expected: { _tag: "Retry", delayMs: 3_000 }
  },
  {
    title: "recoverable when the strategy gives up → retried anyway, after the last delay",
    happened: failed(new RecoverableMessageHandlingError({ message: "later" })),
    headers: retried(5, 81_000),
    answer: Option.none(),
    asks: true,
    expected: { _tag: "Retry", delayMs: 81_000 }
  },
  {
    title: "recoverable, strategy gives up, no history → 1 second",
    happened: failed(new RecoverableMessageHandlingError({ message: "later" })),
    answer: Option.none(),
    asks: true,
    expected: { _tag: "Retry", delayMs: 1_000 }
  },
  {
    title: "any other failure → the strategy's delay",
    happened: failed(boom),
    answer: seconds(2),
    asks: true,
    expected: { _tag: "Retry", delayMs: 2_000, errorTag: "Error" }
  },
  {
    title: "any other failure, strategy gives up → fail",
    happened: failed(boom),
    answer: Option.none(),
    asks: true,
    expected: { _tag: "Fail", errorTag: "Error" }
  },
  {
    title: "a defect → the strategy",
    happened: { _tag: "HandlersFailed", causes: [Cause.die(new TypeError("bug"))], handledBy: [] },
    answer: seconds(1),
    asks: true,
    expected: { _tag: "Retry", delayMs: 1_000, errorTag: "TypeError" }
  },
  {
    title: "unrecoverable beside another failure → the strategy decides",
    happened: failed(new UnrecoverableMessageHandlingError({ message: "no" }), boom),
    answer: Option.none(),
    asks: true,
    expected: { _tag: "Fail" }
  }
]

describe("Outcome.decide", () => {
  for (const c of cases) {
    it(c.title, () => {
      const headers = c.headers ?? fresh
      expect(Option.isSome(Outcome.question(c.happened, "outbox", headers))).toBe(c.asks)
      const outcome = Outcome.decide(c.happened, "outbox", headers, c.answer ?? Option.none())
      expect(outcome._tag).toBe(c.expected._tag)
      if (outcome._tag === "Retry") {
        expect(Duration.toMillis(outcome.delay)).toBe(c.expected.delayMs)
        expect(outcome.attempt).toBe(Headers.retryCount(headers) + 1)
        const last = outcome.headers.redeliveries!.at(-1)!
        expect(last.retryCount).toBe(outcome.attempt)
        expect(last.delayMs).toBe(c.expected.delayMs)
      }
      if (outcome._tag === "Fail") {
        expect(outcome.headers.errorDetails).toEqual(outcome.error)
        expect(outcome.headers.originalTransport).toBe("outbox")
      }
      if (c.expected.errorTag !== undefined && (outcome._tag === "Retry" || outcome._tag === "Fail")) {
        expect(outcome.error.tag).toBe(c.expected.errorTag)
      }
    })
  }

  it("the question names the next attempt and the error the strategy must judge", () => {
    const recoverable = new RecoverableMessageHandlingError({ message: "later" })
    expect(Outcome.question(failed(boom, recoverable), "outbox", retried(2))).toEqual(
      Option.some({ transport: "outbox", attempt: 3, error: recoverable })
    )
    expect(Outcome.question(failed(boom), "shipping", fresh)).toEqual(
      Option.some({ transport: "shipping", attempt: 1, error: boom })
    )
  })

  it("remembers the handlers that succeeded, on retry and on the way to the failure queue", () => {
    const happened: Outcome.Happened = { _tag: "HandlersFailed", causes: [Cause.fail(boom)], handledBy: ["audit"] }
    const retry = Outcome.decide(happened, "outbox", fresh, seconds(1))
    const fail = Outcome.decide(happened, "outbox", fresh, Option.none())
    expect(retry._tag === "Retry" && retry.headers.handledBy).toEqual(["audit"])
    expect(fail._tag === "Fail" && fail.headers.handledBy).toEqual(["audit"])
  })

  it("never writes a retry delay a row cannot store: a hostile last delay, an infinite retryDelay", () => {
    const hostile = new Headers.Headers({
      type: "OrderPaid",
      redeliveries: [
        new Headers.Redelivery({ retryCount: 2, delayMs: 8638203843294134, errorTag: "", errorMessage: "__proto__" })
      ]
    })
    const tenYears = Duration.toMillis(Duration.days(3650))
    for (
      const error of [
        new RecoverableMessageHandlingError({ message: "again" }),
        new RecoverableMessageHandlingError({ message: "again", retryDelay: Duration.infinity })
      ]
    ) {
      const outcome = Outcome.decide(failed(error), "outbox", hostile, Option.none())
      expect(outcome._tag === "Retry" && Duration.toMillis(outcome.delay)).toBe(tenYears)
      expect(outcome._tag === "Retry" && outcome.headers.redeliveries?.at(-1)?.delayMs).toBe(tenYears)
    }
  })

  it("keeps the original transport of a message that failed before", () => {
    const again = new Headers.Headers({ type: "OrderPaid", originalTransport: "shipping" })
    const outcome = Outcome.decide(
      failed(new UnrecoverableMessageHandlingError({ message: "no" })),
      "outbox",
      again,
      Option.none()
    )
    expect(outcome._tag === "Fail" && outcome.headers.originalTransport).toBe("shipping")
  })

  it("bounds the recorded message and cause, and says what was cut", () => {
    const outcome = Outcome.decide(failed(new Error("x".repeat(100_000))), "outbox", fresh, Option.none())
    if (outcome._tag !== "Fail") return expect.unreachable()
    expect(outcome.error.cause!.length).toBeLessThanOrEqual(Outcome.maxCauseLength + 40)
    expect(outcome.error.cause).toMatch(/… \[\d+ more characters cut\]$/)
    expect(outcome.error.message.length).toBeLessThanOrEqual(Outcome.maxMessageLength + 40)
    expect(outcome.error.message).toMatch(/^x+… \[98000 more characters cut\]$/)
  })

  it("keeps the words of an error's cause: a driver's error under a SqlError", () => {
    const driver = new Error(`invalid byte sequence for encoding "UTF8": 0x00`)
    const error = Object.assign(new Error("Failed to execute statement"), { _tag: "SqlError", cause: driver })
    const details = Outcome.errorDetails(Cause.fail(error))
    expect(details.tag).toBe("SqlError")
    expect(details.message).toBe(`Failed to execute statement: invalid byte sequence for encoding "UTF8": 0x00`)
    expect(details.cause).toContain(`Caused by: Error: invalid byte sequence for encoding "UTF8": 0x00`)
  })
})

class PaymentDeclined extends Data.TaggedError("PaymentDeclined")<{ readonly code: string }> {}

describe("Outcome.errorDetails of an error without a message", () => {
  const declined = `{"code":"card_expired"}`

  it("a Data.TaggedError with fields only: the tag and the fields as JSON", () => {
    const details = Outcome.errorDetails(Cause.fail(new PaymentDeclined({ code: "card_expired" })))
    expect(details.tag).toBe("PaymentDeclined")
    expect(details.message).toBe(declined)
  })

  it("a plain object failure and a plain object defect: the tag and the fields, never [object Object]", () => {
    for (
      const cause of [
        Cause.fail({ _tag: "PaymentDeclined", code: "card_expired" }),
        Cause.die({ _tag: "PaymentDeclined", code: "card_expired" })
      ]
    ) {
      const details = Outcome.errorDetails(cause)
      expect(details.tag).toBe("PaymentDeclined")
      expect(details.message).toBe(declined)
      expect(details.cause).not.toContain("[object Object]")
    }
    expect(Outcome.errorDetails(Cause.die({ amount: 5, currency: "EUR" })).message).toBe(
      `{"amount":5,"currency":"EUR"}`
    )
  })

  it("an error that says nothing at all still has a message", () => {
    for (const error of [new Error(), new PaymentDeclined({} as { code: string }), {}]) {
      expect(Outcome.errorDetails(Cause.fail(error)).message.length).toBeGreaterThan(0)
    }
  })

  it("keeps the fields beside the words of the error's cause", () => {
    const error =
      new (class extends Data.TaggedError("GatewayError")<{ readonly status: number; readonly cause: unknown }> {})({
        status: 502,
        cause: new Error("upstream timed out")
      })
    expect(Outcome.errorDetails(Cause.fail(error)).message).toBe(`{"status":502}: upstream timed out`)
  })

  it("fields that are cyclic, BigInt, throwing getters or huge: bounded, never a throw", () => {
    const cyclic: Record<string, unknown> = { _tag: "Loop", id: 1n }
    cyclic.self = cyclic
    Object.defineProperty(cyclic, "secret", {
      enumerable: true,
      get: () => {
        throw new Error("no")
      }
    })
    const details = Outcome.errorDetails(Cause.fail(cyclic))
    expect(details.tag).toBe("Loop")
    expect(details.message).toBe(`{"id":1,"self":"(circular)","secret":"(unreadable)"}`)
    const huge = Outcome.errorDetails(Cause.fail({ _tag: "Huge", items: Array.from({ length: 100_000 }, (_, i) => i) }))
    expect(huge.message.length).toBeLessThanOrEqual(Outcome.maxMessageLength + 40)
    expect(huge.message).toMatch(/^\{"items":\[0,1,2,.*… \[\d+ more characters cut\]$/)
  })
})

describe("Outcome.workerDied", () => {
  it("without charged crashes, counts deliveries beyond the recorded retries as deaths", () => {
    expect(Outcome.workerDied("outbox", { deliveries: 1 }, fresh)).toEqual(Option.none())
    expect(Outcome.workerDied("outbox", { deliveries: 3 }, retried(2))).toEqual(Option.none())
    const died = Option.getOrThrow(Outcome.workerDied("outbox", { deliveries: 4 }, retried(1)))
    expect(died.attempt).toBe(3)
    expect(died.error).toBeInstanceOf(WorkerDiedError)
    expect(died.error.deliveries).toBe(4)
  })

  it("with charged crashes, counts only those: deliveries that only claimed the message are not deaths", () => {
    expect(Outcome.workerDied("outbox", { deliveries: 9, crashes: 0 }, retried(1))).toEqual(Option.none())
    const died = Option.getOrThrow(Outcome.workerDied("outbox", { deliveries: 9, crashes: 2 }, retried(1)))
    expect(died.attempt).toBe(3)
    expect(died.error.deliveries).toBe(9)
    expect(died.error.message).toContain("alone (2 of 9 deliveries recorded no outcome)")
  })
})
