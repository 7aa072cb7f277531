/**
 * Dispatch: store a message in the caller's transaction.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { OutgoingMessage } from "../domain/Envelope.js"
import {
  MessageEncodeError,
  OutboxConfigError,
  type StorageNotReadyError,
  type TransportError,
  type UnknownTransportError
} from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import * as Message from "../domain/Message.js"
import * as MessageId from "../domain/MessageId.js"
import * as Routing from "../domain/Routing.js"
import { cut, maxNameLength } from "../internal/text.js"
import * as TraceContext from "../internal/traceContext.js"
import { Transport } from "./Transport.js"

/**
 * Options of one dispatch.
 *
 * @since 0.1.0
 * @category models
 */
export interface DispatchOptions {
  /** Not delivered before this delay has passed (database clock). */
  readonly delay?: Duration.DurationInput
  /** Send to exactly these transports, overriding routing. */
  readonly transportNames?: ReadonlyArray<string>
  /** Application headers stored with the message. */
  readonly headers?: Readonly<Record<string, string>>
  /**
   * The ordering key: messages with the same key on the same transport are handled one at a time, in the order
   * their transactions committed, by any number of workers; messages of different keys (and without one) run in
   * parallel. Overrides the key the message's class derives (`Message.orderingKey`). 1 to 200 characters; the
   * transport must have the `orderingKeys` capability.
   */
  readonly orderingKey?: string
}

/**
 * What `dispatch` accepts, as far as the compiler can tell: a `Schema.TaggedClass` instance. Its type carries no
 * brand (it is its fields), but its `_tag` is `readonly` and a plain object literal's is not, so
 * `Outbox.dispatch({ _tag: "OrderPaid", orderId: 1 })` does not compile. What passes (a value declared with a
 * readonly `_tag`, `as const`, or from JavaScript) is still checked at run time: a value that is not an instance
 * of a schema class fails with `MessageEncodeError`. A generic helper takes `MessageInstance<M>` to hand its
 * parameter on: `<M extends Message.Tagged>(message: Outbox.MessageInstance<M>) => Outbox.dispatch(message)`.
 *
 * @example
 * ```ts
 * Outbox.dispatch(new OrderPaid({ orderId: 1, amountCents: 1200 })) // compiles
 * Outbox.dispatch({ _tag: "OrderPaid", orderId: 1, amountCents: 1200 }) // does not
 * ```
 *
 * @since 0.1.0
 * @category models
 */
export type MessageInstance<A extends Message.Tagged> =
  & A
  & ([PlainObjects<A>] extends [never] ? unknown : NotAnInstance)

/** The members of `A` whose `_tag` is writable: plain objects, never schema class instances. */
type PlainObjects<A> = A extends unknown ? WritableTag<A> extends true ? A : never : never

/** Whether `A`'s `_tag` is writable: identity, not assignability, tells it (`readonly` does not change the latter). */
type WritableTag<A> = A extends { readonly _tag: infer Tag } ? Identical<Pick<A, "_tag">, { _tag: Tag }> : false

type Identical<X, Y> = (<T>() => T extends X ? 1 : 2) extends (<T>() => T extends Y ? 1 : 2) ? true : false

/** The compile error of a plain object given to `dispatch`: this property is missing from it. */
interface NotAnInstance {
  readonly "Outbox.dispatch takes an instance of a Schema.TaggedClass, not a plain object": never
}

/**
 * Errors of dispatch.
 *
 * @since 0.1.0
 * @category errors
 */
export type DispatchError =
  | MessageEncodeError
  | OutboxConfigError
  | TransportError
  | UnknownTransportError
  | StorageNotReadyError

/**
 * @since 0.1.0
 * @category models
 */
export interface OutboxShape {
  /**
   * Encodes the message with its schema, assigns a UUIDv7 id, applies routing and stores it through
   * the transport on the caller's connection — inside the caller's `sql.withTransaction` when there is
   * one, so the message exists if and only if the transaction commits. `message` must be a `Schema.TaggedClass`
   * instance (see `MessageInstance`).
   */
  readonly dispatch: <A extends Message.Tagged>(
    message: MessageInstance<A>,
    options?: DispatchOptions
  ) => Effect.Effect<MessageId.MessageId, DispatchError>
  /** Dispatches several messages with one write per transport. Ids are in input order. */
  readonly dispatchAll: <A extends Message.Tagged>(
    messages: ReadonlyArray<MessageInstance<A>>,
    options?: DispatchOptions
  ) => Effect.Effect<ReadonlyArray<MessageId.MessageId>, DispatchError>
}

/**
 * The outbox service.
 *
 * @since 0.1.0
 * @category tags
 */
export class Outbox extends Context.Tag("effect-outbox/Outbox")<Outbox, OutboxShape>() {}

const prepare = (
  message: Message.Tagged,
  options: DispatchOptions,
  stamp: TraceContext.Stamp | undefined
): Effect.Effect<OutgoingMessage, MessageEncodeError> =>
  Effect.gen(function*() {
    const delay = options.delay === undefined ? 0 : Duration.toMillis(Duration.decode(options.delay))
    if (!(delay >= 0) || !Number.isFinite(delay)) {
      return yield* new MessageEncodeError({ type: message._tag, message: `Invalid delay: ${String(options.delay)}` })
    }
    const body = yield* Message.encodeBody(message)
    const orderingKey = options.orderingKey ?? Message.orderingKeyOf(message)
    if (orderingKey !== undefined && !validOrderingKey(orderingKey)) {
      return yield* new MessageEncodeError({
        type: message._tag,
        message: `Invalid ordering key: ${cut(JSON.stringify(orderingKey) ?? String(orderingKey), maxNameLength)} ` +
          `(a string of 1 to ${maxNameLength} characters)`
      })
    }
    // Built from checked values: no second validation on the dispatch path (see BENCHMARKS.md, dispatch).
    const headers = new Headers.Headers({
      type: message._tag,
      ...stamp,
      ...(options.transportNames !== undefined ? { transportNames: options.transportNames } : {}),
      ...(delay > 0 ? { delayMs: delay } : {}),
      ...(options.headers !== undefined ? { custom: options.headers } : {})
    }, true)
    return {
      messageId: MessageId.make(),
      type: message._tag,
      body,
      headers: Headers.encode(headers),
      delayMs: delay,
      ...stamp,
      ...(orderingKey !== undefined ? { orderingKey: orderingKey as string } : {})
    }
  })

const validOrderingKey = (key: unknown): key is string =>
  typeof key === "string" && key.length > 0 && key.length <= maxNameLength

/**
 * Builds the outbox over the `Transport` service with a routing table.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (routing: Routing.Routing = {}): Effect.Effect<OutboxShape, never, Transport> =>
  Effect.gen(function*() {
    const transport = yield* Transport
    const write = (
      messages: ReadonlyArray<Message.Tagged>,
      destinations: ReadonlyArray<ReadonlyArray<string>>,
      options: DispatchOptions,
      stamp: TraceContext.Stamp | undefined
    ) =>
      Effect.gen(function*() {
        const prepared = yield* Effect.forEach(messages, (m) => prepare(m, options, stamp))
        const byTransport = new Map<string, Array<OutgoingMessage>>()
        for (let i = 0; i < prepared.length; i++) {
          if (prepared[i]!.orderingKey === undefined) continue
          for (const name of destinations[i]!) {
            const capabilities = transport.capabilities(name)
            if (Option.isSome(capabilities) && !capabilities.value.orderingKeys) {
              return yield* new OutboxConfigError({
                message: `Transport ${name} does not keep ordering keys: ${prepared[i]!.type} was dispatched with ` +
                  `one (send it to a transport that does, or without a key)`
              })
            }
          }
        }
        prepared.forEach((outgoing, i) => {
          for (const name of destinations[i]!) {
            const list = byTransport.get(name) ?? []
            list.push(outgoing)
            byTransport.set(name, list)
          }
        })
        for (const [name, list] of byTransport) yield* transport.send(name, list)
        return prepared.map((p) => p.messageId)
      })
    const dispatchAll = (messages: ReadonlyArray<Message.Tagged>, options: DispatchOptions = {}) =>
      Effect.flatMap(TraceContext.enabled, (traced) => {
        const destinations = messages.map((m) => Routing.resolve(routing, m._tag, options.transportNames))
        if (!traced) return write(messages, destinations, options, undefined)
        // One `send` span for the call (the messaging conventions' batch send): every message carries its context.
        const names = new Set(destinations.flat())
        const only = names.size === 1 ? [...names][0]! : undefined
        return Effect.useSpan(only === undefined ? "send" : `send ${only}`, {
          kind: "producer",
          captureStackTrace: false,
          attributes: TraceContext.sendAttributes(only, messages.length)
        }, (span) =>
          write(messages, destinations, options, TraceContext.stampOf(span)).pipe(
            Effect.tap((ids) => {
              if (ids.length === 1) span.attribute("messaging.message.id", ids[0])
            }),
            Effect.withParentSpan(span)
          ))
      })
    return {
      dispatch: (message, options) => Effect.map(dispatchAll([message], options), (ids) => ids[0]!),
      dispatchAll
    }
  })

/**
 * The outbox layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (routing: Routing.Routing = {}): Layer.Layer<Outbox, never, Transport> =>
  Layer.effect(Outbox, make(routing))

/**
 * Dispatches through the `Outbox` service in the context.
 *
 * @since 0.1.0
 * @category accessors
 */
export const dispatch = <A extends Message.Tagged>(
  message: MessageInstance<A>,
  options?: DispatchOptions
): Effect.Effect<MessageId.MessageId, DispatchError, Outbox> =>
  Effect.flatMap(Outbox, (outbox) => outbox.dispatch(message, options))
