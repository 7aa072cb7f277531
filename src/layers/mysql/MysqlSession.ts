/**
 * A worker's session on the MySQL transport. A claim is one short transaction in two round trips on a pooled
 * connection (see `claimTexts`): lock the ready rows (deleting the acked ones first), then lease them and commit.
 * Its wait is a poll: it ends at `maxWait`, or sooner when a producer of this process sends to one of its queues
 * (`localWakeups`).
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import type { StorageNotReadyError, TransportError, UnknownTransportError } from "../../domain/Errors.js"
import { checkKnown, unknownTransport } from "../../internal/transports.js"
import type { Claimed, Session } from "../../services/Transport.js"
import { byAvailability, untilDue } from "../internal/claimed.js"
import type { LocalWakeups } from "../internal/localWakeups.js"
import type { ResolvedTransport } from "../internal/tableTransports.js"
import { claimTexts, dateOf, idValues, maxDeliveryCount, type StoredRow } from "./sql/transport.js"

/** @internal */
export interface SessionOptions {
  readonly sql: SqlClient.SqlClient
  readonly table: string
  readonly transports: ReadonlyMap<string, ResolvedTransport>
  readonly wakeups: LocalWakeups
  readonly toError: (transport: string, operation: string, error: SqlError) => TransportError | StorageNotReadyError
}

/**
 * After a hint sent inside a transaction, the waits of a session whose claims find nothing start this short (ms)
 * and double up to `lastChaseMs`: the producer's commit is usually milliseconds away, and nothing tells when it
 * comes. At most nine claims per such hint; then the poll interval again.
 */
const firstChaseMs = 1
const lastChaseMs = 256

/** The results of a multi-statement text: one per statement (a single statement's rows come bare). */
const lastResult = (results: ReadonlyArray<unknown>, statements: number): unknown =>
  statements === 1 ? results : results[results.length - 1]

/** @internal */
export const open = (options: SessionOptions) =>
(
  names: ReadonlyArray<string>
): Effect.Effect<Session, UnknownTransportError, Scope.Scope> =>
  Effect.gen(function*() {
    const { sql, transports } = options
    yield* checkKnown(names, transports)
    const own = new Set(names)
    const subscription = yield* options.wakeups.subscribe(names.map((name) => transports.get(name)!.queueName))
    const texts = claimTexts(options.table)
    // A hint sent inside a transaction came, and the claims since found nothing: the next wait lasts this long.
    let chaseMs: number | undefined

    /**
     * The claim's statements on `connection`; `own` when the claim is its own transaction (begun and committed
     * here), otherwise it joins the caller's.
     */
    const run = (
      connection: Connection,
      ownTransaction: boolean,
      queue: string,
      leaseMs: number,
      batch: number,
      acks: ReadonlyArray<string>
    ): Effect.Effect<Claimed & { readonly rows: ReadonlyArray<StoredRow> }, SqlError> =>
      Effect.gen(function*() {
        const leaseUs = Math.round(leaseMs * 1000)
        const withAcks = acks.length > 0
        const lock = texts.lock(batch, withAcks, ownTransaction)
        const params = withAcks ? [queue, idValues(acks), queue, leaseUs] : [queue, leaseUs]
        const sentAt = performance.now()
        const results = yield* connection.executeUnprepared(lock.text, params, undefined)
        const rows = lastResult(results, lock.statements) as ReadonlyArray<StoredRow>
        if (rows.length > 0) {
          const leased = [idValues(rows.map((row) => row.id))]
          yield* connection.executeUnprepared(texts.lease(ownTransaction), leased, undefined)
          return { rows, messages: [], nextDue: Option.none() }
        }
        const due = yield* connection.executeUnprepared(
          texts.nextDue(ownTransaction),
          [queue, queue, leaseUs],
          undefined
        )
        const [row] = (ownTransaction ? due[0] : due) as ReadonlyArray<
          { readonly delayed_us: number | string | null; readonly lease_us: number | string | null }
        >
        return { rows, messages: [], nextDue: nextDue(sentAt, row?.delayed_us ?? null, row?.lease_us ?? null) }
      })

    /** Its own transaction on a pooled connection, rolled back on any failure (the connection goes back clean). */
    const ownTransaction = (
      queue: string,
      leaseMs: number,
      batch: number,
      acks: ReadonlyArray<string>
    ) =>
      Effect.scoped(Effect.flatMap(sql.reserve, (connection) =>
        run(connection, true, queue, leaseMs, batch, acks).pipe(
          Effect.onExit((exit) =>
            Exit.isSuccess(exit) ? Effect.void : Effect.ignore(connection.executeRaw("ROLLBACK", []))
          )
        )))

    const claim: Session["claim"] = (name, batchSize, acks) =>
      Effect.withFiberRuntime<Claimed, TransportError | UnknownTransportError | StorageNotReadyError>((fiber) => {
        const transport = transports.get(name)
        if (transport === undefined || !own.has(name)) return Effect.fail(unknownTransport(name, names))
        const { queueName, redeliverTimeoutMs } = transport
        const batch = Math.max(1, Math.floor(batchSize))
        const tx = Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)
        const claimed = Option.isSome(tx)
          ? run(tx.value[0], false, queueName, redeliverTimeoutMs, batch, acks)
          : ownTransaction(queueName, redeliverTimeoutMs, batch, acks)
        return Effect.mapBoth(claimed, {
          onFailure: (error) => options.toError(name, acks.length === 0 ? "claim" : "ackAndClaim", error),
          onSuccess: ({ nextDue, rows }): Claimed => {
            if (rows.length === 0) return { messages: [], nextDue }
            chaseMs = undefined
            return { messages: rows.map(toReceived(name)).sort(byAvailability), nextDue }
          }
        })
      })

    const waitFor = (maxWait: Duration.Duration) =>
      Effect.map(options.wakeups.wait(subscription, maxWait), (hint) => {
        if (hint?.pending === true) chaseMs = firstChaseMs
      })

    return {
      transports: names,
      claim,
      wait: (maxWait) =>
        Effect.suspend(() => {
          if (chaseMs === undefined) return waitFor(maxWait)
          const ms = Math.min(chaseMs, Duration.toMillis(maxWait))
          chaseMs = chaseMs * 2 > lastChaseMs ? undefined : chaseMs * 2
          return waitFor(Duration.millis(ms))
        })
    }
  })

const toReceived = (name: string) => (row: StoredRow): ReceivedMessage => ({
  id: row.id,
  transport: name,
  messageId: row.message_id,
  body: row.body,
  headers: row.headers,
  createdAt: dateOf(row.created_us),
  availableAt: dateOf(row.available_us),
  // As counted by the lease the claim wrote (which stops at the column's limit).
  deliveries: Math.min(Number(row.delivery_count) + 1, maxDeliveryCount),
  crashes: row.delivered_us !== null && Number(row.lease_state) === 2
    ? Math.min(Number(row.crash_count) + 1, maxDeliveryCount)
    : Number(row.crash_count),
  redelivered: row.delivered_us !== null
})

/**
 * When to claim again, from the server's answer: microseconds until the next delayed message is due and until the
 * oldest lease runs out (`null`: none of either).
 */
const nextDue = (
  sentAt: number,
  delayedUs: number | string | null,
  leaseUs: number | string | null
): Option.Option<Duration.Duration> => {
  const candidates = [delayedUs, leaseUs].filter((us) => us !== null).map((us) => Math.max(0, Number(us) / 1000))
  return untilDue(sentAt, candidates.length === 0 ? null : Math.min(...candidates))
}
