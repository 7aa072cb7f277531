/**
 * The ack sink: what the worker holds per transport (claimed, not yet settled in storage — their leases are
 * renewed) and the handled messages whose ack is not written yet. Acks ride on the next claim when the backend
 * can ack with a claim; what waited `ackInterval` without one — a long batch, an idle queue, a backend without
 * `ackWithClaim` — is written by a background writer, never on the way of a handler. Every time here is the
 * fiber's `Clock` (a `TestClock` in tests): no timer of its own.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type { TransportShape } from "../../services/Transport.js"

/** How often finished messages are acked while the rest of a batch runs. */
const ackIntervalMs = 25

/**
 * Writes of outcomes survive a short database outage (a restart, killed connections): retried quickly at first,
 * then every 2 seconds, for `settleTimeout`. @internal
 */
export const storageRetry = (settleTimeout: Duration.Duration) =>
  Schedule.exponential("50 millis").pipe(
    Schedule.union(Schedule.spaced("2 seconds")),
    Schedule.upTo(settleTimeout)
  )

/**
 * Runs a write that settles `ids` in storage, retried through an outage for the run's `settleTimeout`. Whatever
 * its end, the ids are no longer held: written, they are settled; given up, they must not keep their leases
 * renewed, so they come back after one lease — to another worker, or to this one.
 *
 * @internal
 */
export const settle = <A, E extends { readonly _tag: string }, R>(
  acks: Acks,
  name: string,
  ids: ReadonlyArray<string>,
  write: Effect.Effect<A, E, R>,
  schedule: Schedule.Schedule<unknown> = acks.writeRetry
): Effect.Effect<A, E, R> =>
  write.pipe(
    Effect.retry({ schedule, while: (error) => error._tag === "TransportError" }),
    Effect.ensuring(Effect.sync(() => settled(acks, name, ids)))
  )

/** @internal */
export interface Acks {
  /** Per transport: claimed messages not yet settled in storage (their leases are renewed). */
  readonly held: Map<string, Set<string>>
  /** Per transport: handled messages whose ack is not written yet. */
  readonly queued: Map<string, Array<string>>
  /** When the oldest unwritten ack of a transport was queued (`clock` milliseconds). */
  readonly since: Map<string, number>
  /** Something to write: wakes the writer. */
  readonly pending: Queue.Queue<void>
  /** Write every queued ack now (set by `flushNow`, read by the writer). */
  urgent: boolean
  /** Resumes the writer while it waits out the ack interval (`flushNow`, when acks do not ride on claims). */
  interruptWait: (() => void) | undefined
  /** Acks ride on the next claim: the writer is only needed for long batches and idle queues. */
  readonly rideOnClaims: boolean
  /** When the running batch started (`clock` milliseconds). */
  batchStartedAt: number
  /** A batch of several messages runs: the writer wakes once it has run `ackInterval`. */
  batchRunning: boolean
  /** The worker's clock: every time of the sink is read from it. */
  readonly clock: Clock.Clock
  /** The writer was signalled and has not gone back to waiting. */
  writerAwake: boolean
  /** How writes that settle messages are retried through a storage outage. */
  readonly writeRetry: Schedule.Schedule<unknown>
  /** Background ack writes finished so far, and running now (each holds `writeLock` while it runs). */
  writesDone: number
  writing: number
  readonly writeLock: Effect.Semaphore
  /**
   * How a release is retried: briefly. A release only spares its messages the wait for their lease, and it runs
   * on the way out (a limit, a shutdown): an outage must not hold the worker there for `settleTimeout`.
   */
  readonly releaseRetry: Schedule.Schedule<unknown>
}

/** @internal */
export const make = (
  names: ReadonlyArray<string>,
  rideOnClaims: boolean,
  settleTimeout: Duration.Duration
): Effect.Effect<Acks> =>
  Effect.map(
    Effect.all([Queue.sliding<void>(1), Effect.clock, Effect.makeSemaphore(1)]),
    ([pending, clock, writeLock]) => ({
      held: new Map(names.map((name) => [name, new Set<string>()])),
      queued: new Map(names.map((name) => [name, []])),
      since: new Map(),
      pending,
      urgent: false,
      interruptWait: undefined,
      rideOnClaims,
      batchStartedAt: 0,
      batchRunning: false,
      clock,
      writerAwake: false,
      writeRetry: storageRetry(settleTimeout),
      releaseRetry: storageRetry(Duration.min(settleTimeout, maxReleaseRetry)),
      writesDone: 0,
      writing: 0,
      writeLock
    })
  )

/** The longest a release is retried. */
const maxReleaseRetry = Duration.seconds(2)

/** The claimed, unsettled messages of a transport. @internal */
export const heldOf = (acks: Acks, name: string): Set<string> => {
  let held = acks.held.get(name)
  if (held === undefined) {
    held = new Set()
    acks.held.set(name, held)
  }
  return held
}

/** Claimed by this worker: held (their leases renewed) until settled. @internal */
export const hold = (acks: Acks, name: string, messages: ReadonlyArray<{ readonly id: string }>): void => {
  const held = heldOf(acks, name)
  for (const message of messages) held.add(message.id)
}

/** Settled in storage (acked, retried, failed or released): no longer held. @internal */
export const settled = (acks: Acks, name: string, ids: Iterable<string>): void => {
  const held = heldOf(acks, name)
  for (const id of ids) held.delete(id)
}

/** Queues the ack of a handled message. @internal */
export const push = (acks: Acks, name: string, id: string): void => {
  let queued = acks.queued.get(name)
  if (queued === undefined) {
    queued = []
    acks.queued.set(name, queued)
  }
  queued.push(id)
  const now = acks.clock.unsafeCurrentTimeMillis()
  if (queued.length === 1) acks.since.set(name, now)
  if (!acks.rideOnClaims || now - acks.batchStartedAt >= ackIntervalMs) wakeWriter(acks)
}

/** Takes the queued acks of a transport (to send them along with its claim). @internal */
export const takeForClaim = (acks: Acks, name: string): Array<string> => {
  if (!acks.rideOnClaims) return []
  return take(acks, name)
}

const take = (acks: Acks, name: string): Array<string> => {
  const queued = acks.queued.get(name)
  return queued === undefined || queued.length === 0 ? [] : queued.splice(0, queued.length)
}

/** Acks not written (their claim failed): queued again, so the writer retries them. @internal */
export const requeue = (acks: Acks, name: string, ids: ReadonlyArray<string>): void => {
  for (const id of ids) push(acks, name, id)
}

/**
 * A batch begins: its finished messages are written by the writer once it has run `ackInterval` (the writer
 * waits for that on the clock). Returns what ends it. @internal
 */
export const batchStarted = (acks: Acks, size: number): () => void => {
  acks.batchStartedAt = acks.clock.unsafeCurrentTimeMillis()
  if (!acks.rideOnClaims || size <= 1) return noop
  acks.batchRunning = true
  wakeWriter(acks)
  return () => {
    acks.batchRunning = false
    // The writer, if it waits for this batch's interval, finds the batch over when it wakes: its acks ride on the
    // next claim.
  }
}

const noop = () => {}

/** Asks the writer to write every queued ack now (no claim will carry them). @internal */
export const flushNow = (acks: Acks): void => {
  if (acks.rideOnClaims) return
  acks.urgent = true
  acks.interruptWait?.()
}

const wakeWriter = (acks: Acks): void => {
  if (acks.writerAwake) return
  acks.writerAwake = true
  acks.pending.unsafeOffer(undefined)
}

/** Woken early by `interruptWait` (`flushNow`). */
const wokenEarly = (acks: Acks): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    acks.interruptWait = () => {
      acks.interruptWait = undefined
      resume(Effect.void)
    }
    return Effect.sync(() => {
      acks.interruptWait = undefined
    })
  })

/**
 * Waits `ms` on the clock; without acks riding on claims, less when `flushNow` wakes it. With them nothing needs
 * waking (`flushNow` does nothing) and a plain sleep is what a batch costs: racing a wake-up would fork two fibers
 * for every batch.
 */
const waitOrWoken = (acks: Acks, ms: number): Effect.Effect<void> =>
  acks.rideOnClaims
    ? acks.clock.sleep(Duration.millis(ms))
    : acks.urgent
    ? Effect.void
    : Effect.raceFirst(acks.clock.sleep(Duration.millis(ms)), wokenEarly(acks))

/**
 * Writes the queued acks (of every transport, or of those whose oldest ack waited the interval), one statement
 * per transport. Uninterruptible: ids taken from the queue are written, or fail to a storage outage (the
 * messages are no longer held and come back after their lease) — never dropped by an interruption.
 *
 * @internal
 */
export const flush = (acks: Acks, transport: TransportShape, dueOnly = false) =>
  Effect.forEach(Array.from(acks.queued.keys()), (name) => {
    if (dueOnly && acks.clock.unsafeCurrentTimeMillis() - (acks.since.get(name) ?? 0) < ackIntervalMs) {
      return Effect.void
    }
    const ids = take(acks, name)
    if (ids.length === 0) return Effect.void
    acks.writing++
    return acks.writeLock.withPermits(1)(settle(acks, name, ids, transport.ack(name, ids))).pipe(
      Effect.ensuring(Effect.sync(() => {
        acks.writing--
        acks.writesDone++
      }))
    )
  }, { discard: true }).pipe(Effect.uninterruptible)

/**
 * Whether an ack was written, or is being written, since `writesDone` read `before`: a claim that found nothing
 * meanwhile may have missed what the ack frees — an ordering key's next message becomes claimable only when the
 * ack of the one before commits, and a claim that meets the key's row locked by the ack skips it.
 *
 * @internal
 */
export const wroteSince = (acks: Acks, before: number): boolean => acks.writing > 0 || acks.writesDone !== before

/** Waits for the ack write running now, if any, to end. @internal */
export const awaitWrites = (acks: Acks): Effect.Effect<void> => acks.writeLock.withPermits(1)(Effect.void)

/** When the oldest queued ack was queued, if any is. */
const oldestQueued = (acks: Acks): number | undefined => {
  let oldest: number | undefined
  for (const [name, queued] of acks.queued) {
    if (queued.length === 0) continue
    const since = acks.since.get(name) ?? 0
    if (oldest === undefined || since < oldest) oldest = since
  }
  return oldest
}

/**
 * The background ack writer. Awake, it writes every queued ack once it has waited `ackInterval`, and wakes for a
 * running batch once the batch has run that long (the acks of a shorter batch ride on the next claim).
 *
 * @internal
 */
export const writer = (acks: Acks, transport: TransportShape) =>
  Effect.gen(function*() {
    while (true) {
      acks.writerAwake = false
      yield* Queue.take(acks.pending)
      while (true) {
        const oldest = oldestQueued(acks)
        const batchDue = acks.batchRunning ? acks.batchStartedAt + ackIntervalMs : undefined
        if (oldest === undefined && batchDue === undefined) break
        const due = Math.min(oldest === undefined ? Infinity : oldest + ackIntervalMs, batchDue ?? Infinity)
        const wait = due - acks.clock.unsafeCurrentTimeMillis()
        if (wait > 0) {
          yield* waitOrWoken(acks, wait)
          // Look again: the batch may have ended, its acks ridden on the next claim, another batch begun.
          if (!acks.urgent) continue
        }
        const urgent = acks.urgent
        acks.urgent = false
        yield* flush(acks, transport, !urgent).pipe(
          Effect.catchAll((error) =>
            Effect.logWarning("outbox worker: ack failed, the messages come back after their lease", error)
          )
        )
        // The running batch has run its interval: from here on its acks wake the writer as they come (`push`).
        if (acks.batchRunning && acks.batchStartedAt + ackIntervalMs <= acks.clock.unsafeCurrentTimeMillis()) {
          acks.batchRunning = false
        }
      }
    }
  }).pipe(Effect.interruptible)

/** The interval, for the doc of the worker's options. @internal */
export const ackInterval = Duration.millis(ackIntervalMs)
