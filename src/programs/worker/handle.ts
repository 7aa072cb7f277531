/**
 * Handling one claimed message: the row decoded into an envelope, its handlers run, and the outcome decided by
 * the rules of `Outcome`. Never fails: every error of a handler becomes an outcome.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { Envelope, ReceivedMessage } from "../../domain/Envelope.js"
import {
  HandlerTimeoutError,
  MessageDecodeError,
  NoHandlerForMessageError,
  StorageNotReadyError
} from "../../domain/Errors.js"
import * as Headers from "../../domain/Headers.js"
import * as Message from "../../domain/Message.js"
import type { MessageId } from "../../domain/MessageId.js"
import * as Outcome from "../../domain/Outcome.js"
import { cut, maxNameLength } from "../../internal/text.js"
import type { HandlersShape, RegisteredHandler } from "../../services/Handlers.js"
import type { RetryStrategyShape } from "../../services/RetryStrategy.js"
import * as MessageLogs from "./messageLogs.js"
import * as Tracing from "./tracing.js"
import * as Watchdog from "./watchdog.js"

/** A row decoded: its envelope and the handlers that run for it. @internal */
export type Decoded = {
  readonly envelope: Envelope
  readonly handlers: ReadonlyArray<RegisteredHandler>
}

/**
 * A message of a claimed batch decoded ahead, with what its batch handlers' shared calls decided for it (see
 * `grouped.ts`): those handlers are not run again for it.
 *
 * @internal
 */
export interface Prepared {
  readonly decoded: Decoded
  /** Undefined when it was part of no shared call. */
  readonly exits: ReadonlyMap<RegisteredHandler, Exit.Exit<unknown, unknown>> | undefined
}

type Rejected = { readonly headers: Headers.Headers; readonly error: MessageDecodeError | NoHandlerForMessageError }

/** The envelope and the handlers of a row, or why it cannot be handled. @internal */
export const decode = (row: ReceivedMessage, registry: HandlersShape): Either.Either<Decoded, Rejected> => {
  const headersResult = Headers.decode(row.headers)
  if (Either.isLeft(headersResult)) {
    return Either.left({
      headers: new Headers.Headers({ type: headersResult.left.type ?? "<unknown>", rawHeaders: row.headers }),
      error: headersResult.left
    })
  }
  const headers = headersResult.right
  const cls = registry.messageClass(headers.type)
  if (cls === undefined) {
    return Either.left({
      headers,
      error: new MessageDecodeError({
        reason: "UnknownType",
        type: cut(headers.type, maxNameLength),
        message: `Unknown message type ${
          JSON.stringify(cut(headers.type, maxNameLength))
        }: no message class is registered for it`
      })
    })
  }
  const message = Message.decodeBody(cls, row.body)
  if (Either.isLeft(message)) return Either.left({ headers, error: message.left })
  const handlers = registry.handlersFor(headers.type, row.transport)
  if (handlers.length === 0) {
    return Either.left({
      headers,
      error: new NoHandlerForMessageError({
        type: cut(headers.type, maxNameLength),
        transport: row.transport,
        message: `No handler for ${cut(headers.type, maxNameLength)} received from transport ${row.transport}`
      })
    })
  }
  return Either.right({
    envelope: {
      message: message.right,
      messageId: row.messageId as MessageId,
      headers,
      transport: row.transport,
      transportId: row.id,
      deliveries: row.deliveries,
      body: row.body,
      orderingKey: row.orderingKey
    },
    handlers
  })
}

/**
 * Handles one claimed message and decides its outcome. Handlers that already succeeded on an earlier delivery
 * are skipped. A handler that fails with a `StorageNotReadyError` (an idempotency store's table, a forward's target
 * not set up) fails it with that error: storage that is not ready is not the message's fault, so the worker stops
 * and gives the message back untouched. The handlers' services must be provided around it
 * (`HandlersShape.provide`). With `watched`, each handler's start arms its timeout in slot `index` of the batch
 * (the worker's watchdog enforces it); with `logs`, the running fiber's log lines carry the message (see
 * `messageLogs.ts`); with `tracing`, its handlers run in the message's `process` span (see `tracing.ts`); with
 * `prepared`, the row is decoded already and its batch handlers have run.
 *
 * @internal
 */
export const handle = (
  row: ReceivedMessage,
  registry: HandlersShape,
  strategy: RetryStrategyShape,
  countsDeliveries: boolean,
  watched?: Watchdog.Watched,
  index = 0,
  logs?: MessageLogs.Slot,
  tracing?: Tracing.Tracing,
  prepared?: Prepared
): Effect.Effect<Outcome.Outcome, StorageNotReadyError> => {
  const decoded = prepared === undefined ? decode(row, registry) : Either.right(prepared.decoded)
  if (Either.isLeft(decoded)) {
    if (logs !== undefined) logs.envelope = undefined
    const { error, headers } = decoded.left
    const rejected = Effect.succeed(Outcome.decide({ _tag: "Rejected", error }, row.transport, headers, Option.none()))
    return tracing === undefined ? rejected : Tracing.finish(tracing, Tracing.start(tracing, row, headers), rejected)
  }
  const { envelope, handlers } = decoded.right
  if (logs !== undefined) logs.envelope = envelope
  const traced = tracing === undefined ? undefined : Tracing.start(tracing, row, envelope.headers)
  const died = countsDeliveries ? Outcome.workerDied(row.transport, row, envelope.headers) : Option.none()
  const handling = Option.isSome(died)
    ? Effect.flatMap(strategy.delayFor(died.value), (answer) =>
      Option.isNone(answer)
        ? Effect.succeed(
          Outcome.decide({ _tag: "Died", error: died.value.error }, row.transport, envelope.headers, answer)
        )
        : runHandlers(envelope, handlers, strategy, watched, index, traced, prepared?.exits))
    : runHandlers(envelope, handlers, strategy, watched, index, traced, prepared?.exits)
  return traced === undefined ? handling : Tracing.finish(tracing!, traced, handling)
}

/**
 * The outcome of a message whose handler ran past its timeout (the watchdog interrupted it): a failure with
 * `HandlerTimeoutError`, judged by the strategy like any other; the handlers that succeeded before it are kept.
 * The row is decoded again (it was, to start the handler): the batch keeps no envelope.
 *
 * @internal
 */
export const timedOut = (
  row: ReceivedMessage,
  registry: HandlersShape,
  expired: Watchdog.TimedOut,
  strategy: RetryStrategyShape
): Effect.Effect<Outcome.Outcome> => {
  const decoded = decode(row, registry)
  // Decoded before its handler started, it decodes again; the branch keeps the types whole.
  if (Either.isLeft(decoded)) return Effect.orDie(handle(row, registry, strategy, false))
  const name = cut(expired.handler.name, maxNameLength)
  const error = new HandlerTimeoutError({
    handler: name,
    timeoutMs: expired.timeoutMs,
    message: `Handler ${name} did not finish within ${Duration.format(Duration.millis(expired.timeoutMs))}`
  })
  return settle(
    { _tag: "HandlersFailed", causes: [Cause.fail(error)], handledBy: [...expired.handledBy] },
    decoded.right.envelope,
    strategy
  )
}

/** What happened decided: asks the strategy when the rules need it. */
const settle = (
  happened: Outcome.Happened,
  envelope: Envelope,
  strategy: RetryStrategyShape
): Effect.Effect<Outcome.Outcome> => {
  const question = Outcome.question(happened, envelope.transport, envelope.headers)
  if (Option.isNone(question)) {
    return Effect.succeed(Outcome.decide(happened, envelope.transport, envelope.headers, Option.none()))
  }
  return Effect.map(
    strategy.delayFor(question.value),
    (answer) => Outcome.decide(happened, envelope.transport, envelope.headers, answer)
  )
}

/** The `StorageNotReadyError` a handler failed with, if it did (in any branch of its cause). */
const notReady = (cause: Cause.Cause<unknown>): Option.Option<StorageNotReadyError> =>
  Cause.find(
    cause,
    (c) => c._tag === "Fail" && c.error instanceof StorageNotReadyError ? Option.some(c.error) : Option.none()
  )

const runHandlers = (
  envelope: Envelope,
  handlers: ReadonlyArray<RegisteredHandler>,
  strategy: RetryStrategyShape,
  watched: Watchdog.Watched | undefined,
  index: number,
  traced: Tracing.ProcessSpan | undefined,
  exits: Prepared["exits"]
): Effect.Effect<Outcome.Outcome, StorageNotReadyError> => {
  // hot path: one handler, first run — keep it to a few Effect operations per message (see BENCHMARKS.md)
  if (handlers.length === 1 && envelope.headers.handledBy === undefined) {
    const h = handlers[0]!
    // A batch handler that ran for the whole claimed batch: its exit for this message stands for its run.
    const ran = exits?.get(h)
    if (ran === undefined && watched !== undefined) Watchdog.arm(watched, index, h, undefined)
    const run = ran ?? h.run(envelope.message, envelope)
    return Effect.matchCauseEffect(traced === undefined ? run : traced.run(run), {
      onSuccess: () =>
        Effect.succeed(Outcome.decide(Outcome.handled, envelope.transport, envelope.headers, Option.none())),
      onFailure: (cause) => {
        if (Cause.isInterruptedOnly(cause)) return Effect.succeed(Outcome.release)
        const storage = notReady(cause)
        return Option.isSome(storage)
          ? Effect.fail(storage.value)
          : settle({ _tag: "HandlersFailed", causes: [cause], handledBy: [] }, envelope, strategy)
      }
    })
  }
  return Effect.gen(function*() {
    const done = new Set(envelope.headers.handledBy ?? [])
    const handledBy = [...done]
    const causes: Array<Cause.Cause<unknown>> = []
    for (const h of handlers) {
      if (done.has(h.name)) continue
      const ran = exits?.get(h)
      if (ran === undefined && watched !== undefined) Watchdog.arm(watched, index, h, handledBy)
      const run = ran ?? h.run(envelope.message, envelope)
      const exit = yield* Effect.exit(traced === undefined ? run : traced.run(run))
      if (Exit.isSuccess(exit)) handledBy.push(h.name)
      else if (Cause.isInterruptedOnly(exit.cause)) return Outcome.release
      else {
        const storage = notReady(exit.cause)
        if (Option.isSome(storage)) return yield* Effect.fail(storage.value)
        causes.push(exit.cause)
      }
    }
    if (causes.length === 0) return Outcome.decide(Outcome.handled, envelope.transport, envelope.headers, Option.none())
    return yield* settle({ _tag: "HandlersFailed", causes, handledBy }, envelope, strategy)
  })
}
