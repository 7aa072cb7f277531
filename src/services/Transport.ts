/**
 * The storage a message travels through, as producers and workers see it: send, open a worker session,
 * ack, retry, fail, renew leases, release. The operator side (setup, browsing, stats) is `TransportAdmin`.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { OutgoingMessage, ReceivedMessage } from "../domain/Envelope.js"
import type { StorageNotReadyError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import type * as Headers from "../domain/Headers.js"

/**
 * What a backend does for one of its transports. The worker and the conformance suite read these instead of
 * meeting "not supported" at run time.
 *
 * @since 0.1.0
 * @category models
 */
export interface Capabilities {
  /**
   * Claims are leased for the transport's redeliver timeout and renewed with `keepalive`; a dead worker's
   * messages come back one lease later. Without leases the store holds a claim until it is settled or the
   * claimer's connection closes (a broker).
   */
  readonly leases: boolean
  /** `TransportAdmin.list`, `find`, `remove` and `move` work on this transport. */
  readonly browsing: boolean
  /**
   * Every claim is counted in `deliveries`, and the store charges a message the deliveries it really crashed
   * (poison detection): a claim reports a message whose previous lease ended with no outcome as `redelivered`, the
   * worker records the start of its handler (`start`) and runs it alone, and a lease that ends with no outcome after
   * such a start is counted in `crashes` by the next claim. A delivery whose handler never started (a dead worker's
   * prefetched or unstarted messages), or ran beside others, is never charged. Without it `deliveries` is
   * `1 + retries` and nothing is charged.
   */
  readonly countsDeliveries: boolean
  /** The transport id of a message stays the same for its whole life (in place, never a copy). */
  readonly stableIds: boolean
  /** `Session.claim` carries the acks in the same round trip and transaction as the claim. */
  readonly ackWithClaim: boolean
  /**
   * Messages sent with an ordering key are handed out one at a time per key, in the order they were sent
   * (committed): a claim returns at most one message of a key, and none while an earlier message of the key is
   * claimed and unsettled, waiting for its retry, or — unless the transport skips them — in the failure
   * transport. Without it, sending a message with a key fails with `OutboxConfigError`.
   */
  readonly orderingKeys: boolean
}

/**
 * The answer of one claim: the messages leased, in `(availableAt, id)` order, and — when none was — how long
 * until the next message of the transport may become claimable (a delay or backoff running out, another
 * worker's lease expiring), `None` when nothing waits. A backend may answer early; the next claim then
 * answers again.
 *
 * @since 0.1.0
 * @category models
 */
export interface Claimed {
  readonly messages: ReadonlyArray<ReceivedMessage>
  readonly nextDue: Option.Option<Duration.Duration>
}

/**
 * A worker's session with a backend, for the scope's life: its claims (on a connection of its own where the
 * backend has one) and its wake-up hints. Claims may overlap (a prefetch while a batch runs).
 *
 * @since 0.1.0
 * @category models
 */
export interface Session {
  /** The transports the session was opened for, by priority. */
  readonly transports: ReadonlyArray<string>
  /**
   * Deletes `acks` (ids this session claimed and the worker handled) and leases the next `batchSize` ready
   * messages of `transport`, none held by another claimer. With `ackWithClaim` both happen in one round trip
   * and one transaction; otherwise the acks are written first.
   */
  readonly claim: (
    transport: string,
    batchSize: number,
    acks: ReadonlyArray<string>
  ) => Effect.Effect<Claimed, TransportError | UnknownTransportError | StorageNotReadyError>
  /**
   * Waits for a wake-up hint (a message sent to or released on one of the session's transports), or `maxWait`
   * at most; hints are coalesced. A backend without notifications only waits: polling stays the truth. It fails
   * only when the backend cannot record the wait its producers look for (the PostgreSQL transport's announcement).
   */
  readonly wait: (maxWait: Duration.Duration) => Effect.Effect<void, TransportError | StorageNotReadyError>
}

/**
 * A transport backend serving one or more named transports (for PostgreSQL: queues of one table). Every
 * method names the transport it acts on, and an unknown name is an `UnknownTransportError`, never a defect
 * and never ignored. Ids are the transport's own, as claimed.
 *
 * The contract, checked for each backend by `exerciseTransport` (see `effect-outbox/testing`) within its
 * capabilities:
 * - `send` is atomic for the whole batch; the PostgreSQL layer runs it on the caller's connection, so it
 *   joins the caller's transaction.
 * - a claim returns at most `batchSize` ready messages in `(availableAt, id)` order, none held by another
 *   claimer; with `leases` it leases them for the transport's redeliver timeout.
 * - `ack` deletes; `retry` makes the message available again after `delay` with new headers; `fail` moves it
 *   to the transport's failure transport with new headers — both keep the message id (with `stableIds`, in
 *   place; otherwise as a copy whose original is then acked).
 * - `keepalive` renews leases; `release` gives claimed-but-unstarted messages back at once (their claim does
 *   not count as a delivery).
 * - with `countsDeliveries`, a claim reports a message whose last lease ended with no outcome as `redelivered`;
 *   `start` marks such a message's handler as started, and only a lease that ends with no outcome after that mark
 *   adds one to its `crashes` (the next claim does). Acks, retries, releases and failures never charge one.
 * - ack, retry, fail, keepalive and release touch only messages of the transport they name.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportShape {
  /** The transport names this backend serves. */
  readonly names: ReadonlyArray<string>
  /** What the backend does for a transport (`None` for a name it does not serve). */
  readonly capabilities: (transport: string) => Option.Option<Capabilities>
  /** The lease (redeliver timeout) of a transport, when it has one; the worker renews leases every third of it. */
  readonly lease: (transport: string) => Option.Option<Duration.Duration>
  /** The transport a transport's failed messages move to (itself for a failure transport). */
  readonly failureTransport: (transport: string) => Option.Option<string>
  readonly send: (
    transport: string,
    messages: ReadonlyArray<OutgoingMessage>
  ) => Effect.Effect<void, TransportError | UnknownTransportError | StorageNotReadyError>
  /** Opens a worker session on these transports; fails at once when one of them is unknown. */
  readonly open: (
    transports: ReadonlyArray<string>
  ) => Effect.Effect<Session, UnknownTransportError, Scope.Scope>
  readonly ack: (
    transport: string,
    ids: ReadonlyArray<string>
  ) => Effect.Effect<void, TransportError | UnknownTransportError>
  /** Makes a claimed message available again after `delay`, with new headers. */
  readonly retry: (
    message: ReceivedMessage,
    options: { readonly delay: Duration.Duration; readonly headers: Headers.Headers }
  ) => Effect.Effect<void, TransportError | UnknownTransportError>
  /** Moves a claimed message to its transport's failure transport, with new headers. */
  readonly fail: (
    message: ReceivedMessage,
    headers: Headers.Headers
  ) => Effect.Effect<void, TransportError | UnknownTransportError>
  readonly keepalive: (
    transport: string,
    ids: ReadonlyArray<string>
  ) => Effect.Effect<void, TransportError | UnknownTransportError>
  /** Gives claimed-but-unstarted messages back at once; their claim does not count as a delivery. */
  readonly release: (
    transport: string,
    ids: ReadonlyArray<string>
  ) => Effect.Effect<void, TransportError | UnknownTransportError>
  /**
   * Records, durably and before its handler runs, that a `redelivered` message starts — alone: should its lease end
   * with no outcome, the next claim charges the crash to it. Succeeds with `false`, writing nothing, when the
   * message's lease is no longer the caller's (it must not run). A backend that does not count deliveries answers
   * `true`.
   */
  readonly start: (message: ReceivedMessage) => Effect.Effect<boolean, TransportError | UnknownTransportError>
}

/**
 * The transport service.
 *
 * @since 0.1.0
 * @category tags
 */
export class Transport extends Context.Tag("effect-outbox/Transport")<Transport, TransportShape>() {}
