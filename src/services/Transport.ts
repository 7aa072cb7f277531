/**
 * The storage a message travels through: send, claim, ack, retry, fail, keepalive.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { OutgoingMessage, ReceivedMessage } from "../domain/Envelope.js"
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
  /** Creates or migrates the storage; idempotent. */
  readonly setup: Effect.Effect<void, TransportError | OutboxConfigError>
  readonly send: (
    transport: string,
    messages: ReadonlyArray<OutgoingMessage>
  ) => Effect.Effect<void, TransportError | UnknownTransportError>
  readonly claim: (
    transport: string,
    batchSize: number
  ) => Effect.Effect<ReadonlyArray<ReceivedMessage>, TransportError | UnknownTransportError>
  readonly ack: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void, TransportError>
  readonly retry: (
    transport: string,
    id: string,
    options: { readonly delay: Duration.Duration; readonly headers: string }
  ) => Effect.Effect<void, TransportError>
  readonly fail: (
    transport: string,
    id: string,
    options: { readonly headers: string }
  ) => Effect.Effect<void, TransportError>
  readonly keepalive: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void, TransportError>
  readonly release: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void, TransportError>
}

/**
 * The transport service.
 *
 * @since 0.1.0
 * @category tags
 */
export class Transport extends Context.Tag("effect-outbox/Transport")<Transport, TransportShape>() {}
