/**
 * The handler registry: which handlers run for which message type, from which transport.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { Envelope } from "../domain/Envelope.js"
import { OutboxConfigError } from "../domain/Errors.js"
import * as IdempotencyKey from "../domain/IdempotencyKey.js"
import type { MessageClass, Tagged } from "../domain/Message.js"
import * as Durations from "../internal/durations.js"
import * as IdempotencyStore from "./IdempotencyStore.js"

/**
 * A handler of one message type. Its error channel decides the outcome:
 * `UnrecoverableMessageHandlingError` sends the message to the failure queue at once,
 * `RecoverableMessageHandlingError` always retries, anything else goes through the retry strategy.
 * What it succeeds with is ignored.
 *
 * @since 0.1.0
 * @category models
 */
export interface Handler<A extends Tagged, E, R> {
  readonly message: MessageClass<A>
  /** Unique name; it records which handlers already succeeded so that a retry skips them. */
  readonly name: string
  /** When set, the handler only runs for messages received from this transport. */
  readonly fromTransport?: string | undefined
  /** Run at most once per message id under this consumer name (`true`: the handler's name). */
  readonly idempotent?: boolean | string | undefined
  /** How long one run may take before it is interrupted and the message retried (default: the worker's). */
  readonly timeout?: Duration.DurationInput | undefined
  readonly handle: (message: A, envelope: Envelope<A>) => Effect.Effect<unknown, E, R>
  /**
   * A batch handler's call over several messages (see `batch`); `handle` is the same call for one message. The
   * worker hands it the claimed messages of its type together.
   */
  readonly handleBatch?:
    | ((items: ReadonlyArray<BatchItem<A>>) => Effect.Effect<ReadonlyArray<BatchResult<E>> | void, E, R>)
    | undefined
}

/**
 * One message of a batch handed to a batch handler.
 *
 * @since 0.1.0
 * @category models
 */
export interface BatchItem<A extends Tagged> {
  readonly message: A
  readonly envelope: Envelope<A>
}

/**
 * What a batch handler says of one of its messages, in the order it was given them: handled (`Either.right`), or
 * failed with an error (`Either.left`) that decides the message's outcome as a handler's error does.
 *
 * @since 0.1.0
 * @category models
 */
export type BatchResult<E> = Either.Either<unknown, E>

/**
 * Options of a batch handler registration: a handler's, without `idempotent` (a batch handler dedupes as its
 * effect requires, e.g. by the message ids in one statement). `timeout` bounds the whole call.
 *
 * @since 0.1.0
 * @category models
 */
export type BatchHandlerOptions = Omit<HandlerOptions, "idempotent">

/**
 * @since 0.1.0
 */
export declare namespace Handler {
  /**
   * The services a set of handlers needs.
   *
   * @since 0.1.0
   */
  export type Context<H> = H extends Handler<any, any, infer R> ? R : never
  /**
   * Any handler.
   *
   * @since 0.1.0
   */
  export type Any = Handler<any, any, any>
}

/**
 * Options of a handler registration.
 *
 * @since 0.1.0
 * @category models
 */
export interface HandlerOptions {
  /** Defaults to the message tag (plus `#2`, `#3`, … for further handlers of the same type). */
  readonly name?: string
  readonly fromTransport?: string
  /**
   * Make the handler an idempotent consumer: its effect runs at most once per message id, recorded by the
   * `IdempotencyStore` in the same transaction as the effect's own SQL. `true` uses the handler's name as the
   * consumer name, a string names the consumer. Renaming the consumer makes every message within the
   * retention window new to it.
   */
  readonly idempotent?: boolean | string
  /**
   * How long one run of the handler may take (finite, > 0). Past it the handler is interrupted and the message
   * retried by the retry strategy with a `HandlerTimeoutError`. Defaults to the worker's `handlerTimeout`.
   */
  readonly timeout?: Duration.DurationInput
}

/**
 * The error channel of an idempotent handler.
 *
 * @since 0.1.0
 * @category models
 */
export type IdempotentError<E> = E | IdempotencyStore.StoreError | IdempotencyKey.InvalidIdempotencyKeyError

/**
 * Declares a handler for a message class. The handler may return any effect — a conditional of several
 * effects, one that succeeds with a value (ignored) — and its error and requirement types are inferred from it.
 *
 * @example
 * ```ts
 * const onPaid = Handlers.handler(OrderPaid, (paid) => Effect.log(`paid ${paid.orderId}`))
 * const invoice = Handlers.handler(OrderPaid, issueInvoice, { name: "invoices", idempotent: true })
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export function handler<A extends Tagged, I, Eff extends Effect.Effect<any, any, any>>(
  message: MessageClass<A, I>,
  handle: (message: A, envelope: Envelope<A>) => Eff,
  options: HandlerOptions & { readonly idempotent: true | string }
): Handler<
  A,
  IdempotentError<Effect.Effect.Error<Eff>>,
  Effect.Effect.Context<Eff> | IdempotencyStore.IdempotencyStore
>
export function handler<A extends Tagged, I, Eff extends Effect.Effect<any, any, any>>(
  message: MessageClass<A, I>,
  handle: (message: A, envelope: Envelope<A>) => Eff,
  options?: HandlerOptions
): Handler<A, Effect.Effect.Error<Eff>, Effect.Effect.Context<Eff>>
export function handler<A extends Tagged, I, E, R>(
  message: MessageClass<A, I>,
  handle: (message: A, envelope: Envelope<A>) => Effect.Effect<unknown, E, R>,
  options: HandlerOptions = {}
): Handler<A, E, R> {
  return {
    message,
    name: options.name ?? "",
    fromTransport: options.fromTransport,
    idempotent: options.idempotent,
    timeout: options.timeout,
    handle
  }
}

/**
 * Declares a batch handler: one call for the claimed messages of a type (Symfony's `BatchHandlerInterface`,
 * pg-boss's array handlers), with an outcome per message. It succeeds with an array of `BatchResult`s, one per
 * item in order (or with nothing: every message handled); failing, it fails every message of the call. The worker
 * calls it once per claimed batch with that batch's messages of the type in claim order (at most `batchSize`); a
 * message that runs alone (redelivered after a crash, a single one of its type, or traced by an installed tracer,
 * so that its work sits in its own `process` span) comes as a batch of one. A message's batch handlers run before
 * its per-message handlers; a retried message skips the handlers that succeeded on it, batch handlers too.
 *
 * @example
 * ```ts
 * const index = Handlers.batch(OrderPaid, (items) =>
 *   Effect.as(searchIndex.bulkUpsert(items.map(({ message }) => message)), undefined))
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const batch = <A extends Tagged, I, Eff extends Effect.Effect<ReadonlyArray<BatchResult<any>> | void, any, any>>(
  message: MessageClass<A, I>,
  handleBatch: (items: ReadonlyArray<BatchItem<A>>) => Eff,
  options: BatchHandlerOptions = {}
): Handler<A, Effect.Effect.Error<Eff> | BatchError<Effect.Effect.Success<Eff>>, Effect.Effect.Context<Eff>> => {
  type E = Effect.Effect.Error<Eff> | BatchError<Effect.Effect.Success<Eff>>
  const call = handleBatch as unknown as (
    items: ReadonlyArray<BatchItem<A>>
  ) => Effect.Effect<ReadonlyArray<BatchResult<E>> | void, E, Effect.Effect.Context<Eff>>
  return {
    message,
    name: options.name ?? "",
    fromTransport: options.fromTransport,
    timeout: options.timeout,
    handleBatch: call,
    handle: (message, envelope) =>
      Effect.flatMap(call([{ message, envelope }]), (results) => {
        const result = results?.[0]
        return result === undefined || Either.isRight(result) ? Effect.void : Effect.fail(result.left)
      })
  }
}

/**
 * The error type of the failed items of a batch handler's results.
 *
 * @since 0.1.0
 * @category models
 */
export type BatchError<S> = S extends ReadonlyArray<Either.Either<any, infer E>> ? E : never

/**
 * A registered handler.
 *
 * @since 0.1.0
 * @category models
 */
export interface RegisteredHandler {
  readonly name: string
  readonly fromTransport: string | undefined
  /** The handler's own `timeout`, when it has one (the worker's `handlerTimeout` applies otherwise). */
  readonly timeout: Duration.Duration | undefined
  /**
   * Runs the handler (through the idempotency store when it is idempotent); its success value means nothing.
   * Its services are not provided here: run it inside `HandlersShape.provide` (the worker's runner fiber
   * provides them once for its life). It is not bounded by the timeout: the worker applies that.
   */
  readonly run: (message: Tagged, envelope: Envelope) => Effect.Effect<unknown, unknown>
  /**
   * A batch handler's call over several messages: an exit per message, in order (a failed call fails each; a
   * result count that does not match is a defect of each). Never fails; its services as `run`'s.
   */
  readonly runBatch:
    | ((envelopes: ReadonlyArray<Envelope>) => Effect.Effect<Array<Exit.Exit<unknown, unknown>>>)
    | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface HandlersShape {
  /** The message class registered for a type tag. */
  readonly messageClass: (type: string) => MessageClass | undefined
  /** The handlers that run for a type received from a transport, in registration order. */
  readonly handlersFor: (type: string, transport: string) => ReadonlyArray<RegisteredHandler>
  /** All registered type tags. */
  readonly types: ReadonlyArray<string>
  /** Whether a batch handler is registered (the worker then groups a claimed batch's messages for it). */
  readonly batched: boolean
  /** Provides the handlers' services (captured when the registry was built) to an effect that calls `run`. */
  readonly provide: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

/**
 * The handler registry service.
 *
 * @since 0.1.0
 * @category tags
 */
export class Handlers extends Context.Tag("effect-outbox/Handlers")<Handlers, HandlersShape>() {}

/**
 * Builds the registry. Handlers' services are taken from the context now. Fails with
 * `OutboxConfigError` on duplicate handler names, two different classes with one tag, or a `timeout` that is
 * not a finite duration greater than zero.
 * `messages` registers classes that may be received but have no handler here (they are decoded,
 * then reported as having no handler rather than as an unknown type).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <const Hs extends ReadonlyArray<Handler.Any>>(
  handlers: Hs,
  options: { readonly messages?: ReadonlyArray<MessageClass> } = {}
): Effect.Effect<HandlersShape, OutboxConfigError, Handler.Context<Hs[number]>> =>
  Effect.gen(function*() {
    const context = yield* Effect.context<Handler.Context<Hs[number]>>()
    const classes = new Map<string, MessageClass>()
    const byType = new Map<string, Array<RegisteredHandler>>()
    const names = new Set<string>()
    const registerClass = (cls: MessageClass) => {
      const tag = cls._tag
      if (typeof tag !== "string" || tag.length === 0) {
        return Effect.fail(new OutboxConfigError({ message: `A message class has no _tag; use Schema.TaggedClass` }))
      }
      const known = classes.get(tag)
      if (known !== undefined && known !== cls) {
        return Effect.fail(new OutboxConfigError({ message: `Two different message classes use the tag ${tag}` }))
      }
      classes.set(tag, cls)
      return Effect.void
    }
    for (const cls of options.messages ?? []) yield* registerClass(cls)
    for (const h of handlers) {
      yield* registerClass(h.message)
      const tag = h.message._tag as string
      const list = byType.get(tag) ?? []
      const name = h.name !== "" ? h.name : list.length === 0 ? tag : `${tag}#${list.length + 1}`
      if (names.has(name)) {
        return yield* new OutboxConfigError({ message: `Duplicate handler name ${name}` })
      }
      names.add(name)
      const consumer = h.idempotent === undefined || h.idempotent === false
        ? undefined
        : yield* IdempotencyKey.validateConsumer(typeof h.idempotent === "string" ? h.idempotent : name)
      if (h.handleBatch !== undefined && consumer !== undefined) {
        return yield* new OutboxConfigError({
          message: `Handler ${name} is a batch handler and cannot be idempotent: dedupe inside its call`
        })
      }
      if (consumer !== undefined && Option.isNone(Context.getOption(context, IdempotencyStore.IdempotencyStore))) {
        return yield* new OutboxConfigError({
          message: `Handler ${name} is idempotent but no IdempotencyStore is provided to the handlers layer`
        })
      }
      const timeout = h.timeout === undefined ? undefined : Durations.positiveFinite(h.timeout)
      if (timeout !== undefined && Option.isNone(timeout)) {
        return yield* new OutboxConfigError({
          message: `Handler ${name} option timeout must be a finite duration greater than zero, got ${
            Durations.show(h.timeout)
          }`
        })
      }
      const call = (message: Tagged, envelope: Envelope) =>
        h.handle(message, envelope as Envelope<any>) as Effect.Effect<unknown, unknown, Handler.Context<Hs[number]>>
      const run = (consumer === undefined
        ? (message: Tagged, envelope: Envelope) => Effect.suspend(() => call(message, envelope))
        : (message: Tagged, envelope: Envelope) =>
          IdempotencyStore.once(envelope, consumer, Effect.suspend(() => call(message, envelope)))) as (
          message: Tagged,
          envelope: Envelope
        ) => Effect.Effect<unknown, unknown>
      list.push({
        name,
        fromTransport: h.fromTransport,
        timeout: timeout === undefined ? undefined : timeout.value,
        run,
        runBatch: h.handleBatch === undefined
          ? undefined
          : runBatchOf(name, h.handleBatch) as RegisteredHandler["runBatch"]
      })
      byType.set(tag, list)
    }
    const selected = new Map<string, ReadonlyArray<RegisteredHandler>>()
    return {
      messageClass: (type) => classes.get(type),
      handlersFor: (type, transport) => {
        const key = `${type}\u0000${transport}`
        let found = selected.get(key)
        if (found === undefined) {
          found = (byType.get(type) ?? []).filter((h) => h.fromTransport === undefined || h.fromTransport === transport)
          selected.set(key, found)
        }
        return found
      },
      types: Array.from(classes.keys()),
      batched: handlers.some((h) => h.handleBatch !== undefined),
      provide: <A, E, R>(self: Effect.Effect<A, E, R>) =>
        Effect.mapInputContext(self, (outer: Context.Context<R>) =>
          Context.merge(outer, context as Context.Context<never>))
    }
  })

/** A batch handler's call as the worker runs it: an exit per envelope (see `RegisteredHandler.runBatch`). */
const runBatchOf = <R>(
  name: string,
  handleBatch: (
    items: ReadonlyArray<BatchItem<any>>
  ) => Effect.Effect<ReadonlyArray<BatchResult<unknown>> | void, unknown, R>
) =>
(envelopes: ReadonlyArray<Envelope>): Effect.Effect<Array<Exit.Exit<unknown, unknown>>, never, R> =>
  Effect.matchCause(
    Effect.suspend(() => handleBatch(envelopes.map((envelope) => ({ message: envelope.message, envelope })))),
    {
      onFailure: (cause) => envelopes.map(() => Exit.failCause(cause)),
      onSuccess: (results) => {
        if (results === undefined) return envelopes.map(() => Exit.void)
        if (results.length !== envelopes.length) {
          const defect = new Error(
            `Batch handler ${name} returned ${results.length} results for ${envelopes.length} messages`
          )
          return envelopes.map(() => Exit.die(defect))
        }
        return results.map((result) => Either.isRight(result) ? Exit.succeed(result.right) : Exit.fail(result.left))
      }
    }
  )

/**
 * A layer of the registry from a list of handlers.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <const Hs extends ReadonlyArray<Handler.Any>>(
  handlers: Hs,
  options: { readonly messages?: ReadonlyArray<MessageClass> } = {}
): Layer.Layer<Handlers, OutboxConfigError, Handler.Context<Hs[number]>> =>
  Layer.effect(Handlers, make(handlers, options))
