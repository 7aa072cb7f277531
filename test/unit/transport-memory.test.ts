/**
 * The conformance suite (effect-outbox/testing) over the in-memory transport: no database.
 */
import * as Duration from "effect/Duration"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import { exerciseTransport, lease } from "../../src/testing/TransportSuite.js"

exerciseTransport({
  name: "memory",
  layer: Layer.empty,
  make: MemoryTransport.make({ transports: { outbox: { redeliverTimeout: Duration.millis(lease) }, other: {} } }),
  advance: (_transport, ms) => TestClock.adjust(Duration.millis(ms))
})
