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

/** A submitted batch: waits for its exit (again after an interruption, if need be). @internal */
export interface BatchHandle<E> {
  readonly await: Effect.Effect<void, E>
}

/** @internal */
export interface BatchRunner {
  readonly submit: <E>(effect: Effect.Effect<void, E>) => BatchHandle<E>
  readonly fiber: Fiber.RuntimeFiber<never>
}

// hot path: a one-shot callback per batch instead of a Deferred (see BENCHMARKS.md, "the worker's hot path")
interface BatchJob {
  readonly effect: Effect.Effect<void, unknown>
  exit: Exit.Exit<void, unknown> | undefined
  /** Resumes the fiber waiting for the exit. */
  waiter: ((exit: Exit.Exit<void, unknown>) => void) | undefined
}

const finishJob = (job: BatchJob, exit: Exit.Exit<void, unknown>) => {
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
    let current: BatchJob | undefined
    const next = Effect.async<BatchJob>((resume) => {
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
        current = undefined
        finishJob(job, exit)
      })
    }
    const loop = Effect.forever(Effect.flatMap(next, runOne)).pipe(
      Effect.interruptible,
      registry.provide,
      Effect.onExit((exit) =>
        Effect.sync(() => {
          if (current !== undefined) finishJob(current, Exit.asVoid(exit))
        })
      )
    )
    return Effect.map(Effect.forkDaemon(loop), (fiber): BatchRunner => ({
      fiber,
      submit: <E>(effect: Effect.Effect<void, E>): BatchHandle<E> => {
        const job: BatchJob = { effect, exit: undefined, waiter: undefined }
        if (idle !== undefined) idle(job)
        else queued.push(job)
        return {
          await: Effect.async<void, E>((resume) => {
            if (job.exit !== undefined) return resume(job.exit as Exit.Exit<void, E>)
            job.waiter = (exit) => resume(exit as Exit.Exit<void, E>)
            return Effect.sync(() => {
              job.waiter = undefined
            })
          })
        }
      }
    }))
  })
