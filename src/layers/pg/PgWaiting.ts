/**
 * A worker session's announcement that it waits: producers notify a queue only while a worker waits on it
 * (`<table>_waiting`), so the commits of a busy queue never take the lock NOTIFY's commits queue on.
 *
 * The race this must close: a producer's statement that ran before the announcement committed did not notify,
 * and its commit may land after the claim that found the queue empty. So a wait that needs a new announcement
 * makes it and returns at once: the loop claims again and finds every message committed by then. A producer
 * whose statement ran before the announcement and whose commit lands after that claim is among the transactions
 * the announcement found in progress (`open`): the session's waits end once one of them has ended, and the loop
 * claims again.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Statements } from "./sql/transport.js"

/** An announcement outlives the wait it was made for by this much, so the next waits need not renew it. */
const slackMs = 5_000

/** @internal */
export interface Waiting {
  /**
   * Before a wait of `ms`: `true` when the session had to announce it (the caller claims again before waiting),
   * `false` when its announcement covers the wait (or it cannot be woken: nothing to announce).
   */
  readonly announce: (ms: number) => Effect.Effect<boolean, SqlError>
  /** Whether the session has announced that it waits. */
  readonly announced: () => boolean
  /** Whether transactions the announcement found in progress may still be. */
  readonly watching: () => boolean
  /** Whether one of those transactions has ended since it was last asked (those still in progress are kept). */
  readonly anyEnded: Effect.Effect<boolean, SqlError>
  /** Forgets those transactions: what they commit from now on is found by the polls. */
  readonly unwatch: () => void
  /**
   * The session finds work without being woken (two claims in a row did): it no longer waits (the retraction runs in
   * the background).
   */
  readonly busy: Effect.Effect<void>
  /** Retracts the announcement when the session ends. */
  readonly close: Effect.Effect<void>
}

/** @internal */
export const make = (options: {
  readonly statements: Statements
  readonly queues: ReadonlyArray<string>
  /** Whether the transport listens: without a LISTEN connection nothing can wake the worker. */
  readonly listens: boolean
}): Waiting => {
  const { queues, statements } = options
  const worker = crypto.randomUUID()
  // Until when (performance.now()) the announcement stands; 0 without one.
  let announcedUntil = 0
  // The retraction in flight: the next announcement waits for it, so that it never lands after the announcement.
  let retracting: Fiber.RuntimeFiber<void> | undefined
  // The transactions in progress when the announcement was made, as far as known still in progress.
  let open: ReadonlyArray<string> = []

  // Never on a caller's transaction (a claim or a wait may run inside one, and the retraction is forked from a
  // claim): its own autocommitted statement, whose relaxed commit relaxes nothing of the caller's.
  const ownStatement = <A, E>(self: Effect.Effect<A, E>): Effect.Effect<A, E> =>
    Effect.mapInputContext(
      self,
      (context: Context.Context<never>) => Context.omit(SqlClient.TransactionConnection)(context)
    )

  const awaitFiber = (fiber: Fiber.RuntimeFiber<void> | undefined) =>
    fiber === undefined ? Effect.void : Fiber.join(fiber)
  const settled = Effect.suspend(() => awaitFiber(retracting))

  const announce = (ms: number): Effect.Effect<boolean, SqlError> =>
    Effect.suspend(() => {
      const now = performance.now()
      if (!options.listens || announcedUntil >= now + ms + 1_000) return Effect.succeed(false)
      const lifetime = 2 * ms + slackMs
      return settled.pipe(
        Effect.zipRight(ownStatement(statements.announce(queues, worker, lifetime))),
        // An interruption may leave an announcement this session does not know of: it lapses.
        Effect.map(([row]) => {
          announcedUntil = now + lifetime
          open = row?.open ?? []
          return true
        })
      )
    })

  // A retraction that fails leaves the announcement to lapse: until then, producers notify for nothing.
  // Interruptible: forked from a claim, which is not, and its timeout must be able to end it.
  const retract = ownStatement(statements.retract(worker)).pipe(
    Effect.interruptible,
    Effect.timeout(Duration.seconds(2)),
    Effect.ignore
  )

  return {
    announce,
    announced: () => announcedUntil !== 0,
    watching: () => open.length > 0,
    anyEnded: Effect.suspend(() =>
      open.length === 0 ? Effect.succeed(false) : Effect.map(ownStatement(statements.stillOpen(open)), (rows) => {
        const ended = rows.length < open.length
        open = rows.map((row) => row.xid)
        return ended
      })
    ),
    unwatch: () => {
      open = []
    },
    busy: Effect.suspend(() => {
      open = []
      if (announcedUntil === 0) return Effect.void
      // Forgotten before the retraction runs: a wait that comes first announces again (after the retraction).
      announcedUntil = 0
      // After the one before it (read now: the new fiber becomes `retracting`).
      const previous = retracting
      return Effect.map(Effect.forkDaemon(Effect.zipRight(awaitFiber(previous), retract)), (fiber) => {
        retracting = fiber
      })
    }),
    close: Effect.suspend(() => {
      if (announcedUntil === 0) return settled
      announcedUntil = 0
      return Effect.zipRight(settled, retract)
    })
  }
}
