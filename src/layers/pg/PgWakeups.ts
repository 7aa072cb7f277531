/**
 * Wake-ups of the PostgreSQL transport: one LISTEN connection per transport instance, shared by its
 * subscribers, started with the first and stopped with the last. The listener's callback resumes a waiting
 * subscriber directly: no fiber, queue or race on the latency path.
 *
 * @internal
 */
import type { PgClientConfig } from "@effect/sql-pg/PgClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { listen } from "../internal/pgListener.js"

/** One subscriber's hints. @internal */
export interface Subscription {
  readonly queues: ReadonlySet<string>
  /** A hint arrived while nobody waited. */
  pending: boolean
  /** Resumes the subscriber waiting now. */
  waiter: (() => void) | undefined
}

/** The longest `setTimeout` delay (about 24.8 days). */
const maxTimeout = 2 ** 31 - 1

/** @internal */
export const make = (listener: { readonly config: PgClientConfig; readonly channel: string } | undefined) => {
  const subscriptions = new Set<Subscription>()
  const onNotify = (payload: string) => {
    for (const s of subscriptions) {
      if (payload !== "*" && !s.queues.has(payload)) continue
      if (s.waiter !== undefined) s.waiter()
      else s.pending = true
    }
  }
  let listenerScope: Scope.CloseableScope | undefined
  const start = Effect.suspend(() => {
    if (subscriptions.size > 1 || listener === undefined) return Effect.void
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      listenerScope = scope
      yield* listen({ ...listener, onNotify }).pipe(Scope.extend(scope))
    })
  })
  const stop = Effect.suspend(() => {
    if (subscriptions.size > 0 || listenerScope === undefined) return Effect.void
    const scope = listenerScope
    listenerScope = undefined
    return Scope.close(scope, Exit.void)
  })

  /** Subscribes to the hints of these queues for the scope's life. */
  const subscribe = (queues: ReadonlySet<string>): Effect.Effect<Subscription, never, Scope.Scope> =>
    Effect.acquireRelease(
      Effect.suspend(() => {
        const subscription: Subscription = { queues, pending: false, waiter: undefined }
        subscriptions.add(subscription)
        return Effect.as(start, subscription)
      }),
      (subscription) =>
        Effect.suspend(() => {
          subscriptions.delete(subscription)
          return stop
        })
    )

  /** Waits for a hint of the subscription, `maxWait` at most: `true` when a hint ended it. */
  const wait = (subscription: Subscription, maxWait: Duration.Duration): Effect.Effect<boolean> =>
    Effect.async<boolean>((resume) => {
      if (subscription.pending) {
        subscription.pending = false
        resume(Effect.succeed(true))
        return
      }
      const done = (hinted: boolean) => () => {
        clearTimeout(timer)
        subscription.waiter = undefined
        subscription.pending = false
        resume(Effect.succeed(hinted))
      }
      const timer = setTimeout(done(false), Math.min(maxTimeout, Math.max(0, Duration.toMillis(maxWait))))
      subscription.waiter = done(true)
      return Effect.sync(() => {
        clearTimeout(timer)
        subscription.waiter = undefined
      })
    })

  /** Whether hints can arrive at all (a LISTEN connection is configured): workers announce their waits only then. */
  const listens = listener !== undefined

  return { listens, subscribe, wait }
}
