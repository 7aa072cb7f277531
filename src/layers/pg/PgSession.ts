/**
 * A worker's session on the PostgreSQL transport: its claims run on a connection of its own (held while the
 * session lives, named `effect-outbox worker` in `pg_stat_activity`), and it waits on the transport's LISTEN
 * connection. Each empty claim answers when the next message is due, from the same round trip.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Statement from "@effect/sql/Statement"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import type { StorageNotReadyError, TransportError, UnknownTransportError } from "../../domain/Errors.js"
import { checkKnown, unknownTransport } from "../../internal/transports.js"
import type { Claimed, Session } from "../../services/Transport.js"
import { byAvailability, untilDue } from "../internal/claimed.js"
import * as HeldConnection from "../internal/heldConnection.js"
import * as PgWaiting from "./PgWaiting.js"
import type * as PgWakeups from "./PgWakeups.js"
import { claimCall, type ClaimedRow, dateOf, type Statements } from "./sql/transport.js"

/** What the session needs of its transport. @internal */
export interface Resolved {
  readonly queueName: string
  readonly redeliverTimeoutMs: number
}

/** @internal */
export interface SessionOptions {
  readonly sql: SqlClient.SqlClient
  readonly table: string
  readonly transports: ReadonlyMap<string, Resolved>
  readonly statements: Statements
  readonly wakeups: ReturnType<typeof PgWakeups.make>
  /** Whether sessions hold a connection of their own (the pool has room for one). */
  readonly ownConnection: boolean
  /** Runs a statement on the caller's transaction connection when there is one, else on the pool. */
  readonly exec: <A extends object>(statement: Statement.Statement<A>) => Effect.Effect<ReadonlyArray<A>, SqlError>
  readonly toError: (transport: string, operation: string, error: SqlError) => TransportError | StorageNotReadyError
}

/** How long a session that just found work waits unannounced before it announces its wait (ms). */
const lingerMs = 5

/**
 * How long the first wait after an announcement lasts at most (ms): the producer transactions open across it
 * (written before the announcement, committed after the claim that followed it) are found by the claim after.
 */
const recheckMs = 20

/** The `application_name` of a session's connection. @internal */
export const applicationName = "effect-outbox worker"

/** @internal */
export const open = (options: SessionOptions) =>
(
  names: ReadonlyArray<string>
): Effect.Effect<Session, UnknownTransportError, Scope.Scope> =>
  Effect.gen(function*() {
    const { statements, transports } = options
    yield* checkKnown(names, transports)
    const own = new Set(names)
    const queues = new Set(names.map((name) => transports.get(name)!.queueName))
    const subscription = yield* options.wakeups.subscribe(queues)
    const waiting = PgWaiting.make({ statements, queues: [...queues], listens: options.wakeups.listens })
    yield* Effect.addFinalizer(() => waiting.close)
    const connection = options.ownConnection ? HeldConnection.make(options.sql, applicationName) : undefined
    if (connection !== undefined) yield* Effect.addFinalizer(() => connection.release)
    const text = claimCall(options.table)
    const floors = new Map<string, Floor>()
    // A claim found work since the last wait: the next wait lingers before the session announces it (see `wait`).
    let foundWork = false
    // The last claim found work.
    let foundLast = false
    // The session announced its wait and has claimed once since: its next wait is `recheckMs` at most.
    let recheck = false
    const inTransaction = (fiber: Fiber.RuntimeFiber<unknown, unknown>) =>
      Option.isSome(Context.getOption(fiber.currentContext, SqlClient.TransactionConnection))

    const claim: Session["claim"] = (name, batchSize, acks) =>
      Effect.withFiberRuntime<Claimed, TransportError | UnknownTransportError | StorageNotReadyError>((fiber) => {
        const transport = transports.get(name)
        if (transport === undefined || !own.has(name)) return Effect.fail(unknownTransport(name, names))
        const { queueName, redeliverTimeoutMs: leaseMs } = transport
        const batch = Math.max(1, Math.floor(batchSize))
        const sentAt = performance.now()
        const floor = floors.get(queueName)
        const sweep = floor === undefined || !floor.full || sentAt - floor.sweptAt >= sweepEveryMs
        // Inside a caller's transaction: its connection, and its commit (never relaxed).
        const tx = inTransaction(fiber)
        const call = (size: number, ids: ReadonlyArray<string>, floorMs: number | null) => {
          const viaSql = () => options.exec(statements.claim(queueName, leaseMs, size, ids, !tx, floorMs))
          return connection === undefined || tx
            ? viaSql()
            : connection.execute<ClaimedRow>(text, [queueName, leaseMs, size, ids, true, floorMs], viaSql)
        }
        const rows = sweep ? call(batch, acks, null) : Effect.flatMap(call(batch, acks, floor.floorMs), (above) => {
          // Short above the floor: the rest from the start, so that a short answer always means "nothing more".
          const leased = leasedCount(above)
          return leased >= batch
            ? Effect.succeed(above)
            : Effect.map(call(batch - leased, [], null), (all) =>
              leased === 0 ? all : leasedCount(all) === 0 ? above : [...above, ...all])
        })
        const answered = Effect.mapBoth(rows, {
          onFailure: (error) =>
            options.toError(name, acks.length === 0 ? "claim" : "ackAndClaim", error),
          onSuccess: (claimed): Claimed => {
            floors.set(queueName, nextFloor(floor, claimed, batch, sweep ? sentAt : floor!.sweptAt))
            if (!foundWork && leasedCount(claimed) > 0) foundWork = true
            // Leased nothing: the one row says when the next message is due.
            if (claimed.length === 1 && claimed[0]!.id === null) {
              return { messages: [], nextDue: untilDue(sentAt, claimed[0]!.available_ms) }
            }
            return { messages: claimed.map(toReceived(name)).sort(byAvailability), nextDue: Option.none() }
          }
        })
        // Claims run between waits, never during one: an announcement made before this claim is all there is.
        // It is retracted once two claims in a row found work: a queue whose messages come one at a time keeps its
        // worker announced (no statement per message), a busy one stops notifying.
        return Effect.tap(answered, (claimed) => {
          const found = claimed.messages.length > 0
          const busy = found && foundLast
          foundLast = found
          return busy && waiting.announced() ? waiting.busy : Effect.void
        })
      })

    /** The errors of a wait's own statements (its announcement, its looks at open transactions). */
    const waitError = <A>(self: Effect.Effect<A, SqlError>) =>
      Effect.mapError(self, (error) => options.toError(names[0]!, "announceWait", error))

    /**
     * A wait while transactions the announcement found in progress may still be: it ends with a hint, at `until`, or
     * once one of them has ended (the loop claims again: it may have committed a message without notifying), looked
     * at after `stepMs`, then twice as long each time — so such a message waits at most about as long again as its
     * transaction stayed open after the announcement. Only for one full wait: what they commit after it, the polls
     * find (`maxWait` is the poll interval), so a long transaction elsewhere on the server costs a few looks, not one
     * every wait.
     */
    const watchOpen = (until: number, stepMs: number): Effect.Effect<void, TransportError | StorageNotReadyError> =>
      Effect.suspend(() => {
        const left = until - performance.now()
        if (left <= 0) {
          waiting.unwatch()
          return Effect.void
        }
        return Effect.flatMap(options.wakeups.wait(subscription, Duration.millis(Math.min(stepMs, left))), (hinted) =>
          hinted ? Effect.void : performance.now() >= until ? Effect.sync(waiting.unwatch) : Effect.flatMap(
            waitError(waiting.anyEnded),
            (ended) =>
              ended || !waiting.watching() ? Effect.void : watchOpen(until, 2 * stepMs)
          ))
      })

    return {
      transports: names,
      claim,
      // The first wait after work lingers `lingerMs` unannounced: while producers commit faster than that, the
      // session finds their messages without being notified, so their commits take no NOTIFY lock. Then a wait that
      // needs a new announcement makes it and ends at once: the loop claims again (see PgWaiting).
      wait: (maxWait) =>
        Effect.suspend(() => {
          if (foundWork) {
            foundWork = false
            if (!waiting.announced()) {
              return Effect.asVoid(
                options.wakeups.wait(subscription, Duration.millis(Math.min(lingerMs, Duration.toMillis(maxWait))))
              )
            }
          }
          return Effect.flatMap(
            waitError(waiting.announce(Duration.toMillis(maxWait))),
            (announced) => {
              if (announced) {
                recheck = true
                return Effect.void
              }
              // The first wait after the claim that followed an announcement is short: a producer transaction
              // that wrote before the announcement and committed after that claim is found by the next one.
              if (recheck) {
                recheck = false
                const ms = Math.min(recheckMs, Duration.toMillis(maxWait))
                return Effect.asVoid(options.wakeups.wait(subscription, Duration.millis(ms)))
              }
              if (waiting.watching()) {
                return watchOpen(performance.now() + Duration.toMillis(maxWait), 2 * recheckMs)
              }
              return Effect.asVoid(options.wakeups.wait(subscription, maxWait))
            }
          )
        })
    }
  })

/**
 * Where a session's next claim of a queue starts its unkeyed scan. The claim index begins with the entries of
 * acked rows (until a vacuum removes them) and of leased ones, so a claim that always scanned from the start
 * would read more of them the longer a backlog drains. A floor a little below the oldest unkeyed row of the last
 * claim skips them. It is used only while claims come back full (a backlog drains): rows can appear below it —
 * released, redelivered once a lease ran out, or committed by a transaction that began long before (a row is
 * available from its transaction's start) — so a claim after one that came back short, and one every
 * `sweepEveryMs`, scan from the start; a claim that comes back short above the floor takes the rest from the
 * start at once (a short answer always means "nothing more"); the margin keeps the usual late commit above it.
 */
interface Floor {
  /** Epoch ms (the database's clock), or `null`: from the start. */
  readonly floorMs: number | null
  /** Whether the last claim leased as many rows as it asked for. */
  readonly full: boolean
  /** When (`performance.now()`) the last claim from the start was sent. */
  readonly sweptAt: number
}

/** A claim from the start at least this often (ms). */
const sweepEveryMs = 1_000

/** How far below the oldest row of the last claim the floor is (ms). */
const floorMarginMs = 1_000

/** The rows a claim leased (an empty claim answers with one row of nothing). */
const leasedCount = (claimed: ReadonlyArray<ClaimedRow>): number =>
  claimed.length === 1 && claimed[0]!.id === null ? 0 : claimed.length

const nextFloor = (
  previous: Floor | undefined,
  claimed: ReadonlyArray<ClaimedRow>,
  batch: number,
  sweptAt: number
): Floor => {
  let oldest = Infinity
  for (const row of claimed) {
    if (row.ordering_key === null && row.id !== null && row.available_ms! < oldest) oldest = row.available_ms!
  }
  return {
    floorMs: Number.isFinite(oldest) ? oldest - floorMarginMs : previous?.floorMs ?? null,
    full: leasedCount(claimed) >= batch,
    sweptAt
  }
}

const toReceived = (name: string) => (row: ClaimedRow): ReceivedMessage => ({
  id: row.id!,
  transport: name,
  messageId: row.message_id,
  body: row.body,
  headers: row.headers,
  // Epoch milliseconds from SQL: a float is parsed much faster than a timestamp text.
  createdAt: dateOf(row.created_ms),
  availableAt: dateOf(row.available_ms!),
  deliveries: row.delivery_count,
  crashes: row.crash_count,
  redelivered: row.redelivered,
  ...(row.ordering_key === null ? {} : { orderingKey: row.ordering_key })
})
