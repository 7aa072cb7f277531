/**
 * A worker's health probes on the in-memory layers and the TestClock: not live or ready before it starts, live
 * while its loop makes progress and not once it stalls past `stallAfter`, ready once it has claimed, neither after
 * it stopped.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import * as HealthStatus from "../../src/programs/observability/HealthStatus.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as WorkerHealth from "../../src/programs/WorkerHealth.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { memoryStack } from "../support/memory.js"
import { OrderPaid } from "../support/messages.js"

const stack = memoryStack

const reason = (status: HealthStatus.HealthStatus) =>
  HealthStatus.match(status, { Healthy: () => "ok", Unhealthy: (r) => r })

describe("worker health", () => {
  it.effect("live while the loop makes progress, not once it stalls; ready once it claimed; neither once stopped", () =>
    Effect.gen(function*() {
      const health = WorkerHealth.make({ stallAfter: "1 minute" })
      expect(reason(yield* health.live)).toBe("the worker has not started")
      expect(reason(yield* health.ready)).toBe("the worker has not claimed yet")
      const started = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        // Idle first: each poll (every second) is progress.
        const worker = yield* Effect.fork(Worker.run({ transports: ["outbox"], health, limit: 1, shutdownTimeout: 0 }))
        yield* TestClock.adjust("5 seconds")
        expect(reason(yield* health.live)).toBe("ok")
        expect(reason(yield* health.ready)).toBe("ok")
        // A handler that holds its batch: the loop makes no progress (renewing leases is not progress).
        yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
        yield* TestClock.adjust("1 second")
        yield* Deferred.await(started)
        yield* TestClock.adjust("59 seconds")
        expect(reason(yield* health.live)).toBe("ok")
        yield* TestClock.adjust("2 seconds")
        expect(reason(yield* health.live)).toMatch(/^the worker's loop made no progress for 1m \d+s$/)
        expect(reason(yield* health.ready)).toBe("ok")
        yield* Deferred.succeed(release, undefined)
        expect(yield* Fiber.join(worker)).toMatchObject({ handled: 1, stoppedBy: "limit" })
      }).pipe(Effect.provide(stack([
        Handlers.handler(
          OrderPaid,
          () => Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(release))
        )
      ])))
      expect(reason(yield* health.live)).toMatch(/^the worker stopped \(message limit of 1 reached/)
      expect(reason(yield* health.ready)).toMatch(/^the worker stopped/)
    }))
})
