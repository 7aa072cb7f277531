/**
 * The worker: claims batches, runs the handlers, records each outcome.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type { Envelope, ReceivedMessage } from "../domain/Envelope.js"
import {
  MessageDecodeError,
  NoHandlerForMessageError,
  RecoverableMessageHandlingError,
  type TransportError,
  type UnknownTransportError,
  UnrecoverableMessageHandlingError,
  WorkerDiedError
} from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import * as Message from "../domain/Message.js"
import type { MessageId } from "../domain/MessageId.js"
import { Handlers, type HandlersShape, type RegisteredHandler } from "../services/Handlers.js"
import * as IdempotencyStore from "../services/IdempotencyStore.js"
import { RetryStrategy, type RetryStrategyShape } from "../services/RetryStrategy.js"
import { Transport, type TransportShape } from "../services/Transport.js"

/**
 * What the worker reports about each message.
 *
 * @since 0.1.0
 * @category models
 */
export type WorkerEvent = Data.TaggedEnum<{
  /** Every handler succeeded; the message is acked. */
  Handled: { readonly transport: string; readonly messageId: string; readonly type: string; readonly durationMs: number }
  /** A handler failed; the message comes back after `delayMs`. */
  Retried: {
    readonly transport: string
    readonly messageId: string
    readonly type: string
    readonly durationMs: number
    readonly attempt: number
    readonly delayMs: number
    readonly error: Headers.ErrorDetails
  }
  /** The message moved to the failure queue. */
  Failed: {
    readonly transport: string
    readonly messageId: string
    readonly type: string
    readonly durationMs: number
    readonly error: Headers.ErrorDetails
  }
}>

/**
 * Constructors of worker events.
 *
 * @since 0.1.0
 * @category constructors
 */
export const WorkerEvent = Data.taggedEnum<WorkerEvent>()

/**
 * Worker options (Symfony `messenger:consume` names where they exist).
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerOptions {
  /** Transports to consume, by priority: the first is drained before the next is looked at. */
  readonly transports: ReadonlyArray<string>
  /** Messages claimed per round trip (default 50). */
  readonly batchSize?: number
  /** Messages handled at once (default 1, which keeps `(available_at, id)` order). */
  readonly concurrency?: number
  /** Wait between polls when every transport is empty (default 1 second). */
  readonly sleep?: Duration.DurationInput
  /** Stop after this many messages were processed (handled, retried or failed). */
  readonly limit?: number
  /** Stop after this many messages were retried or moved to the failure queue. */
  readonly failureLimit?: number
  /** Stop once the worker has run this long (the in-flight messages finish first). */
  readonly timeLimit?: Duration.DurationInput
  /** Stop once the process's resident memory exceeds this many bytes. */
  readonly memoryLimit?: number
  /**
   * While a full batch runs, claim the next one (default `true`): the database and the handlers work at the
   * same time. The prefetched messages are leased and renewed like the running ones, and given back at once
   * when the worker stops or a higher-priority transport has messages.
   */
  readonly prefetch?: boolean
  /** Stop as soon as a poll of every transport finds nothing ready. */
  readonly stopWhenEmpty?: boolean
  /**
   * On interruption (SIGTERM/SIGINT under `NodeRuntime.runMain`), how long in-flight handlers may run on
   * before they are interrupted and their messages released (default 30 seconds).
   */
  readonly shutdownTimeout?: Duration.DurationInput
  /** Called after each outcome is recorded. */
  readonly onEvent?: (event: WorkerEvent) => Effect.Effect<void>
  /**
   * The retention job of the `IdempotencyStore`, when one is in context: every `every` (default 5 minutes),
   * one worker at a time (an advisory lock) deletes the records older than `olderThan` (default: the store's
   * retention) in batches. `false` turns it off.
   */
  readonly idempotencyPurge?: false | {
    readonly every?: Duration.DurationInput
    readonly olderThan?: Duration.DurationInput
    readonly batchSize?: number
    readonly maxBatches?: number
  }
}

/**
 * Why a worker run ended.
 *
 * @since 0.1.0
 * @category models
 */
export type StopReason = "limit" | "failure-limit" | "time-limit" | "memory-limit" | "empty"

/**
 * Counts of a worker run and why it stopped.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerSummary {
  readonly handled: number
  readonly retried: number
  readonly failed: number
  readonly stoppedBy: StopReason
}

class StopWorker extends Data.TaggedError("StopWorker")<{ readonly reason: StopReason }> {}

const maxCauseLength = 4000

/** How often finished messages are acked while the rest of a batch runs. */
const ackInterval = Duration.millis(25)
const ackIntervalMs = Duration.toMillis(ackInterval)

/**
 * Describes a handler failure for the headers: tag, message and (bounded) cause with stack.
 *
 * @since 0.1.0
 * @category utils
 */
export const errorDetails = (cause: Cause.Cause<unknown>): Headers.ErrorDetails => {
  const failure = Cause.failureOption(cause)
  const value = Option.isSome(failure) ? failure.value : Option.getOrUndefined(Cause.dieOption(cause))
  const tag = typeof value === "object" && value !== null
    ? String((value as { _tag?: unknown })._tag ?? (value as { name?: unknown }).name ?? "Error")
    : Option.isSome(failure)
    ? "Failure"
    : "Defect"
  const message = typeof value === "object" && value !== null && "message" in value
    ? String((value as { message: unknown }).message)
    : String(value)
  const pretty = Cause.pretty(cause)
  return new Headers.ErrorDetails({
    tag: Option.isSome(failure) ? tag : Cause.isInterruptedOnly(cause) ? "Interrupted" : tag,
    message,
    cause: pretty.length > maxCauseLength ? `${pretty.slice(0, maxCauseLength)}…` : pretty
  })
}

type Decoded = {
  readonly envelope: Envelope
  readonly handlers: ReadonlyArray<RegisteredHandler>
}

const decode = (
  row: ReceivedMessage,
  registry: HandlersShape
): Either.Either<Decoded, { readonly headers: Headers.Headers; readonly error: MessageDecodeError | NoHandlerForMessageError }> => {
  const headersResult = Headers.decode(row.headers)
  if (Either.isLeft(headersResult)) {
    return Either.left({
      headers: new Headers.Headers({ type: guessType(row.headers), rawHeaders: row.headers }),
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
        type: headers.type,
        message: `Unknown message type ${JSON.stringify(headers.type)}: no message class is registered for it`
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
        type: headers.type,
        transport: row.transport,
        message: `No handler for ${headers.type} received from transport ${row.transport}`
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
      body: row.body
    },
    handlers
  })
}

const guessType = (raw: string): string => {
  try {
    const parsed = JSON.parse(raw) as unknown
    if (typeof parsed === "object" && parsed !== null && typeof (parsed as { type?: unknown }).type === "string") {
      return (parsed as { type: string }).type
    }
  } catch {
    // corrupt JSON: the type is unknown
  }
  return "<unknown>"
}

type Outcome =
  | { readonly _tag: "Ack"; readonly type: string }
  | { readonly _tag: "Retry"; readonly type: string; readonly attempt: number; readonly delay: Duration.Duration; readonly headers: Headers.Headers; readonly error: Headers.ErrorDetails }
  | { readonly _tag: "Fail"; readonly type: string; readonly headers: Headers.Headers; readonly error: Headers.ErrorDetails }
  | { readonly _tag: "Release" }

const release: Outcome = { _tag: "Release" }
const ackOutcomes = new Map<string, Outcome>()
const ackOf = (type: string): Outcome => {
  let outcome = ackOutcomes.get(type)
  if (outcome === undefined) {
    outcome = { _tag: "Ack", type }
    ackOutcomes.set(type, outcome)
  }
  return outcome
}

const decideFailure = (
  transport: string,
  headers: Headers.Headers,
  handledBy: ReadonlyArray<string>,
  causes: ReadonlyArray<Cause.Cause<unknown>>,
  strategy: RetryStrategyShape
): Effect.Effect<Outcome> =>
  Effect.gen(function*() {
    const failures = causes.map((c) => Option.getOrUndefined(Cause.failureOption(c)))
    const recoverable = failures.filter((e): e is RecoverableMessageHandlingError =>
      e instanceof RecoverableMessageHandlingError
    )
    const allUnrecoverable = failures.every((e) => e instanceof UnrecoverableMessageHandlingError)
    const error = errorDetails(recoverable.length > 0 ? Cause.fail(recoverable[0]) : causes[0]!)
    const base = Headers.patch(headers, handledBy.length > 0 ? { handledBy } : {})
    const attempt = Headers.retryCount(headers) + 1
    const toFail = (): Outcome => ({
      _tag: "Fail",
      type: headers.type,
      error,
      headers: Headers.patch(base, { errorDetails: error, originalTransport: headers.originalTransport ?? transport })
    })
    const toRetry = (delay: Duration.Duration): Outcome => ({
      _tag: "Retry",
      type: headers.type,
      attempt,
      delay,
      error,
      headers: Headers.withRedelivery(
        base,
        new Headers.Redelivery({
          retryCount: attempt,
          delayMs: Duration.toMillis(delay),
          errorTag: error.tag,
          errorMessage: error.message
        })
      )
    })
    if (recoverable.length > 0) {
      const explicit = recoverable.flatMap((e) => (e.retryDelay === undefined ? [] : [e.retryDelay]))
      if (explicit.length > 0) return toRetry(explicit.reduce((a, b) => Duration.min(a, b)))
      const planned = yield* strategy.delayFor({ transport, attempt, error: recoverable[0] })
      return toRetry(Option.getOrElse(planned, () => lastDelay(headers)))
    }
    if (allUnrecoverable) return toFail()
    const planned = yield* strategy.delayFor({ transport, attempt, error: failures[0] })
    return Option.match(planned, { onNone: toFail, onSome: toRetry })
  })

const lastDelay = (headers: Headers.Headers): Duration.Duration => {
  const history = headers.redeliveries ?? []
  return history.length === 0 ? Duration.seconds(1) : Duration.millis(history[history.length - 1]!.delayMs)
}

const failOutcome = (headers: Headers.Headers, transport: string, error: unknown): Outcome => {
  const details = errorDetails(Cause.fail(error))
  return {
    _tag: "Fail",
    type: headers.type,
    error: details,
    headers: Headers.patch(headers, {
      errorDetails: details,
      originalTransport: headers.originalTransport ?? transport
    })
  }
}

/**
 * Handles one claimed message and decides its outcome. Never fails: every error of a handler
 * becomes an outcome. Handlers that already succeeded on an earlier delivery are skipped.
 * The handlers' services must be provided around it (`HandlersShape.provide`).
 *
 * @since 0.1.0
 * @category internals
 */
const handleOne = (
  row: ReceivedMessage,
  registry: HandlersShape,
  strategy: RetryStrategyShape
): Effect.Effect<Outcome> => {
  const decoded = decode(row, registry)
  if (Either.isLeft(decoded)) return Effect.succeed(failOutcome(decoded.left.headers, row.transport, decoded.left.error))
  const { envelope, handlers } = decoded.right
  // Claims are counted: deliveries beyond the recorded retries had no outcome — a worker died on them.
  const retries = Headers.retryCount(envelope.headers)
  const crashes = row.deliveries - 1 - retries
  if (crashes > 0) {
    const error = new WorkerDiedError({
      message: `A worker died or lost its lease while handling this message (${crashes} of ${row.deliveries} ` +
        `deliveries recorded no outcome)`,
      deliveries: row.deliveries
    })
    return Effect.flatMap(
      strategy.delayFor({ transport: row.transport, attempt: retries + crashes, error }),
      (planned) =>
        Option.isNone(planned)
          ? Effect.succeed(failOutcome(envelope.headers, row.transport, error))
          : runHandlers(row, envelope, handlers, strategy)
    )
  }
  return runHandlers(row, envelope, handlers, strategy)
}

const runHandlers = (
  row: ReceivedMessage,
  envelope: Envelope,
  handlers: ReadonlyArray<RegisteredHandler>,
  strategy: RetryStrategyShape
): Effect.Effect<Outcome> => {
  // Fast path (the common case): one handler, first run. Few Effect operations per message.
  if (handlers.length === 1 && envelope.headers.handledBy === undefined) {
    // (Plain arguments, not an options object: no closure per message gets named by the transpiler.)
    return Effect.flatMap(Effect.exit(handlers[0]!.run(envelope.message, envelope)), (exit) =>
      Exit.isSuccess(exit)
        ? Effect.succeed(ackOf(envelope.headers.type))
        : Cause.isInterruptedOnly(exit.cause)
        ? Effect.succeed(release)
        : decideFailure(row.transport, envelope.headers, [], [exit.cause], strategy))
  }
  return Effect.gen(function*() {
    const done = new Set(envelope.headers.handledBy ?? [])
    const handledBy = [...done]
    const causes: Array<Cause.Cause<unknown>> = []
    for (const h of handlers) {
      if (done.has(h.name)) continue
      const exit = yield* Effect.exit(h.run(envelope.message, envelope))
      if (Exit.isSuccess(exit)) {
        handledBy.push(h.name)
      } else if (Cause.isInterruptedOnly(exit.cause)) {
        return release
      } else {
        causes.push(exit.cause)
      }
    }
    if (causes.length === 0) return ackOf(envelope.headers.type)
    return yield* decideFailure(row.transport, envelope.headers, handledBy, causes, strategy)
  })
}

/**
 * Runs the worker until a limit stops it (or forever). Transport failures — the database down,
 * connections killed — are logged and the loop restarts with exponential backoff (100 ms up to
 * 10 s); writes of outcomes are retried for up to a minute, so a database restart loses and repeats
 * nothing. Interrupted (SIGTERM/SIGINT under `NodeRuntime.runMain`), it lets in-flight handlers finish
 * within `shutdownTimeout`, records their outcomes, and releases the messages it claimed but did not start.
 *
 * Per batch: one claim statement; handlers run inside one fiber with the handlers' services provided once;
 * acks go to a background writer (one `DELETE` per flush); while a full batch runs, the next one is
 * already being claimed (`prefetch`), so the database and the handlers work at the same time.
 *
 * @since 0.1.0
 * @category constructors
 */
export const run = (
  options: WorkerOptions
): Effect.Effect<WorkerSummary, never, Transport | Handlers | RetryStrategy> =>
  Effect.gen(function*() {
    const transport = yield* Transport
    const registry = yield* Handlers
    const strategy = yield* RetryStrategy
    const startedAt = yield* Clock.currentTimeMillis
    // With one transport the next claim always follows the batch; with several it may be another transport's.
    const ledger = makeLedger(options.transports, transport.ackAndClaim !== undefined && options.transports.length === 1)
    const state: RunState = {
      options,
      transport,
      registry,
      strategy,
      ledger,
      counts: { handled: 0, retried: 0, failed: 0 },
      startedAt,
      timeLimitMs: options.timeLimit === undefined ? Infinity : Duration.toMillis(Duration.decode(options.timeLimit)),
      shutdownTimeout: Duration.decode(options.shutdownTimeout ?? "30 seconds")
    }
    const purger = yield* Effect.forkDaemon(purgeJob(options))
    const heartbeat = yield* Effect.forkDaemon(heartbeatJob(ledger, transport, options.transports))
    const writer = yield* Effect.forkDaemon(ackWriter(ledger, transport))
    // Last: the acks still queued are written (and the leases renewed until they are), whatever ended the run.
    const finish = Effect.gen(function*() {
      yield* Fiber.interrupt(writer)
      yield* flushAcks(ledger, transport).pipe(
        Effect.catchAll((error) => Effect.logError("outbox worker: ack failed", error))
      )
      yield* Fiber.interrupt(heartbeat)
      yield* Fiber.interrupt(purger)
    })
    const wake = yield* transport.wakeups(options.transports)
    const reason = yield* consumeLoop(state, wake).pipe(
      Effect.tapError((error) =>
        error._tag === "StopWorker"
          ? Effect.void
          : Effect.logError("outbox worker: storage failure, restarting the loop", error)
      ),
      Effect.retry({
        schedule: Schedule.exponential("100 millis").pipe(
          Schedule.union(Schedule.spaced("10 seconds")),
          Schedule.resetAfter("1 minute")
        ),
        while: (error) => error._tag !== "StopWorker"
      }),
      Effect.catchTag("StopWorker", (stop) => Effect.succeed(stop.reason)),
      Effect.catchAllCause((cause) =>
        Effect.logError("outbox worker stopped on an unexpected error", cause).pipe(Effect.as("empty" as const))
      ),
      Effect.ensuring(finish),
      Effect.onInterrupt(() => Effect.logInfo("outbox worker: stopped by interruption")),
      Effect.annotateLogs({ worker: "effect-outbox" })
    )
    return { ...state.counts, stoppedBy: reason }
  }).pipe(Effect.scoped)

/**
 * What the worker holds, per transport: the claimed messages not yet settled in storage (their leases
 * are renewed) and the handled ones whose ack is not written yet.
 */
interface Ledger {
  readonly held: Map<string, Set<string>>
  readonly acks: Map<string, Array<string>>
  /** When the oldest unwritten ack of a transport was queued (`Date.now()`). */
  readonly since: Map<string, number>
  /** Something to ack: wakes the writer. */
  readonly pending: Queue.Queue<void>
  /** Write every queued ack now (set by `flushNow`, read by the writer). */
  urgent: boolean
  /** Resumes the writer while it waits out `ackInterval`. */
  interruptWait: (() => void) | undefined
  /** The transport can ack with its next claim (`ackAndClaim`): the writer is only needed for long batches. */
  readonly acksRideOnClaims: boolean
  /** When the running batch started (`Date.now()`). */
  batchStartedAt: number
  /** The writer was signalled and has not gone back to waiting. */
  writerAwake: boolean
}

const makeLedger = (names: ReadonlyArray<string>, acksRideOnClaims: boolean): Ledger => ({
  held: new Map(names.map((name) => [name, new Set<string>()])),
  acks: new Map(names.map((name) => [name, []])),
  since: new Map(),
  pending: Effect.runSync(Queue.sliding<void>(1)),
  urgent: false,
  interruptWait: undefined,
  acksRideOnClaims,
  batchStartedAt: 0,
  writerAwake: false
})

/** Asks the writer to write every queued ack now (a batch ended and no claim will carry its acks). */
const flushNow = (ledger: Ledger): void => {
  ledger.urgent = true
  ledger.interruptWait?.()
}

/**
 * Waits `ms`, or less when `flushNow` is called; resolves with whether it was. A plain timer and a callback
 * (the writer wakes about once per batch: no fiber race each time).
 */
const waitOrUrgent = (ledger: Ledger, ms: number): Effect.Effect<boolean> =>
  Effect.async<boolean>((resume) => {
    if (ledger.urgent) {
      resume(Effect.succeed(true))
      return
    }
    const timer = setTimeout(() => {
      ledger.interruptWait = undefined
      resume(Effect.succeed(false))
    }, ms)
    ledger.interruptWait = () => {
      clearTimeout(timer)
      ledger.interruptWait = undefined
      resume(Effect.succeed(true))
    }
    return Effect.sync(() => {
      clearTimeout(timer)
      ledger.interruptWait = undefined
    })
  })

const heldOf = (ledger: Ledger, name: string): Set<string> => {
  let held = ledger.held.get(name)
  if (held === undefined) {
    held = new Set()
    ledger.held.set(name, held)
  }
  return held
}

const pushAck = (ledger: Ledger, name: string, id: string): void => {
  let acks = ledger.acks.get(name)
  if (acks === undefined) {
    acks = []
    ledger.acks.set(name, acks)
  }
  acks.push(id)
  const now = Date.now()
  if (acks.length === 1) ledger.since.set(name, now)
  // A batch's acks normally ride on the next claim; the writer is woken only when it cannot (no
  // `ackAndClaim`), or when the batch has run long enough that finished messages should not wait for its end.
  if (!ledger.acksRideOnClaims || now - ledger.batchStartedAt >= ackIntervalMs) wakeWriter(ledger)
}

/** Wakes the ack writer (at most one signal until it goes back to waiting). */
const wakeWriter = (ledger: Ledger): void => {
  if (ledger.writerAwake) return
  ledger.writerAwake = true
  ledger.pending.unsafeOffer(undefined)
}

/** Takes the queued acks of a transport (to write them, or to send them along with a claim). */
const takeAcks = (ledger: Ledger, name: string): Array<string> => {
  const acks = ledger.acks.get(name)
  return acks === undefined || acks.length === 0 ? [] : acks.splice(0, acks.length)
}

/** Acks written: the messages are settled, their leases no longer renewed. */
const settled = (ledger: Ledger, name: string, ids: ReadonlyArray<string>): void => {
  const held = heldOf(ledger, name)
  for (const id of ids) held.delete(id)
}

/**
 * Gives claimed messages that no handler started back at once (their claim does not count as a delivery);
 * a storage failure leaves them to their lease.
 */
const giveBack = (ledger: Ledger, transport: TransportShape, name: string, ids: ReadonlyArray<string>) =>
  ids.length === 0 ? Effect.void : transport.release(name, ids).pipe(
    Effect.retry(storageRetry),
    Effect.tap(() => settled(ledger, name, ids)),
    Effect.catchAll(() => Effect.void)
  )

/** Acks not written (their statement failed): queued again, so the writer retries them. */
const requeueAcks = (ledger: Ledger, name: string, ids: ReadonlyArray<string>): void => {
  for (const id of ids) pushAck(ledger, name, id)
}

/**
 * Writes the queued acks (of every transport, or of those whose oldest ack waited `ackInterval`), one
 * statement per transport. Uninterruptible: ids taken from the queue are written, or logged as lost to a
 * storage failure (the messages come back after their lease) — never dropped by an interruption.
 */
const flushAcks = (ledger: Ledger, transport: TransportShape, dueOnly = false) =>
  Effect.forEach(Array.from(ledger.acks.keys()), (name) => {
    if (dueOnly && Date.now() - (ledger.since.get(name) ?? 0) < ackIntervalMs) return Effect.void
    const ids = takeAcks(ledger, name)
    if (ids.length === 0) return Effect.void
    return transport.ack(name, ids).pipe(
      Effect.retry(storageRetry),
      Effect.tap(() => settled(ledger, name, ids))
    )
  }, { discard: true }).pipe(Effect.uninterruptible)

/**
 * The background ack writer. Acks normally ride on the worker's next claim (`ackAndClaim`); what waited
 * `ackInterval` without one — a slow batch, an idle queue, a backend without `ackAndClaim` — is written here,
 * never on the way of a handler.
 */
const ackWriter = (ledger: Ledger, transport: TransportShape) =>
  Effect.gen(function*() {
    while (true) {
      ledger.writerAwake = false
      yield* Queue.take(ledger.pending)
      while (Array.from(ledger.acks.values()).some((acks) => acks.length > 0)) {
        const oldest = Math.min(
          ...Array.from(ledger.acks).flatMap(([name, acks]) => acks.length > 0 ? [ledger.since.get(name) ?? 0] : [])
        )
        const wait = oldest + ackIntervalMs - Date.now()
        const urgent = wait > 0 ? yield* waitOrUrgent(ledger, wait) : ledger.urgent
        ledger.urgent = false
        yield* flushAcks(ledger, transport, !urgent).pipe(
          Effect.catchAll((error) => Effect.logWarning("outbox worker: ack failed, the messages will come back", error))
        )
      }
    }
  }).pipe(Effect.interruptible)

/** Renews the leases of every held message, every third of the shortest lease (own fiber, never blocks a handler). */
const heartbeatJob = (ledger: Ledger, transport: TransportShape, names: ReadonlyArray<string>) => {
  const leases = names.flatMap((name) => Option.toArray(transport.lease(name)).map(Duration.toMillis))
  if (leases.length === 0) return Effect.void
  const every = Duration.millis(Math.max(10, Math.min(...leases) / 3))
  const beat = Effect.forEach(names, (name) => {
    const held = ledger.held.get(name)
    if (held === undefined || held.size === 0 || Option.isNone(transport.lease(name))) return Effect.void
    return transport.keepalive(name, Array.from(held)).pipe(
      Effect.catchAll((error) => Effect.logWarning("outbox worker: lease renewal failed", error))
    )
  }, { discard: true })
  return beat.pipe(Effect.repeat(Schedule.spaced(every)), Effect.delay(every), Effect.interruptible)
}

/** The idempotency retention job: exclusive (advisory lock) and batched, so any number of workers may run it. */
const purgeJob = (options: WorkerOptions) =>
  Effect.gen(function*() {
    const store = yield* Effect.serviceOption(IdempotencyStore.IdempotencyStore)
    if (Option.isNone(store) || options.idempotencyPurge === false) return
    const o = options.idempotencyPurge ?? {}
    const every = Duration.decode(o.every ?? "5 minutes")
    const purgeOnce = store.value.purgeExclusive({
      ...(o.olderThan === undefined ? {} : { olderThan: o.olderThan }),
      batchSize: o.batchSize ?? IdempotencyStore.defaultPurgeBatchSize,
      maxBatches: o.maxBatches ?? 100
    }).pipe(
      Effect.tap((deleted) =>
        Option.match(deleted, {
          onNone: () => Effect.logDebug("outbox worker: another worker is purging idempotency records"),
          onSome: (n) => n > 0 ? Effect.logInfo(`outbox worker: purged ${n} idempotency records`) : Effect.void
        })
      ),
      Effect.catchAll((error) => Effect.logWarning("outbox worker: idempotency purge failed", error))
    )
    yield* purgeOnce.pipe(Effect.delay(every), Effect.forever)
  }).pipe(Effect.interruptible)

interface RunState {
  readonly options: WorkerOptions
  readonly transport: TransportShape
  readonly registry: HandlersShape
  readonly strategy: RetryStrategyShape
  readonly ledger: Ledger
  readonly counts: { handled: number; retried: number; failed: number }
  readonly startedAt: number
  readonly timeLimitMs: number
  readonly shutdownTimeout: Duration.Duration
}

/** The limit that says to stop now, if any (checked between messages and between polls). */
const limitReached = (state: RunState, now: number): StopReason | undefined => {
  const { counts, options } = state
  if (options.limit !== undefined && counts.handled + counts.retried + counts.failed >= options.limit) return "limit"
  if (options.failureLimit !== undefined && counts.retried + counts.failed >= options.failureLimit) {
    return "failure-limit"
  }
  if (now - state.startedAt >= state.timeLimitMs) return "time-limit"
  if (options.memoryLimit !== undefined && process.memoryUsage.rss() >= options.memoryLimit) return "memory-limit"
  return undefined
}

const stopMessage: Record<StopReason, (state: RunState) => string> = {
  "limit": (s) => `message limit of ${s.options.limit} reached`,
  "failure-limit": (s) => `failure limit of ${s.options.failureLimit} reached`,
  "time-limit": (s) => `time limit of ${Duration.format(Duration.millis(s.timeLimitMs))} reached`,
  "memory-limit": (s) => `memory limit of ${s.options.memoryLimit} bytes exceeded`,
  "empty": () => "no message ready"
}

const stop = (state: RunState, reason: StopReason) =>
  Effect.logInfo(`outbox worker: stopping, ${stopMessage[reason](state)}`).pipe(
    Effect.zipRight(Effect.fail(new StopWorker({ reason })))
  )

/**
 * A batch handed to the runner, and its exit once it has one. (A hand-rolled one-shot in place of a `Deferred`:
 * one `Effect.async` per wait, about 4 KB less garbage per batch, measured.)
 */
interface BatchJob {
  readonly effect: Effect.Effect<void, unknown>
  exit: Exit.Exit<void, unknown> | undefined
  /** Resumes the fiber waiting for the exit. */
  waiter: ((exit: Exit.Exit<void, unknown>) => void) | undefined
}

/** A submitted batch: waits for its exit (again after an interruption, if need be). */
interface BatchHandle<E> {
  readonly await: Effect.Effect<void, E>
}

/**
 * The fiber the handlers run in: one per run of the loop, a daemon — so that interrupting the worker (SIGTERM)
 * does not take the handlers in flight down with it — with the handlers' services provided once. (A fiber
 * forked per batch and the services provided per batch cost about 25 KB of garbage per batch, a message on an
 * idle queue.) Interrupting `fiber` interrupts the batch running in it, whose exit is then that interruption.
 */
interface BatchRunner {
  readonly submit: <E>(effect: Effect.Effect<void, E>) => BatchHandle<E>
  readonly fiber: Fiber.RuntimeFiber<never>
}

const finishJob = (job: BatchJob, exit: Exit.Exit<void, unknown>) => {
  job.exit = exit
  const waiter = job.waiter
  job.waiter = undefined
  waiter?.(exit)
}

const makeBatchRunner = (registry: HandlersShape): Effect.Effect<BatchRunner> =>
  Effect.suspend(() => {
    const queued: Array<BatchJob> = []
    let idle: ((job: BatchJob) => void) | undefined
    let current: BatchJob | undefined
    const next = Effect.async<BatchJob>((resume) => {
      const job = queued.shift()
      if (job !== undefined) return resume(Effect.succeed(job))
      idle = (job) => {
        idle = undefined
        resume(Effect.succeed(job))
      }
      return Effect.sync(() => {
        idle = undefined
      })
    })
    const runOne = (job: BatchJob) => {
      current = job
      return Effect.map(Effect.exit(job.effect), (exit) => {
        current = undefined
        finishJob(job, exit)
      })
    }
    const loop = Effect.forever(Effect.flatMap(next, runOne)).pipe(
      Effect.interruptible,
      registry.provide,
      Effect.onExit((exit) =>
        Effect.sync(() => {
          if (current !== undefined) finishJob(current, Exit.asVoid(exit))
        })
      )
    )
    return Effect.map(Effect.forkDaemon(loop), (fiber): BatchRunner => ({
      fiber,
      submit: <E>(effect: Effect.Effect<void, E>): BatchHandle<E> => {
        const job: BatchJob = { effect, exit: undefined, waiter: undefined }
        if (idle !== undefined) idle(job)
        else queued.push(job)
        return {
          await: Effect.async<void, E>((resume) => {
            if (job.exit !== undefined) return resume(job.exit as Exit.Exit<void, E>)
            job.waiter = (exit) => resume(exit as Exit.Exit<void, E>)
            return Effect.sync(() => {
              job.waiter = undefined
            })
          })
        }
      }
    }))
  })

const consumeLoop = (state: RunState, wake: (maxWait: Duration.Duration) => Effect.Effect<void>) => {
  const { ledger, options, transport } = state
  // The next batch of a transport, claimed while the current one runs.
  const prefetched = new Map<string, Fiber.Fiber<ReadonlyArray<ReceivedMessage>, TransportError | UnknownTransportError>>()
  // The acks queued for the transport ride on its claim when the backend can do both in one round trip.
  const claim = (name: string, size: number) =>
    Effect.suspend(() => {
      const acks = transport.ackAndClaim === undefined ? [] : takeAcks(ledger, name)
      const claimed = acks.length === 0 ? transport.claim(name, size) : transport.ackAndClaim!(name, acks, size)
      // The bookkeeping of both outcomes in one step (this is on the way to the handler): the acks of a failed
      // ack-and-claim are queued again; the claimed messages are held (their leases renewed) from here on.
      return Effect.mapBoth(claimed, {
        onFailure: (error) => {
          if (acks.length > 0) requeueAcks(ledger, name, acks)
          return error
        },
        onSuccess: (rows) => {
          if (acks.length > 0) settled(ledger, name, acks)
          const held = heldOf(ledger, name)
          for (const row of rows) held.add(row.id)
          return rows
        }
      })
    }).pipe(Effect.uninterruptible)
  // Claims not handed to handlers (a limit, shutdown, a failure, a higher-priority transport) go back at once.
  const releaseAhead = (name: string) =>
    Effect.suspend(() => {
      const fiber = prefetched.get(name)
      if (fiber === undefined) return Effect.void
      prefetched.delete(name)
      return Fiber.await(fiber).pipe(
        Effect.flatMap((exit) =>
          Exit.isFailure(exit) ? Effect.void : giveBack(ledger, transport, name, exit.value.map((row) => row.id))
        )
      )
    })
  let inHand: { readonly name: string; readonly rows: ReadonlyArray<ReceivedMessage> } | undefined
  const releaseInHand = Effect.suspend(() => {
    if (inHand === undefined) return Effect.void
    const { name, rows } = inHand
    inHand = undefined
    return giveBack(ledger, transport, name, rows.map((row) => row.id))
  })
  const releaseAll = Effect.suspend(() =>
    Effect.zipRight(releaseInHand, Effect.forEach(Array.from(prefetched.keys()), releaseAhead, { discard: true }))
  )

  let runner: BatchRunner | undefined
  return Effect.gen(function*() {
    runner = yield* makeBatchRunner(state.registry)
    // Read synchronously between messages (the fiber's clock: a TestClock in tests).
    const clock = yield* Effect.clock
    const batchSize = Math.max(1, Math.floor(options.batchSize ?? 50))
    const sleepMs = Duration.toMillis(Duration.decode(options.sleep ?? "1 second"))
    const prefetch = options.prefetch ?? true

    while (true) {
      let found = false
      for (const name of options.transports) {
        const reason = limitReached(state, clock.unsafeCurrentTimeMillis())
        if (reason !== undefined) return yield* stop(state, reason)
        const { counts } = state
        const remaining = options.limit === undefined
          ? Infinity
          : options.limit - counts.handled - counts.retried - counts.failed
        const size = Math.min(batchSize, remaining)
        const ahead = prefetched.get(name)
        // Claimed rows are "in hand" until processBatch takes them: an interruption in between releases them.
        const batch = yield* Effect.uninterruptibleMask((restore) =>
          Effect.map(ahead === undefined ? claim(name, size) : Effect.flatten(restore(Fiber.await(ahead))), (rows) => {
            prefetched.delete(name)
            if (rows.length > 0) inHand = { name, rows }
            return rows
          })
        )
        if (batch.length === 0) continue
        found = true
        // Passed over for this higher-priority transport: their claims go back to other workers.
        for (const other of options.transports.slice(options.transports.indexOf(name) + 1)) {
          if (prefetched.has(other)) yield* releaseAhead(other)
        }
        // A full batch says there is more: claim the next one now, so the database works while the handlers do.
        const next = Math.min(batchSize, remaining - batch.length)
        if (prefetch && batch.length >= size && next > 0) {
          prefetched.set(name, yield* Effect.forkDaemon(claim(name, next)))
          // Fibers run on microtasks: without a turn of the event loop the claim would reach the socket only
          // after the whole batch ran. One turn sends it now, and the database works while the handlers do.
          yield* yieldToIo
        }
        yield* processBatch(state, runner, name, batch, () => {
          inHand = undefined
        })
        break
      }
      const now = clock.unsafeCurrentTimeMillis()
      const reason = limitReached(state, now)
      if (reason !== undefined) return yield* stop(state, reason)
      if (!found) {
        if (options.stopWhenEmpty === true) return yield* stop(state, "empty")
        // Idle: sleep until the poll interval, the next due message (delay, retry, expiring lease) or the
        // time limit — whichever comes first — unless a notification wakes the worker sooner.
        let waitMs = Math.min(sleepMs, state.startedAt + state.timeLimitMs - now)
        for (const name of options.transports) {
          const due = yield* transport.nextDue(name)
          if (Option.isSome(due)) waitMs = Math.min(waitMs, untilDue(due.value))
        }
        yield* wake(Duration.millis(Math.max(0, waitMs)))
      }
    }
  }).pipe(
    Effect.ensuring(Effect.zipRight(releaseAll, Effect.suspend(() => runner === undefined ? Effect.void : Fiber.interrupt(runner.fiber))))
  )
}

/**
 * How long to sleep for a message due in `ms`. Long timers fire late (about 2 % on a virtual machine), and a
 * machine woken after a long idle answers slowly (here a `SELECT 1` takes 8 ms after 300 ms idle, 15 ms after
 * 1 s, against 0.3 ms when busy): a long wait ends early, the claim finds nothing yet and says how long is left
 * (counted from its send, see PgTransport), and a short second wait — on a warm machine, with an accurate timer —
 * ends at the due time.
 */
const untilDue = (ms: number): number => (ms > 20 ? Math.floor(ms * 0.95) - 10 : Math.ceil(ms) + 1)

/** Resumes after one turn of the event loop: pending I/O callbacks and `process.nextTick`s run first. */
const yieldToIo: Effect.Effect<void> = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

/** Writes of outcomes survive a short database outage (a restart, killed connections). */
const storageRetry = Schedule.exponential("50 millis").pipe(
  Schedule.union(Schedule.spaced("2 seconds")),
  Schedule.upTo("1 minute")
)

const processBatch = (
  state: RunState,
  runner: BatchRunner,
  name: string,
  batch: ReadonlyArray<ReceivedMessage>,
  onStart: () => void
) =>
  Effect.suspend(() => {
    const { counts, ledger, options, registry, strategy, transport } = state
    const onEvent = options.onEvent
    const concurrency = Math.max(1, Math.floor(options.concurrency ?? 1))
    const held = heldOf(ledger, name)
    // Claimed but not handed to a handler: given back at once when the batch ends.
    const unstarted = new Set(batch.map((row) => row.id))

    const record = (row: ReceivedMessage, outcome: Outcome, durationMs: number) =>
      Effect.gen(function*() {
        switch (outcome._tag) {
          case "Release":
            unstarted.add(row.id)
            return
          case "Ack": {
            pushAck(ledger, name, row.id)
            counts.handled++
            if (onEvent) {
              yield* onEvent(WorkerEvent.Handled({ transport: name, messageId: row.messageId, type: outcome.type, durationMs }))
            }
            return
          }
          case "Retry": {
            yield* transport.retry(name, row.id, { delay: outcome.delay, headers: Headers.encode(outcome.headers) }).pipe(
              Effect.retry(storageRetry)
            )
            held.delete(row.id)
            counts.retried++
            yield* Effect.logWarning(
              `outbox worker: retry #${outcome.attempt} of ${outcome.type} ${row.messageId} in ${
                Duration.format(outcome.delay)
              }: ${outcome.error.tag}: ${outcome.error.message}`
            )
            if (onEvent) {
              yield* onEvent(WorkerEvent.Retried({
                transport: name,
                messageId: row.messageId,
                type: outcome.type,
                durationMs,
                attempt: outcome.attempt,
                delayMs: Duration.toMillis(outcome.delay),
                error: outcome.error
              }))
            }
            return
          }
          case "Fail": {
            yield* transport.fail(name, row.id, { headers: Headers.encode(outcome.headers), message: row }).pipe(
              Effect.retry(storageRetry)
            )
            held.delete(row.id)
            counts.failed++
            yield* Effect.logError(
              `outbox worker: ${outcome.type} ${row.messageId} moved to the failure queue: ${outcome.error.tag}: ${outcome.error.message}`
            )
            if (onEvent) {
              yield* onEvent(WorkerEvent.Failed({
                transport: name,
                messageId: row.messageId,
                type: outcome.type,
                durationMs,
                error: outcome.error
              }))
            }
            return
          }
        }
      })

    // After an interruption (shutdown) no further message of the batch starts.
    let draining = false
    const timed = state.timeLimitMs !== Infinity || onEvent !== undefined
    // Started and not finished: if the batch is interrupted (shutdown timeout), these go back at once.
    const running = new Set<string>()
    const run = (row: ReceivedMessage, now: number) => {
      if (draining || limitReached(state, now) !== undefined) return Effect.void
      unstarted.delete(row.id)
      running.add(row.id)
      return Effect.flatMap(handleOne(row, registry, strategy), (outcome) => {
        running.delete(row.id)
        if (outcome._tag === "Ack" && onEvent === undefined) {
          pushAck(ledger, name, row.id)
          counts.handled++
          return Effect.void
        }
        return timed
          ? Effect.flatMap(Clock.currentTimeMillis, (end) => Effect.uninterruptible(record(row, outcome, end - now)))
          : Effect.uninterruptible(record(row, outcome, 0))
      })
    }
    const one = (row: ReceivedMessage) =>
      timed ? Effect.flatMap(Clock.currentTimeMillis, (now) => run(row, now)) : Effect.suspend(() => run(row, 0))

    // The acks of the batch ride on the next claim, or the background writer writes them (now, when the
    // backend cannot ack with a claim); the messages claimed but not started (a limit, shutdown, a failure
    // mid-batch) go back at once.
    const settle = Effect.suspend(() => {
      if (!ledger.acksRideOnClaims) flushNow(ledger)
      for (const id of running) unstarted.add(id)
      return giveBack(ledger, transport, name, Array.from(unstarted))
    })

    // After an interruption, the handlers in flight get `shutdownTimeout` to finish (then the runner is interrupted).
    const drain = <E>(work: BatchHandle<E>, joined: Exit.Exit<void, E>) =>
      Effect.gen(function*() {
        draining = true
        yield* Effect.logInfo(
          `outbox worker: shutting down, waiting up to ${Duration.format(state.shutdownTimeout)} for the handlers in flight`
        )
        const timer = yield* Effect.forkDaemon(
          Effect.interruptible(Effect.sleep(state.shutdownTimeout)).pipe(Effect.zipRight(Fiber.interrupt(runner.fiber)))
        )
        const late = yield* Effect.exit(work.await)
        yield* Fiber.interrupt(timer)
        if (Exit.isFailure(late) && Cause.isInterruptedOnly(late.cause)) {
          yield* Effect.logWarning("outbox worker: handlers still running at the shutdown timeout were interrupted")
        }
        yield* settle
        return yield* joined
      })

    // The batch runs in the runner's daemon fiber, so that interrupting the worker (SIGTERM) does not take
    // the handlers in flight down with it: they get `shutdownTimeout` to finish and record their outcomes,
    // then they are interrupted and their messages released. (A racing Effect.timeout would be
    // interrupted with us: a daemon timer interrupts the runner instead.) No generator on this path: it is
    // the one between a claim's answer and the handler's start.
    return Effect.uninterruptibleMask((restore) => {
      onStart()
      ledger.batchStartedAt = Date.now()
      // A batch still running after `ackInterval`: its finished messages are acked by the writer, not at its end.
      // (A single message's ack is pushed when the batch ends: `pushAck` wakes the writer if it ran that long.)
      const longBatch = ledger.acksRideOnClaims && batch.length > 1
        ? setTimeout(() => wakeWriter(ledger), ackIntervalMs)
        : undefined
      const work = runner.submit(batch.length === 1 ? one(batch[0]!) : Effect.forEach(batch, one, { concurrency, discard: true }))
      return Effect.flatMap(Effect.exit(restore(work.await)), (joined) => {
        clearTimeout(longBatch)
        return Exit.isSuccess(joined) || !Cause.isInterruptedOnly(joined.cause)
          ? Effect.zipRight(settle, joined)
          : drain(work, joined)
      })
    })
  })
