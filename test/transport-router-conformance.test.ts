/**
 * The conformance suite (effect-outbox/testing) over TransportRouter, in two shapes:
 * - two in-memory backends, `outbox` and `other` on one, `failed` on the other (every case runs: the clock
 *   moves, and the failed messages cross backends);
 * - the broker chain: `outbox` and `other` on RabbitMQ, `failed` in PostgreSQL.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import * as MemoryTransport from "../src/layers/MemoryTransport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as TransportRouter from "../src/layers/TransportRouter.js"
import type { TransportBackend } from "../src/services/TransportAdmin.js"
import { exerciseTransport, lease } from "../src/testing/TransportSuite.js"
import { freshTransport } from "./support/amqp.js"
import { freshDatabase } from "./support/database.js"

/** A backend seen as serving only `names`, whose failures go to `failureTransport` (on another backend). */
const serving = (
  backend: TransportBackend,
  names: ReadonlyArray<string>,
  failureTransport: string
): TransportBackend => ({
  ...backend,
  names,
  capabilities: (name) => (names.includes(name) ? backend.capabilities(name) : Option.none()),
  failureTransport: (name) => (names.includes(name) ? Option.some(failureTransport) : Option.none())
})

exerciseTransport({
  name: "router: memory + memory",
  layer: Layer.empty,
  make: Effect.gen(function*() {
    const queues = yield* MemoryTransport.make({
      transports: { outbox: { redeliverTimeout: Duration.millis(lease) }, other: {} }
    })
    const failures = yield* MemoryTransport.make({ transports: { failed: {} } })
    return yield* TransportRouter.make(serving(queues, ["outbox", "other"], "failed"), failures)
  }),
  advance: (_router, ms) => TestClock.adjust(Duration.millis(ms))
})

let tables = 0

exerciseTransport({
  name: "router: RabbitMQ + PostgreSQL",
  layer: freshDatabase(),
  make: Effect.gen(function*() {
    const { transport: broker } = yield* freshTransport({ outbox: {}, other: {} })
    const pg = yield* PgTransport.make({ table: `router_conformance_${++tables}`, transports: { failed: {} } })
    yield* pg.setup
    return yield* TransportRouter.make(broker, pg)
  })
})
