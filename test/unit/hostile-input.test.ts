/**
 * Hostile input that needs no database: retry decisions whose cost does not grow with the attempt number, worker
 * options that are not numbers, derived names that always fit PostgreSQL's limits, reasons cut with a marker.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Identifier from "../../src/domain/Identifier.js"
import * as RetryDelay from "../../src/domain/RetryDelay.js"
import * as Text from "../../src/internal/text.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import { OrderPaid } from "../support/messages.js"

/** A schedule that counts how often it is stepped. */
const counted = <Out>(schedule: Schedule.Schedule<Out>) => {
  const counter = { steps: 0 }
  return {
    counter,
    schedule: schedule.pipe(Schedule.tapOutput(() => Effect.sync(() => void counter.steps++)))
  }
}

describe("retry decisions", () => {
  it.effect("cost at most maxSteps steps, whatever the attempt number", () =>
    Effect.gen(function*() {
      const spaced = counted(Schedule.spaced("1 minute"))
      const delay = yield* RetryDelay.delayForAttempt(spaced.schedule, 2_147_483_647, undefined)
      expect(Option.map(delay, Duration.toMillis)).toEqual(Option.some(60_000))
      expect(spaced.counter.steps).toBeLessThanOrEqual(RetryDelay.maxSteps)

      const backoff = counted(RetryDelay.exponential({ maxRetries: 5 }))
      expect(yield* RetryDelay.delayForAttempt(backoff.schedule, 1_000_000, undefined)).toEqual(Option.none())
      expect(backoff.counter.steps).toBeLessThanOrEqual(6)

      // Exponential options are answered in closed form: exact for budgets past the bound too.
      const big = { maxRetries: 1_500, delay: "1 second", multiplier: 2, maxDelay: "1 hour" } as const
      expect(yield* RetryDelay.exponentialDelay(big, 1_501)).toEqual(Option.none())
      expect(Option.map(yield* RetryDelay.exponentialDelay(big, 1_500), Duration.toMillis)).toEqual(
        Option.some(3_600_000)
      )
      expect(Option.map(yield* RetryDelay.exponentialDelay(big, 3), Duration.toMillis)).toEqual(Option.some(4_000))

      // Below the bound the answers are exact.
      const exact = yield* RetryDelay.delayForAttempt(RetryDelay.exponential({ maxRetries: 5 }), 3, undefined)
      expect(Option.map(exact, Duration.toMillis)).toEqual(Option.some(9_000))
    }))
})

describe("worker options", () => {
  const stack = Layer.mergeAll(
    Handlers.layer([Handlers.handler(OrderPaid, () => Effect.void)]),
    ScheduleRetryStrategy.layerDefault
  ).pipe(Layer.provideMerge(MemoryTransport.layer()), Layer.orDie)

  const invalid: ReadonlyArray<[string, Partial<Worker.WorkerOptions>]> = [
    ["batchSize", { batchSize: Number.NaN }],
    ["batchSize", { batchSize: Number.POSITIVE_INFINITY }],
    ["batchSize", { batchSize: 0 }],
    ["concurrency", { concurrency: Number.NaN }],
    ["sleep", { sleep: Number.NaN }],
    ["sleep", { sleep: Duration.infinity }],
    ["limit", { limit: Number.NaN }],
    ["failureLimit", { failureLimit: -1 }],
    ["memoryLimit", { memoryLimit: Number.NaN }],
    ["shutdownTimeout", { shutdownTimeout: -1 }],
    ["settleTimeout", { settleTimeout: Number.NaN }],
    ["timeLimit", { timeLimit: "soon" as Duration.DurationInput }],
    ["idempotencyPurge.batchSize", { idempotencyPurge: { batchSize: 1.5 } }]
  ]

  it.effect.each(invalid)(
    "%s that is not one is an OutboxConfigError naming it, not a loop",
    ([name, options]) =>
      Effect.gen(function*() {
        const error = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true, ...options }).pipe(
          Effect.timeout("20 seconds"),
          Effect.flip
        )
        expect(error._tag).toBe("OutboxConfigError")
        expect(error.message).toContain(`Worker option ${name} must be`)
      }).pipe(Effect.provide(stack))
  )
})

describe("derived names", () => {
  it("every valid table has a channel pg_notify accepts, stable and distinct", () => {
    const long = `s${"a".repeat(47)}.t${"b".repeat(47)}`
    const channel = Identifier.defaultChannel(long)
    expect(channel.length).toBeLessThanOrEqual(63)
    expect(Effect.runSync(Identifier.validateChannel(channel))).toBe(channel)
    expect(Identifier.defaultChannel(long)).toBe(channel)
    expect(Identifier.defaultChannel(`${long.slice(0, -1)}c`)).not.toBe(channel)
    expect(Identifier.defaultChannel("app.outbox")).toBe("app_outbox")
  })

  it("a channel longer than 63 characters is refused, dots or not", () => {
    for (const name of ["c".repeat(64), `${"c".repeat(40)}.${"d".repeat(40)}`, "1abc", "a-b"]) {
      expect(Effect.runSync(Effect.flip(Identifier.validateChannel(name)))._tag).toBe("OutboxConfigError")
    }
  })
})

describe("bounded text", () => {
  it("a cut keeps the start, says how much was cut, and never splits a surrogate pair", () => {
    expect(Text.cut("short", 10)).toBe("short")
    expect(Text.cut("x".repeat(30), 10)).toBe(`${"x".repeat(10)}… [20 more characters cut]`)
    const emoji = `${"a".repeat(9)}😀tail`
    const cut = Text.cut(emoji, 10)
    expect(cut.startsWith("a".repeat(9) + "…")).toBe(true)
    expect(/[\ud800-\udbff](?![\udc00-\udfff])/.test(cut)).toBe(false)
  })

  it("nesting is measured outside strings", () => {
    expect(Text.nestedDeeperThan(`[${"x".repeat(3000)}]`, 1000)).toBe(false)
    expect(Text.nestedDeeperThan(`"${"[".repeat(3000)}"`, 1000)).toBe(false)
    expect(Text.nestedDeeperThan(`"\\"${"[".repeat(3000)}"`, 1000)).toBe(false)
    expect(Text.nestedDeeperThan(`${"[".repeat(1001)}${"]".repeat(1001)}`, 1000)).toBe(true)
    expect(Text.nestedDeeperThan(`${"{\"a\":".repeat(1001)}1${"}".repeat(1001)}`, 1000)).toBe(true)
  })
})
