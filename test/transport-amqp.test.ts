/**
 * The conformance suite (effect-outbox/testing) over the RabbitMQ transport, against the test run's broker:
 * `outbox`, `other` and `failed` are queues of their own exchange. The broker declares no leases, no browsing,
 * no delivery counts and no stable ids, and has no clock to move: the suite skips those cases.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { exerciseTransport } from "../src/testing/TransportSuite.js"
import { freshTransport } from "./support/amqp.js"

exerciseTransport({
  name: "amqp",
  layer: Layer.empty,
  make: Effect.map(freshTransport({ outbox: {}, other: {}, failed: {} }), ({ transport }) => transport)
})
