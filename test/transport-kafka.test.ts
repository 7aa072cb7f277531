/**
 * The conformance suite (effect-outbox/testing) over the Kafka transport, against the test run's broker: `outbox`,
 * `other` and `failed` are topics of their own. Kafka declares ordering keys only (no leases, no browsing, no
 * delivery counts, no stable ids) and has no clock to move: the suite skips what needs those.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { exerciseTransport } from "../src/testing/TransportSuite.js"
import { freshTransport } from "./support/kafka-transport.js"

exerciseTransport({
  name: "kafka",
  layer: Layer.empty,
  make: Effect.map(freshTransport({ outbox: {}, other: {}, failed: {} }), ({ transport }) => transport)
})
