/**
 * A message with its identity and stamps, as handlers receive it.
 *
 * @since 0.1.0
 */
import { encode as encodeHeaders, type Headers } from "./Headers.js"
import type { Tagged } from "./Message.js"
import type { MessageId } from "./MessageId.js"

/**
 * A received message: the decoded message, its stable id, its stored headers (stamps), the
 * transport it came from and the transport's own row id.
 *
 * @since 0.1.0
 * @category models
 */
export interface Envelope<A extends Tagged = Tagged> {
  readonly message: A
  readonly messageId: MessageId
  readonly headers: Headers
  /** The transport name it was received from. */
  readonly transport: string
  /**
   * The transport's own id of this delivery (the row id for PostgreSQL, stable for the message's life; a
   * broker's delivery tag, new on every delivery). Never the dedupe key: that is `messageId`.
   */
  readonly transportId: string
  /**
   * Which delivery this is, from 1: every claim where the transport counts deliveries (PostgreSQL, memory),
   * otherwise 1 + the recorded retries (a broker).
   */
  readonly deliveries: number
  /**
   * The body exactly as stored (JSON text), set by the worker: what a forwarder sends on unchanged
   * (see `Forwarder`), so the far side gets the same bytes even when decoding and encoding again would not.
   */
  readonly body?: string | undefined
  /** The message's ordering key, when it was sent with one (see `Outbox.DispatchOptions.orderingKey`). */
  readonly orderingKey?: string | undefined
}

/**
 * A message ready to be stored: what `Outbox.dispatch` hands to a transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface OutgoingMessage {
  readonly messageId: MessageId
  readonly type: string
  readonly body: string
  readonly headers: string
  readonly delayMs: number
  /**
   * The W3C trace context stamped in `headers` (when a tracer was installed at dispatch): a broker transport also
   * publishes it as the broker's own `traceparent`/`tracestate` headers, for consumers that are not this library.
   */
  readonly traceparent?: string
  readonly tracestate?: string
  /**
   * The ordering key (see `Outbox.DispatchOptions.orderingKey`): messages of one key on one transport are handled
   * one at a time, in the order they were sent. Only transports with the `orderingKeys` capability take one.
   */
  readonly orderingKey?: string
}

/**
 * A stored message as a transport returns it from a claim: still raw, so that a row that cannot
 * be decoded can be moved to the failure queue instead of being lost.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReceivedMessage {
  /** The transport's own id (row id). */
  readonly id: string
  readonly transport: string
  readonly messageId: string
  readonly body: string
  readonly headers: string
  readonly createdAt: Date
  readonly availableAt: Date
  readonly deliveries: number
  /** The message's ordering key, when it was sent with one. */
  readonly orderingKey?: string
  /**
   * The deliveries charged to the message (where the transport counts deliveries): its handler ran alone, after a
   * redelivery, and its worker died or lost the lease before an outcome. Absent: `deliveries - 1 - retries`.
   */
  readonly crashes?: number
  /**
   * Its previous lease ended with no outcome (neither acked, retried, released nor failed): it may have killed its
   * worker. The worker records its start (`Transport.start`) and runs it alone, so a crash is charged to it only.
   */
  readonly redelivered?: boolean
}

/**
 * A stored message in any state, as the operator commands see it.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoredMessage extends ReceivedMessage {
  /** Lease start of the worker holding it, `null` when nobody does. */
  readonly deliveredAt: Date | null
  /** In a failure transport: its ordering key waits for it (`keyAfterFailure: "block"`) until it is retried or removed. */
  readonly blocksKey?: boolean
}

/**
 * Counts of one transport's queue, for `stats`.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportStats {
  readonly transport: string
  readonly queue: string
  /** Claimable now. */
  readonly ready: number
  /** Waiting for a delay or a retry backoff. */
  readonly delayed: number
  /** Held by a worker's lease. */
  readonly inFlight: number
  /** Waiting in this transport's failure transport. */
  readonly failed: number
  /** How long the oldest ready message has been waiting (null when none): the sign of a dead or slow worker. */
  readonly oldestReadyAgeMs: number | null
  /**
   * Ordering keys whose later messages wait for a message in the failure transport (`keyAfterFailure: "block"`),
   * until an operator retries or removes it; 0 on a transport without ordering keys.
   */
  readonly blockedKeys: number
  /** A broker with consumer groups (Kafka): the group's lag per partition of the transport's topics. */
  readonly partitions?: ReadonlyArray<PartitionLag>
  /** A CDC transport (PgCdcTransport): the replication slot its connector reads, `null` when it does not exist. */
  readonly slot?: SlotLag | null
}

/**
 * A replication slot's state: whether a connector reads it now, the WAL the server retains for it (from its restart
 * point: what a stopped connector makes the disk hold) and what the connector has yet to confirm.
 *
 * @since 0.1.0
 * @category models
 */
export interface SlotLag {
  readonly name: string
  readonly active: boolean
  readonly retainedBytes: number
  readonly pendingBytes: number
  /** PostgreSQL's `wal_status`: `reserved`, `extended`, `unreserved` or `lost` (past `max_slot_wal_keep_size`). */
  readonly walStatus: string | null
}

/**
 * How far a consumer group is behind on one partition: the offset it committed (`null` when none) and the
 * partition's end offset.
 *
 * @since 0.1.0
 * @category models
 */
export interface PartitionLag {
  readonly topic: string
  readonly partition: number
  readonly committed: number | null
  readonly end: number
  readonly lag: number
}

/**
 * The message to send when a received or stored message moves on to another transport — across backends, or
 * forwarded to a broker: the same message id and body, the given headers (their type is the message type),
 * ready at once. The one place such a copy is built.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resend = (
  message: Pick<ReceivedMessage | StoredMessage, "messageId" | "body" | "orderingKey">,
  headers: Headers
): OutgoingMessage => ({
  messageId: message.messageId as MessageId,
  type: headers.type,
  body: message.body,
  headers: encodeHeaders(headers),
  delayMs: 0,
  ...(headers.traceparent !== undefined ? { traceparent: headers.traceparent } : {}),
  ...(headers.tracestate !== undefined ? { tracestate: headers.tracestate } : {}),
  ...(message.orderingKey !== undefined ? { orderingKey: message.orderingKey } : {})
})
