/**
 * Handlers' logs carry the message they handle: `messageId`, `messageType`, `transport`, `orderingKey` (when it has
 * one) and `attempt` (1 for the first run, 2 for the first retry…). Not `Effect.annotateLogs` per message, which
 * changes a FiberRef each time (the runtime then refreshes its caches): each fiber that runs handlers owns a mutable
 * slot, a message's start writes its envelope into it, and the loggers of the runner — wrapped once per runner — add
 * the annotations when a line is logged. A fiber a handler forks gets a copy of the slot as it is then, so its lines
 * keep that message.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as FiberRefs from "effect/FiberRefs"
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Logger from "effect/Logger"
import type { Envelope } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"

/** The message a fiber handles now. @internal */
export interface Slot {
  envelope: Envelope | undefined
}

/** Fibers outside a worker's runner: never written to. */
const outside: Slot = Object.freeze({ envelope: undefined }) as Slot

const slot = FiberRef.unsafeMake<Slot>(outside, {
  fork: (parent) => parent === outside ? outside : { envelope: parent.envelope },
  join: (parent) => parent
})

const annotated = (logger: Logger.Logger<unknown, unknown>): Logger.Logger<unknown, unknown> =>
  Logger.make((options) => {
    const envelope = FiberRefs.getOrDefault(options.context, slot).envelope
    if (envelope === undefined) return logger.log(options)
    const annotations = options.annotations.pipe(
      HashMap.set("messageId", envelope.messageId as unknown),
      HashMap.set("messageType", envelope.headers.type as unknown),
      HashMap.set("transport", envelope.transport as unknown),
      HashMap.set("attempt", Headers.retryCount(envelope.headers) + 1 as unknown)
    )
    return logger.log({
      ...options,
      annotations: envelope.orderingKey === undefined
        ? annotations
        : HashMap.set(annotations, "orderingKey", envelope.orderingKey as unknown)
    })
  })

/**
 * Runs `self` (a runner's loop) with a slot of its own and its loggers annotating lines with the slot's message.
 *
 * @internal
 */
export const withMessageLogs = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  self.pipe(
    Effect.locallyWith(FiberRef.currentLoggers, HashSet.map(annotated)),
    Effect.locally(slot, { envelope: undefined })
  )

/**
 * The log slot of a fiber that runs handlers, `undefined` outside a runner (a sync transport's dispatching fiber).
 * The message that starts writes its envelope into it (`undefined` for one that cannot be decoded).
 *
 * @internal
 */
export const slotOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Slot | undefined => {
  const current = fiber.getFiberRef(slot)
  return current === outside ? undefined : current
}
