/**
 * The in-memory stack the worker's unit tests run on: the outbox, the given handlers and retry policy, over a
 * `MemoryTransport` with the given options (provided too, for inspection).
 */
import * as Layer from "effect/Layer"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"

export const memoryStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(
  handlers: Hs,
  retry: ScheduleRetryStrategy.Options = {},
  memory: MemoryTransport.Options = {}
) =>
  Layer.mergeAll(Outbox.layer(), Handlers.layer(handlers), ScheduleRetryStrategy.layer(retry)).pipe(
    Layer.provideMerge(MemoryTransport.layer(memory))
  )
