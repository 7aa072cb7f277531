/**
 * The consume loop: transports by priority (the first is drained before the next is looked at), a claim per
 * batch with the previous batch's acks riding on it, the next batch claimed while a full one runs (prefetch),
 * and an idle wait until a hint, the next due message, the poll interval or the time limit.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import type { StorageNotReadyError, TransportError, UnknownTransportError } from "../../domain/Errors.js"
import type { Claimed } from "../../services/Transport.js"
import * as OutboxMetrics from "../OutboxMetrics.js"
import * as Acks from "./acks.js"
import * as Batch from "./batch.js"
import * as Limits from "./limits.js"
import * as Runner from "./runner.js"
import type { RunState } from "./state.js"

type Claim = Fiber.Fiber<Claimed, TransportError | UnknownTransportError | StorageNotReadyError>

/** Runs until a limit stops it (`StopWorker`) or storage fails (the caller restarts it). @internal */
export const run = (state: RunState) => {
  const { acks, limits, options, session, transport } = state
  // The next batch of a transport, claimed while the current one runs.
  const prefetched = new Map<string, Claim>()
  // Per transport, what its last empty claim said of the next due message.
  const due = new Map<string, Option.Option<Duration.Duration>>()

  const claim = (name: string, size: number) =>
    Effect.suspend(() => {
      const ids = Acks.takeForClaim(acks, name)
      // The clock is read only when something uses it: the health probes (progress), the round trip (metrics).
      const timed = state.metrics || state.health !== undefined
      const sentAt = timed ? state.clock.unsafeCurrentTimeMillis() : 0
      // The bookkeeping of both outcomes in one step (this is on the way to the handler): the acks of a failed
      // claim are queued again; the claimed messages are held (their leases renewed) from here on.
      return Effect.mapBoth(session.claim(name, size, ids), {
        onFailure: (error) => {
          if (ids.length > 0) Acks.requeue(acks, name, ids)
          return error
        },
        onSuccess: (claimed) => {
          if (ids.length > 0) Acks.settled(acks, name, ids)
          const answeredAt = timed ? state.clock.unsafeCurrentTimeMillis() : 0
          if (state.health !== undefined) {
            state.health.progressAt = answeredAt
            state.health.notReady = undefined
          }
          if (claimed.messages.length > 0) {
            Acks.hold(acks, name, claimed.messages)
            if (state.metrics) {
              const labels = OutboxMetrics.transportLabels(name)
              OutboxMetrics.claimDuration.unsafeUpdate((answeredAt - sentAt) / 1000, labels)
              OutboxMetrics.claimBatchSize.unsafeUpdate(claimed.messages.length, labels)
            }
          } else due.set(name, claimed.nextDue)
          return claimed
        }
      })
    }).pipe(Effect.uninterruptible)

  // Claims not handed to handlers (a limit, shutdown, a failure, a higher-priority transport) go back at once.
  const releaseAhead = (name: string) =>
    Effect.suspend(() => {
      const fiber = prefetched.get(name)
      if (fiber === undefined) return Effect.void
      prefetched.delete(name)
      return Effect.flatMap(Fiber.await(fiber), (exit) =>
        Exit.isFailure(exit)
          ? Effect.void
          : Batch.giveBack(acks, transport, name, exit.value.messages.map((row) => row.id)))
    })
  const forgetIfEmpty = (name: string) =>
    Effect.suspend(() => {
      const fiber = prefetched.get(name)
      if (fiber === undefined) return Effect.void
      return Effect.map(Fiber.await(fiber), (exit) => {
        if (Exit.isSuccess(exit) && exit.value.messages.length === 0) prefetched.delete(name)
      })
    })
  let inHand: { readonly name: string; readonly rows: ReadonlyArray<ReceivedMessage> } | undefined
  const releaseInHand = Effect.suspend(() => {
    if (inHand === undefined) return Effect.void
    const { name, rows } = inHand
    inHand = undefined
    return Batch.giveBack(acks, transport, name, rows.map((row) => row.id))
  })
  const releaseAll = Effect.suspend(() =>
    Effect.zipRight(releaseInHand, Effect.forEach(Array.from(prefetched.keys()), releaseAhead, { discard: true }))
  )

  let runner: Runner.BatchRunner | undefined
  return Effect.gen(function*() {
    runner = yield* Runner.make(state.registry)
    // Read synchronously between messages (the fiber's clock: a TestClock in tests).
    const clock = yield* Effect.clock
    const batchSize = Math.max(1, Math.floor(options.batchSize ?? 50))
    const sleepMs = Duration.toMillis(Duration.decode(options.sleep ?? "1 second"))
    const prefetch = options.prefetch ?? true

    while (true) {
      let found = false
      for (const name of session.transports) {
        const reason = Limits.reached(limits, clock.unsafeCurrentTimeMillis())
        if (reason !== undefined) return yield* Limits.stop(reason)
        const remaining = Limits.remaining(limits)
        const size = Math.min(batchSize, remaining)
        const ahead = prefetched.get(name)
        const writesBefore = acks.writesDone
        // Claimed rows are "in hand" until the batch takes them: an interruption in between releases them.
        const batch = yield* Effect.uninterruptibleMask((restore) =>
          Effect.map(
            ahead === undefined ? claim(name, size) : Effect.flatten(restore(Fiber.await(ahead))),
            (claimed) => {
              prefetched.delete(name)
              if (claimed.messages.length > 0) inHand = { name, rows: claimed.messages }
              return claimed.messages
            }
          )
        )
        if (batch.length === 0) {
          // It may have missed what an ack written meanwhile frees (an ordering key's next message): look again.
          if (ahead === undefined && Acks.wroteSince(acks, writesBefore)) {
            yield* Acks.awaitWrites(acks)
            found = true
            break
          }
          continue
        }
        found = true
        // Passed over for this higher-priority transport: their claims go back to other workers.
        for (const other of session.transports.slice(session.transports.indexOf(name) + 1)) {
          if (prefetched.has(other)) yield* releaseAhead(other)
        }
        // A full batch says there is more: claim the next one now, so the database works while the handlers do.
        const next = Math.min(batchSize, remaining - batch.length)
        if (prefetch && batch.length >= size && next > 0) {
          // A daemon: when the loop is interrupted its claim still completes, and `releaseAll` gives its rows back.
          prefetched.set(name, yield* Effect.forkDaemon(claim(name, next)))
          // The claim's fiber runs up to its first wait (the statement written to the connection) before the batch.
          yield* Effect.yieldNow()
        }
        yield* Batch.process(state, runner, name, batch, () => {
          inHand = undefined
        })
        if (state.health !== undefined) state.health.progressAt = clock.unsafeCurrentTimeMillis()
        // A claim made while the batch ran may have found none only because of it — an ordering key's next message
        // waits for the batch's ack, messages it gave back were not free yet: it says nothing of what is ready now.
        yield* forgetIfEmpty(name)
        break
      }
      const now = clock.unsafeCurrentTimeMillis()
      const reason = Limits.reached(limits, now)
      if (reason !== undefined) return yield* Limits.stop(reason)
      if (!found) {
        if (options.stopWhenEmpty === true) return yield* Limits.stop("empty")
        // Idle: until the poll interval, the next due message (delay, retry, expiring lease) or the time limit —
        // whichever comes first — unless a hint wakes the worker sooner.
        let waitMs = Math.min(sleepMs, limits.startedAt + limits.timeLimitMs - now)
        for (const name of session.transports) {
          const next = due.get(name)
          if (next !== undefined && Option.isSome(next)) waitMs = Math.min(waitMs, Duration.toMillis(next.value))
        }
        yield* session.wait(Duration.millis(Math.max(0, waitMs)))
        if (state.health !== undefined) state.health.progressAt = clock.unsafeCurrentTimeMillis()
      }
    }
  }).pipe(
    Effect.ensuring(
      Effect.zipRight(
        releaseAll,
        Effect.suspend(() => runner === undefined ? Effect.void : Fiber.interrupt(runner.fiber))
      )
    )
  )
}
