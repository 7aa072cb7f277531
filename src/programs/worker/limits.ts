/**
 * The limits that stop a worker run (Symfony's `--limit`, `--failure-limit`, `--time-limit`, `--memory-limit`).
 *
 * @internal
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { StopReason, WorkerOptions } from "./model.js"

/** What a run has recorded so far. @internal */
export interface Counts {
  handled: number
  retried: number
  failed: number
}

/** A run's limits, resolved once. @internal */
export interface Limits {
  readonly options: WorkerOptions
  readonly counts: Counts
  readonly startedAt: number
  readonly timeLimitMs: number
}

/** Ends the loop with a reason (caught by `Worker.run`). @internal */
export class StopWorker extends Data.TaggedError("StopWorker")<{ readonly reason: StopReason }> {}

/** @internal */
export const make = (options: WorkerOptions, startedAt: number): Limits => ({
  options,
  counts: { handled: 0, retried: 0, failed: 0 },
  startedAt,
  timeLimitMs: options.timeLimit === undefined ? Infinity : Duration.toMillis(Duration.decode(options.timeLimit))
})

/** Messages the `limit` still allows (Infinity without one). @internal */
export const remaining = ({ counts, options }: Limits): number =>
  options.limit === undefined ? Infinity : options.limit - counts.handled - counts.retried - counts.failed

/** The limit that says to stop now, if any (checked between messages and between polls). @internal */
export const reached = (limits: Limits, now: number): StopReason | undefined => {
  const { counts, options } = limits
  if (options.limit !== undefined && counts.handled + counts.retried + counts.failed >= options.limit) return "limit"
  if (options.failureLimit !== undefined && counts.retried + counts.failed >= options.failureLimit) {
    return "failure-limit"
  }
  if (now - limits.startedAt >= limits.timeLimitMs) return "time-limit"
  if (options.memoryLimit !== undefined && process.memoryUsage.rss() >= options.memoryLimit) return "memory-limit"
  return undefined
}

const stopMessage: Record<StopReason, (limits: Limits) => string> = {
  "limit": (l) => `message limit of ${l.options.limit} reached`,
  "failure-limit": (l) => `failure limit of ${l.options.failureLimit} reached`,
  "time-limit": (l) => `time limit of ${Duration.format(Duration.millis(l.timeLimitMs))} reached`,
  "memory-limit": (l) => `memory limit of ${l.options.memoryLimit} bytes exceeded`,
  "empty": () => "no message ready"
}

/** Why a limit stopped the run, in words (the worker's stop line). @internal */
export const describe = (limits: Limits, reason: StopReason): string => stopMessage[reason](limits)

/** Ends the loop (the worker logs why when it has stopped). @internal */
export const stop = (reason: StopReason) => Effect.fail(new StopWorker({ reason }))
