/**
 * The storage a message travels through: send, claim, ack, retry, fail, keepalive.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { OutgoingMessage, ReceivedMessage, StoredMessage, TransportStats } from "../domain/Envelope.js"
import type { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"

/**
 * A transport backend serving one or more named transports (for PostgreSQL: queues of one table).
 * Every method names the transport it acts on. Ids are the transport's own ids, as returned by `claim`.
 *
 * Semantics every implementation keeps (checked by the conformance suite):
 * - `send` is atomic for the whole batch; the PostgreSQL layer runs it on the caller's connection,
 *   so it joins the caller's transaction.
 * - `claim` returns at most `batchSize` ready messages in `(availableAt, id)` order, none held by
 *   another claimer, and leases them (`deliveredAt`) for the transport's redeliver timeout.
 * - `ack` deletes; `retry` makes the same message available again after `delay` with new headers;
 *   `fail` moves it to the transport's failure queue with new headers — both in place, never a copy.
 * - `keepalive` renews leases; `release` gives claimed-but-unstarted messages back at once.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportShape {
  /** The transport names this backend serves. */
  readonly names: ReadonlyArray<string>
  /** The lease (redeliver timeout) of a transport, when it has one; the worker renews leases every third of it. */
  readonly lease: (transport: string) => Option.Option<Duration.Duration>
  /** The transport a transport's failed messages move to (itself for a failure transport). */
  readonly failureTransport: (transport: string) => Option.Option<string>
  /** Creates or migrates the storage; idempotent. Returns the migrations it applied (none when up to date). */
  readonly setup: Effect.Effect<ReadonlyArray<string>, TransportError | OutboxConfigError>
  readonly send: (
    transport: string,
    messages: ReadonlyArray<OutgoingMessage>
  ) => Effect.Effect<void, TransportError | UnknownTransportError>
  readonly claim: (
    transport: string,
    batchSize: number
  ) => Effect.Effect<ReadonlyArray<ReceivedMessage>, TransportError | UnknownTransportError>
  readonly ack: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void, TransportError>
  /**
   * Optional: `ack(ids)` and `claim(batchSize)` in one round trip and, for PostgreSQL, one transaction —
   * both happen or neither. The worker lets the acks of a finished batch ride on its next claim when the
   * backend has it, and writes them on their own otherwise.
   */
  readonly ackAndClaim?: (
    transport: string,
    ids: ReadonlyArray<string>,
    batchSize: number
  ) => Effect.Effect<ReadonlyArray<ReceivedMessage>, TransportError | UnknownTransportError>
  readonly retry: (
    transport: string,
    id: string,
    options: { readonly delay: Duration.Duration; readonly headers: string }
  ) => Effect.Effect<void, TransportError>
  /**
   * Moves a message to the transport's failure transport with new headers. `message` is the message as
   * claimed: a backend whose failure transport lives on another backend (a broker's failures kept in
   * PostgreSQL, see `TransportRouter`) sends it there and then acks the original; in-place backends ignore it.
   */
  readonly fail: (
    transport: string,
    id: string,
    options: { readonly headers: string; readonly message?: ReceivedMessage | undefined }
  ) => Effect.Effect<void, TransportError>
  readonly keepalive: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void, TransportError>
  /** Gives claimed-but-unstarted messages back at once; their claim does not count as a delivery. */
  readonly release: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void, TransportError>
  /**
   * Messages of a transport's queue in any state, by id, at most `max`; with `type`, only that message type
   * (headers that cannot be decoded never match a type).
   */
  readonly list: (
    transport: string,
    options: { readonly max: number; readonly type?: string | undefined }
  ) => Effect.Effect<ReadonlyArray<StoredMessage>, TransportError | UnknownTransportError>
  /** One message of a transport's queue by its transport id. */
  readonly find: (
    transport: string,
    id: string
  ) => Effect.Effect<Option.Option<StoredMessage>, TransportError | UnknownTransportError>
  /** Deletes messages of a transport's queue; ids elsewhere are left alone. Returns how many were deleted. */
  readonly remove: (
    transport: string,
    ids: ReadonlyArray<string>
  ) => Effect.Effect<number, TransportError | UnknownTransportError>
  /**
   * Moves one message from a transport's queue to another transport, ready now, with new headers and the
   * same message id — in place. Returns false when the id is not in the `from` queue.
   */
  readonly move: (
    from: string,
    id: string,
    options: { readonly to: string; readonly headers: string }
  ) => Effect.Effect<boolean, TransportError | UnknownTransportError>
  /**
   * Milliseconds until the next message of a transport becomes claimable — a delay or retry backoff running
   * out, or another worker's lease expiring; 0 when one is claimable now (it became due after the last claim) —
   * or `None` when nothing is waiting. Computed on the store's clock.
   */
  readonly nextDue: (transport: string) => Effect.Effect<Option.Option<number>, TransportError | UnknownTransportError>
  /**
   * Subscribes, for the scope's life, to wake-up hints for these transports (new or released messages). The
   * returned function waits for the next hint, or `maxWait` at most; hints are coalesced. A backend without
   * notifications only waits `maxWait`: polling stays the truth. A backend may also dedicate resources to the
   * subscribing fiber for the scope's life (PostgreSQL: the fiber's claims run on a connection of its own).
   */
  readonly wakeups: (
    transports: ReadonlyArray<string>
  ) => Effect.Effect<(maxWait: Duration.Duration) => Effect.Effect<void>, never, Scope.Scope>
  /** Counts of a transport's queue. */
  readonly stats: (transport: string) => Effect.Effect<TransportStats, TransportError | UnknownTransportError>
}

/**
 * The transport service.
 *
 * @since 0.1.0
 * @category tags
 */
export class Transport extends Context.Tag("effect-outbox/Transport")<Transport, TransportShape>() {}
