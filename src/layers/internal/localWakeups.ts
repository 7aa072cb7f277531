/**
 * Wake-ups between a producer and the workers of one process, for a store that cannot notify (MySQL): a send
 * wakes the sessions waiting on its queue at once. A send made inside a transaction is `pending` — its rows are
 * visible only once the caller commits, which nothing here can see — so a session woken by one looks again a few
 * times, briefly, until a claim finds work (see `MysqlSession`). Polling stays the truth.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

/** A session's subscription to its queues. @internal */
export interface Subscription {
  readonly queues: ReadonlySet<string>
  /** A hint arrived since the last wait; `pending` when one of them was sent inside a transaction. */
  hinted: boolean
  pending: boolean
  waiter: Deferred.Deferred<void> | undefined
}

/** @internal */
export interface LocalWakeups {
  /** Wakes the sessions waiting on `queue`. */
  readonly notify: (queue: string, pending: boolean) => void
  readonly subscribe: (queues: Iterable<string>) => Effect.Effect<Subscription, never, Scope.Scope>
  /**
   * Waits for a hint on the subscription's queues (or one that came since the last wait), or `maxWait` at most.
   * Answers the hint (`undefined`: none came); hints are coalesced.
   */
  readonly wait: (
    subscription: Subscription,
    maxWait: Duration.Duration
  ) => Effect.Effect<{ readonly pending: boolean } | undefined>
}

/** @internal */
export const make = (): LocalWakeups => {
  const subscriptions = new Set<Subscription>()
  const take = (subscription: Subscription) => {
    const hint = subscription.hinted ? { pending: subscription.pending } : undefined
    subscription.hinted = false
    subscription.pending = false
    return hint
  }
  return {
    notify: (queue, pending) => {
      for (const subscription of subscriptions) {
        if (!subscription.queues.has(queue)) continue
        subscription.hinted = true
        subscription.pending ||= pending
        if (subscription.waiter !== undefined) Deferred.unsafeDone(subscription.waiter, Effect.void)
      }
    },
    subscribe: (queues) =>
      Effect.acquireRelease(
        Effect.sync(() => {
          const subscription: Subscription = {
            queues: new Set(queues),
            hinted: false,
            pending: false,
            waiter: undefined
          }
          subscriptions.add(subscription)
          return subscription
        }),
        (subscription) => Effect.sync(() => subscriptions.delete(subscription))
      ),
    wait: (subscription, maxWait) =>
      Effect.suspend(() => {
        if (subscription.hinted) return Effect.succeed(take(subscription))
        if (Duration.toMillis(maxWait) <= 0) return Effect.succeed(undefined)
        return Effect.flatMap(Deferred.make<void>(), (waiter) => {
          subscription.waiter = waiter
          return Effect.raceFirst(Deferred.await(waiter), Effect.sleep(maxWait)).pipe(
            Effect.ensuring(Effect.sync(() => {
              subscription.waiter = undefined
            })),
            Effect.map(() => take(subscription))
          )
        })
      })
  }
}

/**
 * The wake-ups of one store, shared by every transport built on the same client: a producer's layer and a worker's
 * layer made apart still wake each other. Keyed by the client object and the table.
 *
 * @internal
 */
export const shared = (() => {
  const byClient = new WeakMap<object, Map<string, LocalWakeups>>()
  return (client: object, table: string): LocalWakeups => {
    let tables = byClient.get(client)
    if (tables === undefined) byClient.set(client, tables = new Map())
    let wakeups = tables.get(table)
    if (wakeups === undefined) tables.set(table, wakeups = make())
    return wakeups
  }
})()
