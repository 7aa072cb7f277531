/**
 * The worker: claims batches, runs the handlers, records each outcome.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import type * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as Tracer from "effect/Tracer"
import { OutboxConfigError, type StorageNotReadyError, type UnknownTransportError } from "../../domain/Errors.js"
import * as TraceContext from "../../internal/traceContext.js"
import { Handlers } from "../../services/Handlers.js"
import * as IdempotencyStore from "../../services/IdempotencyStore.js"
import { RetryStrategy } from "../../services/RetryStrategy.js"
import { Transport } from "../../services/Transport.js"
import { TransportAdmin } from "../../services/TransportAdmin.js"
import * as IdempotencyPurge from "../IdempotencyPurge.js"
import * as OutboxMetrics from "../OutboxMetrics.js"
import * as Acks from "./acks.js"
import * as Heartbeat from "./heartbeat.js"
import * as Limits from "./limits.js"
import * as Loop from "./loop.js"
import { WorkerEvent, type WorkerOptions, type WorkerSummary } from "./model.js"
import * as Options from "./options.js"
import type { RunState } from "./state.js"
import * as Watchdog from "./watchdog.js"

export {
  /** @since 0.1.0 */
  type StopReason,
  /** @since 0.1.0 */
  WorkerEvent,
  /** @since 0.1.0 */
  type WorkerOptions,
  /** @since 0.1.0 */
  type WorkerSummary
} from "./model.js"

/** The loop restarts after a storage failure: quickly at first, then every 10 seconds. */
const restartSchedule = Schedule.exponential("100 millis").pipe(
  Schedule.union(Schedule.spaced("10 seconds")),
  Schedule.resetAfter("1 minute")
)

/**
 * Runs the worker until a limit stops it (or forever). Storage failures — the database down, connections
 * killed — are logged and the loop restarts with exponential backoff (100 ms up to 10 s); writes of outcomes
 * are retried for `settleTimeout` (a minute), so a database restart loses and repeats nothing; a write that gives
 * up leaves its messages to their lease (they are no longer renewed) and they come back. Interrupted (SIGTERM/SIGINT
 * under `NodeRuntime.runMain`), it lets in-flight handlers finish within `shutdownTimeout`, records their
 * outcomes, and releases the messages it claimed but did not start. A handler that runs longer than its timeout
 * (`handlerTimeout`, 15 minutes by default, or the handler's own `timeout`) is interrupted and its message retried
 * with a `HandlerTimeoutError`.
 *
 * It fails — and does not spin — when an option is invalid (`OutboxConfigError`: `batchSize: NaN`, a negative
 * duration), a transport name is unknown (`UnknownTransportError`, at once) or the storage is not set up
 * (`StorageNotReadyError`: the outbox table, or a table a handler needs — an idempotency store's, a forward's
 * target —; the messages in hand go back untouched); a defect (a bug in a handler's hook, an unexpected throw)
 * ends it as a defect. Neither is ever reported as a clean stop.
 *
 * With an `IdempotencyStore` in context it also runs the store's retention job (`IdempotencyPurge`) unless
 * `idempotencyPurge: false`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const run = (
  options: WorkerOptions
): Effect.Effect<
  WorkerSummary,
  OutboxConfigError | UnknownTransportError | StorageNotReadyError,
  Transport | Handlers | RetryStrategy
> =>
  Effect.flatMap(TraceContext.installed, (tracer) =>
    tracer === undefined || options.tracing === false
      ? runWith(options, undefined)
      // The worker's own steps run with Effect's native tracer: an idle worker makes no span (see `tracing.ts`).
      : Effect.withTracer(
        Effect.zipRight(TraceContext.loadTraceState, runWith(options, tracer)),
        TraceContext.nativeTracer
      ))

const runWith = (options: WorkerOptions, tracer: Tracer.Tracer | undefined) =>
  Effect.gen(function*() {
    yield* Options.validate(options)
    const startedAt = yield* Clock.currentTimeMillis
    // A hook that dies is logged, never the end of the worker (an interruption still interrupts).
    const hook = options.onEvent
    const onEvent = hook === undefined ?
      undefined :
      (event: WorkerEvent) =>
        Effect.catchAllCause(Effect.suspend(() => hook(event)), (cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.failCause(cause)
            : Effect.logWarning(`outbox worker: the onEvent hook failed on ${event._tag}`, Cause.squash(cause)))
    const transport = yield* Transport
    const registry = yield* Handlers
    const strategy = yield* RetryStrategy
    const session = yield* transport.open(options.transports)
    const capabilities = session.transports.map((name) => Option.getOrUndefined(transport.capabilities(name)))
    // With one transport the next claim always follows the batch; with several it may be another transport's.
    const rideOnClaims = session.transports.length === 1 && capabilities[0]?.ackWithClaim === true
    const acks = yield* Acks.make(
      session.transports,
      rideOnClaims,
      Duration.decode(options.settleTimeout ?? "1 minute")
    )
    const clock = yield* Effect.clock
    const handlerTimeout = Duration.decode(options.handlerTimeout ?? "15 minutes")
    const state: RunState = {
      options: onEvent === undefined ? options : { ...options, onEvent },
      transport,
      session,
      registry,
      strategy,
      acks,
      limits: Limits.make(options, yield* Clock.currentTimeMillis),
      shutdownTimeout: Duration.decode(options.shutdownTimeout ?? "30 seconds"),
      clock,
      metrics: options.metrics !== false,
      tracing: tracer === undefined ? undefined : { tracer, clock },
      health: options.health?.track,
      watchdog: Watchdog.make(clock, handlerTimeout),
      countsDeliveries: new Map(session.transports.map((name, i) => [name, capabilities[i]?.countsDeliveries ?? true]))
    }
    if (state.metrics) {
      OutboxMetrics.initialize(
        session.transports,
        session.transports.flatMap((name) =>
          registry.types.filter((type) => registry.handlersFor(type, name).length > 0).map((type): [string, string] => [
            name,
            type
          ])
        )
      )
    }
    const store = yield* Effect.serviceOption(IdempotencyStore.IdempotencyStore)
    if (Option.isSome(store) && options.idempotencyPurge !== false) {
      yield* Effect.forkScoped(
        IdempotencyPurge.run(options.idempotencyPurge ?? {}).pipe(
          Effect.provideService(IdempotencyStore.IdempotencyStore, store.value)
        )
      )
    }
    if (options.sampleQueues !== undefined) {
      const admin = yield* Effect.serviceOption(TransportAdmin)
      if (Option.isNone(admin)) {
        return yield* new OutboxConfigError({
          message: "Worker option sampleQueues needs a TransportAdmin in context (PgTransport.layer provides one)"
        })
      }
      // The first sample before the first claim: the gauges exist from the worker's start.
      const withAdmin = Effect.provideService(TransportAdmin, admin.value)
      yield* withAdmin(OutboxMetrics.sampleQueuesLogged(session.transports))
      yield* Effect.forkScoped(withAdmin(OutboxMetrics.sampleQueuesLater(session.transports, options.sampleQueues)))
    }
    yield* Effect.forkScoped(Heartbeat.run(acks, transport, session.transports, state))
    yield* Effect.forkScoped(Watchdog.run(state.watchdog))
    const writer = yield* Effect.forkScoped(Acks.writer(acks, transport))
    if (state.health !== undefined) {
      // One handler may run for its whole timeout without the loop moving on.
      state.health.defaultStallAfterMs = Duration.toMillis(handlerTimeout) + 60_000
      state.health.stopped = undefined
      state.health.progressAt = clock.unsafeCurrentTimeMillis()
    }
    const started = startedEvent(options, transport, session.transports)
    yield* Effect.logInfo(startedLine(started))
    if (onEvent !== undefined) yield* onEvent(started)
    const stopped = (stoppedBy: StoppedEvent["stoppedBy"], failure?: Cause.Cause<unknown>) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const event = WorkerEvent.Stopped({ stoppedBy, ...state.limits.counts, durationMs: now - startedAt })
        const why = failure !== undefined
          ? `failure: ${describeFailure(failure)}`
          : stoppedBy === "interrupted" || stoppedBy === "failure"
          ? stoppedBy
          : Limits.describe(state.limits, stoppedBy)
        const line = stoppedLine(event, why)
        if (state.health !== undefined) state.health.stopped = `the worker stopped (${why})`
        return Effect.zipRight(
          failure === undefined ? Effect.logInfo(line) : Effect.logError(line),
          onEvent === undefined ? Effect.void : onEvent(event)
        )
      })
    // Last: the acks still queued are written (the leases renewed until they are), whatever ended the run.
    const finish = Effect.zipRight(
      Fiber.interrupt(writer),
      Acks.flush(acks, transport).pipe(Effect.catchAll((error) => Effect.logError("outbox worker: ack failed", error)))
    )
    const reason = yield* Loop.run(state).pipe(
      Effect.tapError((error) =>
        error._tag === "TransportError"
          ? Effect.zipRight(
            Effect.sync(() => {
              if (state.metrics) OutboxMetrics.loopRestarts.unsafeUpdate(1, [])
              if (state.health !== undefined) state.health.notReady = `storage failure: ${error.message}`
            }),
            Effect.logError("outbox worker: storage failure, restarting the loop", error)
          )
          : Effect.void
      ),
      Effect.retry({ schedule: restartSchedule, while: (error) => error._tag === "TransportError" }),
      // The restart schedule never ends: a storage failure cannot get past it.
      Effect.catchTag("TransportError", (error) => Effect.die(error)),
      Effect.catchTag("StopWorker", (stop) => Effect.succeed(stop.reason)),
      Effect.ensuring(finish),
      Effect.onExit((exit) =>
        Exit.isSuccess(exit)
          ? stopped(exit.value)
          : Cause.isInterruptedOnly(exit.cause)
          ? stopped("interrupted")
          : stopped("failure", exit.cause)
      )
    )
    return { ...state.limits.counts, stoppedBy: reason }
  }).pipe(Effect.scoped, Effect.annotateLogs({ worker: "effect-outbox" }))

type StartedEvent = Extract<WorkerEvent, { readonly _tag: "Started" }>
type StoppedEvent = Extract<WorkerEvent, { readonly _tag: "Stopped" }>

const startedEvent = (
  options: WorkerOptions,
  transport: Context.Tag.Service<Transport>,
  names: ReadonlyArray<string>
): StartedEvent => {
  const leaseMs: Record<string, number> = {}
  for (const name of names) {
    const lease = transport.lease(name)
    if (Option.isSome(lease)) leaseMs[name] = Duration.toMillis(lease.value)
  }
  return WorkerEvent.Started({
    transports: names,
    batchSize: Math.max(1, Math.floor(options.batchSize ?? 50)),
    concurrency: Math.max(1, Math.floor(options.concurrency ?? 1)),
    prefetch: options.prefetch ?? true,
    leaseMs,
    pid: process.pid
  })
}

/** One line a supervisor's log and a person can read: what this worker consumes, and how. */
const startedLine = (event: StartedEvent): string => {
  const leases = Object.entries(event.leaseMs).map(([name, ms]) => `${name} ${Duration.format(Duration.millis(ms))}`)
  return `outbox worker: started (pid ${event.pid}): transports ${
    event.transports.join(", ")
  }; batch ${event.batchSize}, ` +
    `concurrency ${event.concurrency}, prefetch ${event.prefetch ? "on" : "off"}` +
    (leases.length > 0 ? `; lease ${leases.join(", ")}` : "")
}

const stoppedLine = (event: StoppedEvent, why: string): string =>
  `outbox worker: stopped (${why}) after ${
    event.durationMs < 1000 ? `${Math.round(event.durationMs)} ms` : Duration.format(Duration.millis(event.durationMs))
  }: ` +
  `${event.handled} handled, ${event.retried} retried, ${event.failed} moved to the failure queue`

/** The error of a failed run, in one line. */
const describeFailure = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  return error instanceof Error ? error.message : String(error)
}
