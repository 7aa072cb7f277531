/**
 * Handler timeouts: one watchdog fiber per worker, not a timer per message. Each handler run writes its deadline
 * into the slot of its message in the running batch (`arm`: a clock read and a few array writes); the watchdog
 * sleeps on the fiber's `Clock` until the earliest deadline and, when one has passed, marks the message timed out
 * and stops it. Messages that run side by side (`concurrency` > 1) each run in a fiber of their own (`pool.ts`):
 * that fiber alone is interrupted and the timeout recorded at once, while the other messages of the batch run on —
 * a slow message does not cost its neighbours their work. One message at a time, the batch's runner is abandoned
 * (it starts afresh for the next batch); the batch then records the timed-out message as a failure with
 * `HandlerTimeoutError` and gives the unstarted ones back.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { RegisteredHandler } from "../../services/Handlers.js"

/** A message's progress in its batch (0: not started). @internal */
export const running = 1
/** @internal */
export const finished = 2
/** @internal */
export const givenBack = 3
/** Past its handler's deadline: the batch records it as a `HandlerTimeoutError`. @internal */
export const timedOut = 4

/** The handler a message ran when it timed out. @internal */
export interface TimedOut {
  readonly handler: RegisteredHandler
  /** The handlers of this message that already succeeded (on this delivery or an earlier one). */
  readonly handledBy: ReadonlyArray<string>
  readonly timeoutMs: number
  readonly startedAt: number
}

/** The watchdog's view of one batch: per message, by index, its progress and its running handler. @internal */
export interface Watched {
  readonly dog: Watchdog
  readonly progress: Uint8Array
  // hot path: parallel arrays of what is kept anyway, not an object per handler run nor the envelope, which would
  // then live as long as the batch (see BENCHMARKS.md, "the worker's hot path")
  /** Per message: the handler it runs now (none before one has started) and its deadline. */
  readonly handlers: Array<RegisteredHandler>
  readonly deadlines: Array<number>
  /** Per message with several handlers: those that succeeded before the running one. */
  readonly handledBy: Array<ReadonlyArray<string>>
  /** Interrupts the batch where it stands (its runner is replaced for the next batch). */
  readonly abandon: Effect.Effect<void>
  /**
   * When the batch's messages run side by side: per running message, what stops it alone (see `pool.ts`). The
   * batch is then never abandoned for a timeout.
   */
  readonly stops: Array<(() => void) | undefined> | undefined
  /** Whether the watchdog marked a message of it timed out. */
  timedOut: boolean
}

/** @internal */
export interface Watchdog {
  readonly clock: Clock.Clock
  readonly defaultTimeoutMs: number
  /** The batch running now. */
  current: Watched | undefined
  /** When the watchdog wakes next. */
  target: number
  /** Wakes the watchdog early: a handler started with a deadline before `target`. */
  wake: (() => void) | undefined
  /** Such a handler started while the watchdog was not yet waiting. */
  early: boolean
}

/** @internal */
export const make = (clock: Clock.Clock, defaultTimeout: Duration.Duration): Watchdog => ({
  clock,
  defaultTimeoutMs: Duration.toMillis(defaultTimeout),
  current: undefined,
  target: Infinity,
  wake: undefined,
  early: false
})

/**
 * The slots of a batch about to run, watched from now on; `isolated` when its messages run side by side, each in a
 * fiber of its own (`pool.ts`). @internal
 */
export const watch = (dog: Watchdog, size: number, abandon: Effect.Effect<void>, isolated = false): Watched => {
  const watched: Watched = {
    dog,
    progress: new Uint8Array(size),
    handlers: [],
    deadlines: [],
    handledBy: [],
    abandon,
    stops: isolated ? [] : undefined,
    timedOut: false
  }
  dog.current = watched
  return watched
}

/** The batch ended: nothing of it is watched any more. @internal */
export const unwatch = (watched: Watched): void => {
  if (watched.dog.current === watched) watched.dog.current = undefined
}

/** A handler's own timeout, else the worker's. */
const timeoutOf = (dog: Watchdog, handler: RegisteredHandler): number =>
  handler.timeout === undefined ? dog.defaultTimeoutMs : Duration.toMillis(handler.timeout)

/**
 * A handler of message `index` starts now: its deadline is armed (the handler's own timeout, else the worker's).
 *
 * @internal
 */
export const arm = (
  watched: Watched,
  index: number,
  handler: RegisteredHandler,
  handledBy: ReadonlyArray<string> | undefined
): void => {
  const dog = watched.dog
  const timeoutMs = timeoutOf(dog, handler)
  const deadline = dog.clock.unsafeCurrentTimeMillis() + timeoutMs
  watched.handlers[index] = handler
  watched.deadlines[index] = deadline
  if (handledBy !== undefined) watched.handledBy[index] = handledBy
  if (deadline < dog.target && dog.current === watched) {
    if (dog.wake !== undefined) dog.wake()
    else dog.early = true
  }
}

/** The handler of message `index`, past its deadline. @internal */
export const timedOutAt = (watched: Watched, index: number): TimedOut => {
  const handler = watched.handlers[index]!
  const timeoutMs = timeoutOf(watched.dog, handler)
  return {
    handler,
    handledBy: watched.handledBy[index] ?? [],
    timeoutMs,
    startedAt: watched.deadlines[index]! - timeoutMs
  }
}

/** Resumes when `wake` is called, at once when a handler started early since the last scan. */
const woken = (dog: Watchdog) =>
  Effect.async<void>((resume) => {
    if (dog.early) {
      dog.early = false
      return resume(Effect.void)
    }
    const wake = () => {
      dog.wake = undefined
      resume(Effect.void)
    }
    dog.wake = wake
    return Effect.sync(() => {
      if (dog.wake === wake) dog.wake = undefined
    })
  })

/** Sleeps until `ms` have passed on the clock, or less when a handler starts with an earlier deadline. */
const sleepOrWake = (dog: Watchdog, ms: number) => Effect.raceFirst(Effect.sleep(Duration.millis(ms)), woken(dog))

/**
 * The watchdog's loop: the timed-out messages of the running batch are marked and the batch abandoned; otherwise
 * it sleeps until the earliest deadline. It never ends (the worker's scope interrupts it).
 *
 * @internal
 */
export const run = (dog: Watchdog): Effect.Effect<never> =>
  Effect.forever(Effect.suspend(() => {
    dog.early = false
    const now = dog.clock.unsafeCurrentTimeMillis()
    const batch = dog.current
    let earliest = Infinity
    let expired = false
    if (batch !== undefined) {
      const { deadlines, progress } = batch
      for (let i = 0; i < progress.length; i++) {
        const deadline = deadlines[i]
        if (progress[i] !== running || deadline === undefined) continue
        if (deadline <= now) {
          progress[i] = timedOut
          expired = true
        } else if (deadline < earliest) earliest = deadline
      }
    }
    if (batch !== undefined && expired) {
      const stops = batch.stops
      if (stops === undefined) {
        batch.timedOut = true
        dog.target = Infinity
        return batch.abandon
      }
      // Each timed-out message alone; the others run on, and the watchdog sleeps until the next deadline.
      for (let i = 0; i < stops.length; i++) {
        if (batch.progress[i] === timedOut) stops[i]?.()
      }
    }
    // With nothing running it sleeps one default timeout rather than until a handler starts: a handler armed
    // with the default cannot end before that, so only a shorter timeout of its own wakes the watchdog — not
    // every small batch that starts and ends before the watchdog looks.
    dog.target = earliest === Infinity ? now + dog.defaultTimeoutMs : earliest
    return sleepOrWake(dog, dog.target - now)
  }))
