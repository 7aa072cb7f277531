/**
 * The operator side of a transport backend: setup, browsing, removal, moves and counts — what the command
 * line, the demos and a dashboard use. Never on a worker's hot path.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Option from "effect/Option"
import type { StoredMessage, TransportStats } from "../domain/Envelope.js"
import type { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import type * as Headers from "../domain/Headers.js"
import { Transport, type TransportShape } from "./Transport.js"

/**
 * What `list` returns: at most `max` messages, by id, after the id `after` (exclusive) when given. Each filter given
 * keeps only the messages whose headers say so — `type`, the tag of the last error (`errorTag`), the transport a
 * failed message came from (`originalTransport`); headers that cannot be decoded match no filter. An `after` that is
 * not an id of the backend lists nothing.
 *
 * @since 0.1.0
 * @category models
 */
export interface ListOptions {
  readonly max: number
  readonly after?: string | undefined
  readonly type?: string | undefined
  readonly errorTag?: string | undefined
  readonly originalTransport?: string | undefined
}

/**
 * Operator operations. The browsing ones (`list`, `find`, `remove`, `move`) need the transport's `browsing`
 * capability (see `Transport.Capabilities`); on a transport without it they fail with a `TransportError`
 * that says so.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportAdminShape {
  /** Creates or migrates the storage; idempotent. Returns the migrations it applied (none when up to date). */
  readonly setup: Effect.Effect<ReadonlyArray<string>, TransportError | OutboxConfigError>
  /**
   * Messages of a transport's queue in any state, by id, at most `max`, those after the id `after` when given
   * (keyset paging: the next page starts after the last id of the previous one); filtered by `ListOptions`.
   */
  readonly list: (
    transport: string,
    options: ListOptions
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
   * same message id. Returns false when the id is not in the `from` queue.
   */
  readonly move: (
    from: string,
    id: string,
    options: { readonly to: string; readonly headers: Headers.Headers }
  ) => Effect.Effect<boolean, TransportError | UnknownTransportError>
  /** Counts of a transport's queue. */
  readonly stats: (transport: string) => Effect.Effect<TransportStats, TransportError | UnknownTransportError>
}

/**
 * The operator-side service.
 *
 * @since 0.1.0
 * @category tags
 */
export class TransportAdmin
  extends Context.Tag("effect-outbox/TransportAdmin")<TransportAdmin, TransportAdminShape>()
{}

/**
 * A backend implements both sides; its layers provide `Transport` and `TransportAdmin`.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportBackend extends TransportShape, TransportAdminShape {}

/**
 * A backend, as `make` builds it, provided as both `Transport` and `TransportAdmin`.
 *
 * @since 0.1.0
 * @category layers
 */
export const backendLayer = <E, R>(
  make: Effect.Effect<TransportBackend, E, R>
): Layer.Layer<Transport | TransportAdmin, E, R> =>
  Layer.effectContext(
    Effect.map(make, (backend) => Context.make(Transport, backend).pipe(Context.add(TransportAdmin, backend)))
  )
