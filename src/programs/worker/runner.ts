/**
 * The fiber the handlers run in: one per run of the loop, a daemon — so that interrupting the worker (SIGTERM)
 * does not take the handlers in flight down with it — with the handlers' services provided once for its life.
 * Interrupting `fiber` interrupts the batch running in it, whose exit is then that interruption.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import type { HandlersShape } from "../../services/Handlers.js"
import * as MessageLogs from "./messageLogs.js"

/** A submitted batch: waits for its exit (again after an interruption, if need be). @internal */
export interface BatchHandle<E> {
  readonly await: Effect.Effect<void, E>
  /** Whether the batch has ended (or was abandoned). */
  readonly done: () => boolean
}

/** @internal */
export interface BatchRunner {
  readonly submit: <E>(effect: Effect.Effect<void, E>) => BatchHandle<E>
  /** The fiber running the batches now. */
  readonly fiber: Fiber.RuntimeFiber<never>
  /**
   * Ends the batch running now with an interruption — at once, even if a handler ignores it — and runs the
   * next batches in a new fiber (a handler timeout: see `watchdog.ts`).
   */
  readonly abandon: Effect.Effect<void>
}

// hot path: a one-shot callback per batch instead of a Deferred (see BENCHMARKS.md, "the worker's hot path")
interface BatchJob {
  readonly effect: Effect.Effect<void, unknown>
  exit: Exit.Exit<void, unknown> | undefined
  /** Resumes the fiber waiting for the exit. */
  waiter: ((exit: Exit.Exit<void, unknown>) => void) | undefined
}

/** A job's exit is its first: an abandoned job's late end is ignored. */
const finishJob = (job: BatchJob, exit: Exit.Exit<void, unknown>) => {
  if (job.exit !== undefined) return
  job.exit = exit
  const waiter = job.waiter
  job.waiter = undefined
  waiter?.(exit)
}

/** Forks the runner (a daemon: see the module doc); the caller interrupts `fiber` when done. @internal */
export const make = (registry: HandlersShape): Effect.Effect<BatchRunner> =>
  Effect.suspend(() => {
    const queued: Array<BatchJob> = []
    let idle: ((job: BatchJob) => void) | undefined
    let fiber: Fiber.RuntimeFiber<never> | undefined
    let current: BatchJob | undefined
    let generation = 0
    // Each fiber takes jobs only while it is the runner's: an abandoned one may still be finishing a handler that
    // ignores interruption.
    const start = Effect.suspend(() => {
      const mine = ++generation
      const next = Effect.async<BatchJob>((resume) => {
        if (mine !== generation) return resume(Effect.interrupt)
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
          if (current === job) current = undefined
          finishJob(job, exit)
        })
      }
      const loop = Effect.forever(Effect.flatMap(next, runOne)).pipe(
        Effect.interruptible,
        registry.provide,
        MessageLogs.withMessageLogs,
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (mine === generation && current !== undefined) finishJob(current, Exit.asVoid(exit))
          })
        )
      )
      return Effect.map(Effect.forkDaemon(loop), (forked) => {
        fiber = forked
      })
    })
    const abandon = Effect.suspend(() => {
      const old = fiber!
      const job = current
      current = undefined
      idle = undefined
      return Effect.zipRight(
        start,
        Effect.fiberIdWith((id) =>
          Effect.sync(() => {
            old.unsafeInterruptAsFork(id)
            if (job !== undefined) finishJob(job, Exit.interrupt(id))
          })
        )
      )
    })
    return Effect.as(
      start,
      {
        get fiber() {
          return fiber!
        },
        abandon,
        submit: <E>(effect: Effect.Effect<void, E>): BatchHandle<E> => {
          const job: BatchJob = { effect, exit: undefined, waiter: undefined }
          if (idle !== undefined) idle(job)
          else queued.push(job)
          return {
            done: () => job.exit !== undefined,
            await: Effect.async<void, E>((resume) => {
              if (job.exit !== undefined) return resume(job.exit as Exit.Exit<void, E>)
              job.waiter = (exit) => resume(exit as Exit.Exit<void, E>)
              return Effect.sync(() => {
                job.waiter = undefined
              })
            })
          }
        }
      } satisfies BatchRunner
    )
  })
