/**
 * A message with its identity and stamps, as handlers receive it.
 *
 * @since 0.1.0
 */
import type { Headers } from "./Headers.js"
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
  /** The transport's internal id (the row id for PostgreSQL); changes never, but is not the dedupe key. */
  readonly transportId: string
  /** How many times a worker has claimed it (1 on the first delivery). */
  readonly deliveries: number
  /**
   * The body exactly as stored (JSON text), set by the worker: what a forwarder sends on unchanged
   * (see `Forwarder`), so the far side gets the same bytes even when decoding and encoding again would not.
   */
  readonly body?: string | undefined
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
}
