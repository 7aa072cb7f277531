/**
 * A sync transport — Symfony Messenger's `sync://`: a message sent to it is handled at once, in the dispatching
 * fiber, by the registered handlers, and a failure fails the dispatch instead of being retried. For results the
 * caller needs in the same request (a receipt, a read model it is about to return), and for unit tests that want
 * handlers run without a worker. It stores nothing.
 *
 * ```ts
 * const Transports = TransportRouter.layer(PgTransport.make(), SyncTransport.make())  // outbox, failed + sync
 * const OutboxLive = Outbox.layer({ routes: { SendReceipt: ["sync"] } })               // OrderPaid → outbox
 * ```
 *
 * What it keeps of the worker:
 * - **The same decoding.** `Outbox.dispatch` encodes the message and its headers as for a stored message; the
 *   sync transport decodes them exactly as the worker decodes a claimed row (`MessageDecodeError` for a body
 *   that does not fit the registered class, `NoHandlerForMessageError` when no handler takes it from the
 *   transport), and the handlers get the same envelope: the message id (UUIDv7, so idempotent handlers dedupe
 *   by it), the headers, the transport name, a transport id of its own (new for every message) and
 *   `deliveries: 1`.
 * - **The same outcome rules** (`Outcome`), with a strategy that never retries: every handler of the type runs,
 *   and any failure — an error of any kind, a defect, a decoding failure — fails `send`, so the dispatch, with a
 *   `SyncHandlingError` (inside the `TransportError` the contract allows; `SyncHandlingError.surface` lifts it).
 *   A handler that fails because storage is not set up (an idempotent handler's store table) fails `send` with
 *   that `StorageNotReadyError`, which says what to run, as the worker stops with it.
 *   A handler interrupted from within interrupts the dispatch.
 * - **The handlers' services**, provided as the worker provides them (`HandlersShape.provide`).
 *
 * Transactions: inside `sql.withTransaction` the handlers run on the caller's transaction — their SQL commits or
 * rolls back with the business change — inside a savepoint of one `send`. A handler failure fails the dispatch,
 * so the caller's transaction rolls back; a caller that catches the error finds the handlers' SQL rolled back
 * to the savepoint and its transaction usable. Outside a transaction the handlers' statements commit one by one,
 * as under the worker. The messages of one `send` are handled in order and the first failure stops it.
 *
 * `Outbox.dispatchAll` writes one batch per transport, in the order the transports first appear among the
 * messages' routes (`[OrderPaid → outbox, SendReceipt → sync]`: the outbox row is written, then the receipt
 * handled); a failure stops it there: the transports after it are not written to.
 *
 * It has nothing to consume or browse: its capabilities are all `false`, `open` (a worker) fails with an
 * `UnknownTransportError` that says why, `list`, `find`, `remove` and `move` fail with a `TransportError`,
 * `stats` counts nothing, `setup` has nothing to do. It cannot delay a message: a dispatch with a delay fails
 * with a `TransportError` before any handler runs.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { OutgoingMessage, ReceivedMessage } from "../domain/Envelope.js"
import { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import * as Identifier from "../domain/Identifier.js"
import type * as Outcome from "../domain/Outcome.js"
import { SyncHandlingError } from "../domain/SyncErrors.js"
import { describeError } from "../internal/describeError.js"
import { emptyStats, noCapabilities, storesNothing, unknownTransport } from "../internal/transports.js"
import * as Handle from "../programs/worker/handle.js"
import { Handlers, type HandlersShape } from "../services/Handlers.js"
import type { RetryStrategyShape } from "../services/RetryStrategy.js"
import { type Capabilities, Transport, type TransportShape } from "../services/Transport.js"
import { TransportAdmin, type TransportBackend } from "../services/TransportAdmin.js"

/**
 * The default name of a sync transport (`sync`).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTransport = "sync"

/**
 * Options: the names it serves (default `["sync"]`), each validated as a transport name.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly transports?: ReadonlyArray<string>
}

/**
 * What a sync transport does: none of what a store does. No claims, hence no leases, no counted deliveries, no
 * stable ids, no acks with claims; nothing to browse.
 *
 * @since 0.1.0
 * @category constants
 */
export const capabilities: Capabilities = noCapabilities

/** The rules' question is always answered "give up": a sync failure goes back to the caller, never to a retry. */
const neverRetry: RetryStrategyShape = { delayFor: () => Effect.succeed(Option.none()) }

/**
 * Builds a sync transport that runs the handlers of the `Handlers` service in context now. When the handlers
 * themselves depend on the transport (a handler that dispatches through the `Outbox`), the layers would form a
 * cycle: use `makeWithoutHandlers`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<TransportBackend, OutboxConfigError, Handlers> =>
  Effect.flatMap(Handlers, (registry) => makeWith(options, () => Effect.succeed(registry)))

/**
 * Builds a sync transport that runs the handlers of the `Handlers` service of the dispatching fiber, looked up
 * at every send — the registry a worker of the same program uses. For handlers that dispatch (they need the
 * `Outbox`, hence the transport). A dispatch from a fiber without `Handlers` fails with a `TransportError` that
 * says so.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWithoutHandlers = (options: Options = {}): Effect.Effect<TransportBackend, OutboxConfigError> =>
  makeWith(options, (name) =>
    Effect.flatMap(
      Effect.serviceOption(Handlers),
      Option.match({
        onSome: Effect.succeed,
        onNone: () =>
          Effect.fail(
            new TransportError({
              transport: name,
              operation: "send",
              message: `The sync transport ${name} found no Handlers service in the dispatching fiber's context: ` +
                "provide Handlers.layer to the program that dispatches (or build it with SyncTransport.make)"
            })
          )
      })
    ))

const makeWith = (
  options: Options,
  registryFor: (transport: string) => Effect.Effect<HandlersShape, TransportError>
): Effect.Effect<TransportBackend, OutboxConfigError> =>
  Effect.gen(function*() {
    const names = Array.from(new Set(options.transports ?? [defaultTransport]))
    if (names.length === 0) {
      return yield* new OutboxConfigError({ message: "SyncTransport: no transport to serve" })
    }
    for (const name of names) yield* Identifier.validateQueueName(name)
    const served = new Set(names)
    let sequence = 0

    const lookup = (name: string): Effect.Effect<void, UnknownTransportError> =>
      served.has(name) ? Effect.void : Effect.fail(unknownTransport(name, names))
    /** Handles one message as the worker would handle it claimed from `name`; fails with the outcome's reason. */
    const handleOne = (name: string, message: OutgoingMessage, registry: HandlersShape) =>
      Effect.gen(function*() {
        const now = new Date(yield* Clock.currentTimeMillis)
        const row: ReceivedMessage = {
          id: String(++sequence),
          transport: name,
          messageId: message.messageId,
          body: message.body,
          headers: message.headers,
          createdAt: now,
          availableAt: now,
          deliveries: 1
        }
        const failures: Array<Cause.Cause<unknown>> = []
        const outcome = yield* Handle.handle(row, recording(registry, failures), neverRetry, false)
        switch (outcome._tag) {
          case "Ack":
            return
          case "Release":
            return yield* Effect.interrupt
          case "Fail":
          case "Retry":
            return yield* Effect.fail(handlingError(row, outcome, failures, registry).toTransportError())
        }
      })

    const send: TransportShape["send"] = (name, messages) =>
      Effect.gen(function*() {
        yield* lookup(name)
        if (messages.length === 0) return
        const delayed = messages.find((m) => m.delayMs > 0)
        if (delayed !== undefined) {
          return yield* new TransportError({
            transport: name,
            operation: "send",
            message: `The sync transport ${name} handles messages when they are dispatched and cannot delay one ` +
              `(${delayed.type} asked for ${delayed.delayMs} ms): route delayed messages to a stored transport`
          })
        }
        const registry = yield* registryFor(name)
        const all = Effect.forEach(messages, (m) => handleOne(name, m, registry), { discard: true })
        yield* registry.provide(inSavepoint(name, all))
      })

    const backend: TransportBackend = {
      names,
      capabilities: (name) => (served.has(name) ? Option.some(capabilities) : Option.none()),
      ...storesNothing({
        names,
        lookup,
        unsupported: (name, operation) =>
          `${operation} is not supported by the sync transport ${name}: it stores no message, its messages are ` +
          "handled when they are dispatched",
        nothingToConsume: (name) =>
          `The transport ${JSON.stringify(name)} is a sync transport: its messages are handled when they are ` +
          "dispatched, there is nothing to consume; remove it from the worker's transports"
      }),
      send,
      setup: Effect.succeed([]),
      stats: (name) => Effect.as(lookup(name), emptyStats(name))
    }
    return backend
  })

/**
 * Inside the caller's transaction, `self` in a savepoint of it: a failed handling leaves nothing behind, and
 * the caller that catches the error can still commit. Outside one, `self` as it is (as under the worker). The
 * `SqlClient` is the handlers' or the caller's (`self` runs inside `HandlersShape.provide`).
 */
const inSavepoint = <A, E>(
  name: string,
  self: Effect.Effect<A, E>
): Effect.Effect<A, E | TransportError> =>
  Effect.gen(function*() {
    const tx = yield* Effect.serviceOption(SqlClient.TransactionConnection)
    const sql = Option.isSome(tx) ? yield* Effect.serviceOption(SqlClient.SqlClient) : Option.none()
    if (Option.isNone(sql)) return yield* self
    return yield* sql.value.withTransaction(self).pipe(
      Effect.catchTag("SqlError", (error) =>
        Effect.fail(
          new TransportError({
            transport: name,
            operation: "send",
            message: `The sync transport ${name} could not open a savepoint: ${describeError(error)}`,
            cause: error
          })
        ))
    )
  })

/** The registry with every handler's failure recorded in `failures` (the original cause, for the error). */
const recording = (registry: HandlersShape, failures: Array<Cause.Cause<unknown>>): HandlersShape => ({
  ...registry,
  handlersFor: (type, transport) =>
    registry.handlersFor(type, transport).map((h) => ({
      ...h,
      run: (message, envelope) =>
        Effect.tapErrorCause(h.run(message, envelope), (cause) => Effect.sync(() => void failures.push(cause)))
    }))
})

/** The error of a failed outcome: its bounded reason, and the original error where one was recorded. */
const handlingError = (
  row: ReceivedMessage,
  outcome: Extract<Outcome.Outcome, { readonly _tag: "Fail" | "Retry" }>,
  failures: ReadonlyArray<Cause.Cause<unknown>>,
  registry: HandlersShape
): SyncHandlingError => {
  const failed = failures.find((cause) => !Cause.isInterruptedOnly(cause))
  // No handler failed: the message was rejected before any ran; decoding again gives that error.
  const rejected = failed === undefined ? Handle.decode(row, registry) : undefined
  const cause = failed !== undefined
    ? Cause.squash(failed)
    : rejected !== undefined && Either.isLeft(rejected)
    ? rejected.left.error
    : undefined
  return new SyncHandlingError({
    transport: row.transport,
    type: outcome.type,
    messageId: row.messageId,
    reason: outcome.error,
    handledBy: outcome.headers.handledBy ?? [],
    message: `${outcome.type} could not be handled on the sync transport ${row.transport}: ` +
      `${outcome.error.tag}: ${outcome.error.message}`,
    ...(cause === undefined ? {} : { cause })
  })
}

/**
 * A layer providing `Transport` and `TransportAdmin` served by a sync transport alone (every route must name
 * it: `Outbox.layer({ defaultTransports: ["sync"] })`) — handlers run at dispatch, without a worker, in tests.
 * Beside stored transports, give `make` to `TransportRouter.layer`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<Transport | TransportAdmin, OutboxConfigError, Handlers> =>
  Layer.effectContext(Effect.map(make(options), toContext))

/**
 * `layer` over `makeWithoutHandlers`: the handlers are those of the dispatching fiber.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWithoutHandlers = (
  options: Options = {}
): Layer.Layer<Transport | TransportAdmin, OutboxConfigError> =>
  Layer.effectContext(Effect.map(makeWithoutHandlers(options), toContext))

const toContext = (backend: TransportBackend) =>
  Context.make(Transport, backend).pipe(Context.add(TransportAdmin, backend))
