/**
 * What every part of a worker run reads: its options, services, ack sink and limits.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import type * as Duration from "effect/Duration"
import type { HandlersShape } from "../../services/Handlers.js"
import type { RetryStrategyShape } from "../../services/RetryStrategy.js"
import type { Session, TransportShape } from "../../services/Transport.js"
import type { Tracker } from "../WorkerHealth.js"
import type { Acks } from "./acks.js"
import type { Limits } from "./limits.js"
import type { WorkerOptions } from "./model.js"
import type { Tracing } from "./tracing.js"
import type { Watchdog } from "./watchdog.js"

/** @internal */
export interface RunState {
  readonly options: WorkerOptions
  readonly transport: TransportShape
  readonly session: Session
  readonly registry: HandlersShape
  readonly strategy: RetryStrategyShape
  readonly acks: Acks
  readonly limits: Limits
  readonly shutdownTimeout: Duration.Duration
  /** The fiber's clock (a TestClock in tests), read synchronously on the hot path. */
  readonly clock: Clock.Clock
  /** Where the worker reports progress and readiness, when asked to. */
  readonly health: Tracker | undefined
  /** How each message's `process` span is made, when a tracer is installed (see `tracing.ts`). */
  readonly tracing: Tracing | undefined
  /** Whether the worker updates `OutboxMetrics`. */
  readonly metrics: boolean
  /** Enforces the handlers' timeouts. */
  readonly watchdog: Watchdog
  /** Per transport: whether claims count deliveries (poison detection applies). */
  readonly countsDeliveries: ReadonlyMap<string, boolean>
}
