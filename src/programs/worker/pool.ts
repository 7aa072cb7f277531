/**
 * The messages of a batch side by side (`concurrency` > 1): each in a fiber of its own, so that a handler timeout
 * stops that message alone. `Effect.forEach` cannot: a child interrupted from outside ends interrupted, and its
 * failure interrupts its siblings. Here the watchdog's `stop` interrupts one message's fiber without waiting for it
 * (a handler that ignores its interruption holds nothing up), frees its place and records its timeout in a fiber of
 * its own, while the others run on.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Runtime from "effect/Runtime"

/**
 * Runs `task(i)` for each message `i` of `size` (or, with `order`, for the first `size` indices it lists, in its
 * order), `concurrency` at a time, in fibers forked with the caller's context
 * and fiber refs. `stops[i]` is set, while message `i` runs, to what stops it: its fiber interrupted, `expire(i)`
 * run in its place. The first failure stops the rest as `Effect.forEach` does: no further message starts, the
 * running ones are interrupted and awaited, and the pool fails with it. Interrupted (a shutdown past its timeout), it
 * interrupts and awaits the running ones.
 *
 * @internal
 */
export const run = <E>(
  size: number,
  concurrency: number,
  task: (index: number) => Effect.Effect<void, E>,
  stops: Array<(() => void) | undefined>,
  expire: (index: number) => Effect.Effect<void, E>,
  order?: ReadonlyArray<number>
): Effect.Effect<void, E> =>
  Effect.flatMap(Effect.runtime<never>(), (runtime) =>
    Effect.async<void, E>((resume) => {
      const fork = Runtime.runFork(runtime)
      // The running fibers, by message (`expire` of a stopped message by `-1 - index`).
      const running = new Map<number, Fiber.RuntimeFiber<void, E>>()
      let next = 0
      let failure: Cause.Cause<E> | undefined
      let ended = false
      const end = () => {
        if (ended || running.size > 0 || (failure === undefined && next < size)) return
        ended = true
        resume(failure === undefined ? Effect.void : Effect.failCause(failure))
      }
      const start = (key: number, effect: Effect.Effect<void, E>) => {
        const fiber = fork(effect)
        running.set(key, fiber)
        fiber.addObserver((exit) => {
          // A stopped message's fiber: its place was freed when it was stopped.
          if (running.get(key) !== fiber) return
          running.delete(key)
          if (key >= 0) stops[key] = undefined
          if (Exit.isFailure(exit) && failure === undefined) {
            failure = exit.cause
            for (const other of running.values()) other.unsafeInterruptAsFork(FiberId.none)
          }
          fill()
          end()
        })
      }
      const stop = (index: number) => () => {
        const fiber = running.get(index)
        if (fiber === undefined) return
        running.delete(index)
        stops[index] = undefined
        fiber.unsafeInterruptAsFork(FiberId.none)
        start(-1 - index, expire(index))
      }
      const fill = () => {
        while (failure === undefined && running.size < concurrency && next < size) {
          const index = order === undefined ? next++ : order[next++]!
          stops[index] = stop(index)
          start(index, task(index))
        }
      }
      fill()
      end()
      return Effect.suspend(() => {
        ended = true
        const fibers = Array.from(running.values())
        running.clear()
        return Fiber.interruptAll(fibers)
      })
    }))
