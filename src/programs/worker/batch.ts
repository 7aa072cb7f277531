/**
 * One claimed batch: its messages handled in the runner (at the configured concurrency) — its redelivered ones
 * after the others, one at a time, each start recorded first (see `Transport.start`) — each outcome recorded, the
 * unstarted messages given back; on shutdown, the handlers in flight get `shutdownTimeout`.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import { StorageNotReadyError, type TransportError, type UnknownTransportError } from "../../domain/Errors.js"
import type * as Outcome from "../../domain/Outcome.js"
import type { TransportShape } from "../../services/Transport.js"
import * as OutboxMetrics from "../OutboxMetrics.js"
import * as Acks from "./acks.js"
import * as Grouped from "./grouped.js"
import * as Handle from "./handle.js"
import * as Limits from "./limits.js"
import * as MessageLogs from "./messageLogs.js"
import { WorkerEvent } from "./model.js"
import * as Pool from "./pool.js"
import type { BatchHandle, BatchRunner } from "./runner.js"
import type { RunState } from "./state.js"
import * as Watchdog from "./watchdog.js"

/**
 * Gives claimed messages that no handler started back at once (their claim does not count as a delivery); a
 * storage failure that outlasts a brief retry leaves them to their lease.
 *
 * @internal
 */
export const giveBack = (acks: Acks.Acks, transport: TransportShape, name: string, ids: ReadonlyArray<string>) =>
  ids.length === 0 ? Effect.void : Acks.settle(acks, name, ids, transport.release(name, ids), acks.releaseRetry).pipe(
    Effect.catchAll((error) =>
      Effect.logWarning("outbox worker: release failed, the messages come back after their lease", error)
    )
  )

const { finished, givenBack, running, timedOut } = Watchdog

/**
 * A write whose target is not set up (a failure transport on another backend, whose send reports it as the cause of
 * a `TransportError`): not retried, the message given back, the worker stopped with the `StorageNotReadyError`.
 */
const notReadyTarget = (
  acks: Acks.Acks,
  transport: TransportShape,
  row: ReceivedMessage
) =>
(
  error: TransportError | UnknownTransportError
): Effect.Effect<never, TransportError | UnknownTransportError | StorageNotReadyError> =>
  error._tag === "TransportError" && error.cause instanceof StorageNotReadyError
    ? Effect.zipRight(giveBack(acks, transport, row.transport, [row.id]), Effect.fail(error.cause))
    : Effect.fail(error)

/** Writes a retry or a move to the failure queue, then logs it and reports it. */
const write = (
  state: RunState,
  row: ReceivedMessage,
  outcome: Extract<Outcome.Outcome, { _tag: "Retry" | "Fail" }>,
  durationMs: number
) => {
  const { acks, limits, options, transport } = state
  const retry = outcome._tag === "Retry"
  const stored = retry
    ? transport.retry(row, { delay: outcome.delay, headers: outcome.headers })
    : transport.fail(row, outcome.headers)
  return Acks.settle(acks, row.transport, [row.id], Effect.catchAll(stored, notReadyTarget(acks, transport, row))).pipe(
    Effect.zipRight(Effect.suspend(() => {
      const error = `${outcome.error.tag}: ${outcome.error.message}`
      if (state.metrics) {
        ;(retry ? OutboxMetrics.retried : OutboxMetrics.failed).unsafeUpdate(
          1,
          OutboxMetrics.messageLabels(row.transport, outcome.type)
        )
      }
      if (retry) {
        limits.counts.retried++
        return Effect.logWarning(
          `outbox worker: retry #${outcome.attempt} of ${outcome.type} ${row.messageId} in ${
            Duration.format(outcome.delay)
          }: ${error}`
        )
      }
      limits.counts.failed++
      return Effect.logError(`outbox worker: ${outcome.type} ${row.messageId} moved to the failure queue: ${error}`)
    })),
    Effect.zipRight(
      options.onEvent === undefined ? Effect.void : options.onEvent(
        retry
          ? WorkerEvent.Retried({
            transport: row.transport,
            messageId: row.messageId,
            type: outcome.type,
            durationMs,
            attempt: outcome.attempt,
            delayMs: Duration.toMillis(outcome.delay),
            error: outcome.error
          })
          : WorkerEvent.Failed({
            transport: row.transport,
            messageId: row.messageId,
            type: outcome.type,
            durationMs,
            error: outcome.error
          })
      )
    )
  )
}

/**
 * Runs a batch in the runner and records each outcome; `onStart` is called once the batch is the runner's (the
 * loop no longer holds its rows). Succeeds with the number of its messages given back.
 *
 * @internal
 */
export const process = (
  state: RunState,
  runner: BatchRunner,
  name: string,
  batch: ReadonlyArray<ReceivedMessage>,
  onStart: () => void
) =>
  Effect.suspend(() => {
    // The clock is read synchronously: the fiber's (a TestClock in tests), captured when the worker started.
    const { acks, clock, limits, metrics, options, registry, strategy, transport } = state
    const onEvent = options.onEvent
    const concurrency = Math.max(1, Math.floor(options.concurrency ?? 1))
    const countsDeliveries = state.countsDeliveries.get(name) ?? true
    // Per message of the batch, by index: not started, running or given back (all three go back at once when the
    // batch ends: unstarted after a limit, a shutdown or a failure mid-batch; running after a shutdown timeout;
    // released by an interrupted handler), timed out (recorded as a failure) or finished. An array, not sets of
    // ids: nothing allocated per message.
    // Side by side, each message's handlers run in a fiber of their own: a timeout stops that message alone.
    const isolated = concurrency > 1 && batch.length > 1
    const watched = Watchdog.watch(state.watchdog, batch.length, runner.abandon, isolated)
    const progress = watched.progress
    // After an interruption (shutdown) no further message of the batch starts.
    let draining = false
    const health = state.health
    const tracing = state.tracing
    const timed = limits.timeLimitMs !== Infinity || onEvent !== undefined || metrics || health !== undefined
    // Set before the messages run when batch handlers had messages of this batch to share a call (grouped.ts).
    let prepared: Array<Handle.Prepared | undefined> | undefined
    const transportLabels = metrics ? OutboxMetrics.transportLabels(name) : []

    const record = (
      row: ReceivedMessage,
      index: number,
      outcome: Outcome.Outcome,
      durationMs: number
    ): Effect.Effect<void, TransportError | UnknownTransportError | StorageNotReadyError> => {
      switch (outcome._tag) {
        case "Release":
          progress[index] = givenBack
          return Effect.void
        case "Ack":
          Acks.push(acks, name, row.id)
          limits.counts.handled++
          return onEvent === undefined ? Effect.void : onEvent(WorkerEvent.Handled({
            transport: name,
            messageId: row.messageId,
            type: outcome.type,
            durationMs
          }))
        default:
          // Outcome writes end in a storage failure only after `settleTimeout` of retries: the loop restarts then.
          return write(state, row, outcome, durationMs)
      }
    }

    const run = (row: ReceivedMessage, index: number, now: number, logs: MessageLogs.Slot | undefined) => {
      if (draining || Limits.reached(limits, now) !== undefined) return Effect.void
      progress[index] = running
      if (metrics) OutboxMetrics.messageAge.unsafeUpdate((now - row.createdAt.getTime()) / 1000, transportLabels)
      return Effect.flatMap(
        Handle.handle(row, registry, strategy, countsDeliveries, watched, index, logs, tracing, prepared?.[index]),
        (outcome) => {
          // Timed out or given back meanwhile (a handler that ignored its interruption): the batch has recorded it.
          if (progress[index] !== running) return Effect.void
          progress[index] = finished
          const end = timed ? clock.unsafeCurrentTimeMillis() : 0
          const durationMs = end - now
          if (health !== undefined) health.progressAt = end
          if (metrics && outcome._tag !== "Release") {
            const labels = OutboxMetrics.messageLabels(name, outcome.type)
            OutboxMetrics.handlerDuration.unsafeUpdate(durationMs / 1000, labels)
            if (outcome._tag === "Ack") OutboxMetrics.handled.unsafeUpdate(1, labels)
          }
          // hot path: an ack without an event hook needs no effect at all
          if (outcome._tag === "Ack" && onEvent === undefined) {
            Acks.push(acks, name, row.id)
            limits.counts.handled++
            return Effect.void
          }
          return Effect.uninterruptible(record(row, index, outcome, durationMs))
        }
      )
    }
    // hot path: the one operation per message that starts it also finds the fiber's log slot (see messageLogs.ts)
    const one = (row: ReceivedMessage, index: number) =>
      Effect.withFiberRuntime<void, TransportError | UnknownTransportError | StorageNotReadyError>((fiber) =>
        run(row, index, timed ? clock.unsafeCurrentTimeMillis() : 0, MessageLogs.slotOf(fiber))
      )

    // A redelivered message (its last lease ended with no outcome: it may have killed its worker) runs alone, its
    // start recorded first, so that a crash while it runs is charged to it and to no other. What the batch finished
    // is written before it starts: a crash must not bring those back as if they had run alone.
    const alone = (row: ReceivedMessage, index: number) =>
      Effect.suspend(() => {
        if (draining || Limits.reached(limits, clock.unsafeCurrentTimeMillis()) !== undefined) return Effect.void
        const started = transport.start(row).pipe(
          Effect.retry({ schedule: acks.writeRetry, while: (error) => error._tag === "TransportError" })
        )
        return Effect.flatMap(Effect.zipRight(Acks.flush(acks, transport), started), (ours) => {
          if (ours) return one(row, index)
          // Its lease ran out before its turn (another worker may hold it now): nothing to record, nothing to give back.
          progress[index] = finished
          Acks.settled(acks, name, [row.id])
          return Effect.logWarning(
            `outbox worker: ${row.messageId} not started: its lease ran out while it waited for its turn`
          )
        })
      })
    // Messages of the batch (all, or those `order` lists, in its order), `n` at a time: side by side each in a fiber
    // of its own (see `Pool`), where the watchdog stops a message alone.
    const inTurn = (
      run: (
        row: ReceivedMessage,
        index: number
      ) => Effect.Effect<void, TransportError | UnknownTransportError | StorageNotReadyError>,
      order?: ReadonlyArray<number>,
      n = concurrency
    ) =>
      isolated
        ? Pool.run(
          order?.length ?? batch.length,
          n,
          (i) => run(batch[i]!, i),
          watched.stops!,
          (i) => expire(batch[i]!, i),
          order
        )
        : order !== undefined
        ? Effect.forEach(order, (i) => run(batch[i]!, i), { discard: true })
        : batch.length === 1
        ? run(batch[0]!, 0)
        : Effect.forEach(batch, run, { discard: true })
    const suspects = countsDeliveries ? suspectsOf(batch) : undefined

    // The acks of the batch ride on the next claim or go to the writer; what was claimed but not started (a
    // limit, shutdown, a failure mid-batch) goes back at once.
    const settle = Effect.suspend(() => {
      Watchdog.unwatch(watched)
      Acks.flushNow(acks)
      const back: Array<string> = []
      for (let i = 0; i < batch.length; i++) {
        if (progress[i] !== finished) {
          progress[i] = givenBack
          back.push(batch[i]!.id)
        }
      }
      return Effect.as(giveBack(acks, transport, name, back), back.length)
    })

    // A message past its handler's deadline: recorded as a failure with `HandlerTimeoutError`.
    const expire = (row: ReceivedMessage, i: number) => {
      progress[i] = finished
      const expired = Watchdog.timedOutAt(watched, i)
      return Effect.zipRight(
        Effect.logWarning(
          `outbox worker: handler ${expired.handler.name} of ${row.messageId} did not finish within ${
            Duration.format(Duration.millis(expired.timeoutMs))
          }, interrupted`
        ),
        Effect.flatMap(
          Effect.zip(Handle.timedOut(row, registry, expired, strategy), Clock.currentTimeMillis),
          ([outcome, end]) => Effect.uninterruptible(record(row, i, outcome, end - expired.startedAt))
        )
      )
    }

    // The watchdog abandoned the batch (one message at a time): the timed-out message is recorded, the rest goes
    // back.
    const timeouts = () =>
      Effect.flatMap(
        Effect.exit(Effect.suspend(() => {
          const indices: Array<number> = []
          for (let i = 0; i < batch.length; i++) {
            if (progress[i] === timedOut) indices.push(i)
          }
          return Effect.forEach(indices, (i) => expire(batch[i]!, i), { discard: true })
        })),
        (recorded) => Effect.zipLeft(settle, recorded)
      )

    // After an interruption, the handlers in flight get `shutdownTimeout` to finish (then the runner is
    // interrupted: a racing Effect.timeout would be interrupted with us).
    const drain = <E>(work: BatchHandle<E>, joined: Exit.Exit<void, E>) =>
      Effect.gen(function*() {
        draining = true
        yield* Effect.logInfo(
          `outbox worker: shutting down, waiting up to ${
            Duration.format(state.shutdownTimeout)
          } for the handlers in flight`
        )
        const timer = yield* Effect.forkDaemon(
          Effect.interruptible(Effect.sleep(state.shutdownTimeout)).pipe(Effect.zipRight(Fiber.interrupt(runner.fiber)))
        )
        const late = yield* Effect.exit(work.await)
        yield* Fiber.interrupt(timer)
        if (Exit.isFailure(late) && Cause.isInterruptedOnly(late.cause)) {
          yield* Effect.logWarning("outbox worker: handlers still running at the shutdown timeout were interrupted")
        }
        const back = yield* settle
        yield* joined
        return back
      })

    // hot path: no generator between a claim's answer and the handler's start (see BENCHMARKS.md)
    return Effect.uninterruptibleMask((restore) => {
      onStart()
      const stopTimer = Acks.batchStarted(acks, batch.length)
      const handling = suspects === undefined
        ? inTurn(one)
        : inTurn((row, index) => row.redelivered === true ? Effect.void : one(row, index)).pipe(
          Effect.zipRight(inTurn(alone, suspects, 1)),
          // The last one's ack too: the next batch's first message must not bring it back.
          Effect.zipRight(Effect.suspend(() => Acks.flush(acks, transport)))
        )
      const work = runner.submit(
        registry.batched && tracing === undefined
          ? Effect.flatMap(
            Grouped.prepare(batch, registry, Limits.remaining(limits), state.watchdog.defaultTimeoutMs),
            (ready) => {
              prepared = ready
              return handling
            }
          )
          : handling
      )
      return Effect.flatMap(Effect.exit(restore(work.await)), (joined) => {
        stopTimer()
        return Exit.isSuccess(joined) || !Cause.isInterruptedOnly(joined.cause)
          ? Effect.zipLeft(settle, joined)
          : watched.timedOut && work.done()
          ? timeouts()
          : drain(work, joined)
      })
    })
  })

/**
 * The indices of a batch's redelivered messages, those charged with fewer crashes first (a known crasher runs after
 * the others), or `undefined` when there is none.
 */
const suspectsOf = (batch: ReadonlyArray<ReceivedMessage>): Array<number> | undefined => {
  let suspects: Array<number> | undefined
  for (let i = 0; i < batch.length; i++) {
    if (batch[i]!.redelivered === true) (suspects ??= []).push(i)
  }
  return suspects?.sort((a, b) => (batch[a]!.crashes ?? 0) - (batch[b]!.crashes ?? 0) || a - b)
}
