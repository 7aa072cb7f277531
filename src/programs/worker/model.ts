/**
 * The worker's public model: options, events and the summary of a run.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Headers from "../../domain/Headers.js"
import type { WorkerHealth } from "../WorkerHealth.js"

/**
 * What the worker reports: its start, each message's outcome, and its stop.
 *
 * @since 0.1.0
 * @category models
 */
export type WorkerEvent = Data.TaggedEnum<{
  /** The worker opened its session and is about to claim. */
  Started: {
    readonly transports: ReadonlyArray<string>
    readonly batchSize: number
    readonly concurrency: number
    readonly prefetch: boolean
    /** The lease of each leased transport, in milliseconds. */
    readonly leaseMs: Readonly<Record<string, number>>
    readonly pid: number
  }
  /** Every handler succeeded; the message is acked. */
  Handled: {
    readonly transport: string
    readonly messageId: string
    readonly type: string
    readonly durationMs: number
  }
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
  /**
   * The worker stopped: a limit (`stoppedBy`), an interruption (a signal, the end of its scope), or a failure
   * that ends the run (`"failure"`: a storage that is not set up, a defect).
   */
  Stopped: {
    readonly stoppedBy: StopReason | "interrupted" | "failure"
    readonly handled: number
    readonly retried: number
    readonly failed: number
    readonly durationMs: number
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
  /**
   * How long a write that settles messages (an ack, a retry, a move to the failure queue, a release) is retried
   * through a storage outage (default 1 minute). A write that gives up stops holding its messages: their leases
   * are no longer renewed, and they come back after one lease, to this worker or another.
   */
  readonly settleTimeout?: Duration.DurationInput
  /**
   * How long one run of a handler may take (default 15 minutes; finite and greater than zero). Past it the
   * handler is interrupted and its message retried by the retry strategy with a `HandlerTimeoutError` (the
   * failure queue once the strategy gives up). A handler's own `timeout` option overrides it. The other
   * handlers in flight in the same batch (`concurrency` above 1) are interrupted with it and their messages
   * given back at once, without counting a delivery.
   */
  readonly handlerTimeout?: Duration.DurationInput
  /** Where the worker reports its health for probes (`WorkerHealth.make()`). */
  readonly health?: WorkerHealth
  /** Update the `OutboxMetrics` counters and histograms (default `true`). */
  readonly metrics?: boolean
  /**
   * Handle each message in a `process` span, a child of the span that dispatched it (default `true`; it applies
   * only when a tracer is installed, e.g. `@effect/opentelemetry`'s — with Effect's default tracer the worker
   * makes no span). The worker's own storage calls are never traced: an idle worker makes no span.
   */
  readonly tracing?: boolean
  /**
   * Sample the queue gauges of `OutboxMetrics` (counts by state, oldest ready age) of the consumed transports at
   * this interval, through the `TransportAdmin` in context (off by default: one process of a deployment is
   * enough — each sample is one query per transport).
   */
  readonly sampleQueues?: Duration.DurationInput
  /**
   * Called when the worker starts, after each outcome is recorded, and when it stops. A hook that dies (throws)
   * is logged and the worker goes on.
   */
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
