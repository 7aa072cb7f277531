/**
 * What every backend resolves the same way: failure-transport defaulting, lease validation and the
 * unknown-transport error.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { TransportStats } from "../domain/Envelope.js"
import { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import { defaultFailureTransport } from "../domain/Routing.js"
import type { Capabilities } from "../services/Transport.js"
import type { TransportBackend } from "../services/TransportAdmin.js"

/** The one error for a transport name nobody serves, naming the known ones. @internal */
export const unknownTransport = (name: string, known: Iterable<string>): UnknownTransportError =>
  new UnknownTransportError({
    transport: name,
    message: `Unknown transport ${JSON.stringify(name)}; known: ${Array.from(known).join(", ")}`
  })

/** Fails with `unknownTransport` for every name of `names` that `known` lacks. @internal */
export const checkKnown = (
  names: ReadonlyArray<string>,
  known: { has: (name: string) => boolean; keys: () => Iterable<string> }
): Effect.Effect<void, UnknownTransportError> => {
  for (const name of names) {
    if (!known.has(name)) return Effect.fail(unknownTransport(name, known.keys()))
  }
  return Effect.void
}

/**
 * The failure transport of each configured transport: its own option, else `failed` — and a failure transport
 * keeps its own failures (a failed message is never discarded). Returns the configured names first, then the
 * failure transports that were not configured.
 *
 * @internal
 */
export const failureTransports = <O extends { readonly failureTransport?: string | undefined }>(
  input: Readonly<Record<string, O>>
): ReadonlyArray<readonly [name: string, failureTransport: string, options: O | undefined]> => {
  const entries = Object.entries(input)
  const failureNames = new Set(entries.map(([, o]) => o.failureTransport ?? defaultFailureTransport))
  const resolved: Array<readonly [string, string, O | undefined]> = entries.map(([name, o]) => [
    name,
    o.failureTransport ?? (failureNames.has(name) ? name : defaultFailureTransport),
    o
  ])
  for (const name of failureNames) {
    if (!(name in input)) resolved.push([name, name, undefined])
  }
  return resolved
}

/** A positive, finite duration, or the typed error naming the option. @internal */
export const positiveDuration = (
  what: string,
  input: Duration.DurationInput
): Effect.Effect<Duration.Duration, OutboxConfigError> => {
  const decoded = Duration.decodeUnknown(input)
  return Option.isSome(decoded) && Duration.toMillis(decoded.value) > 0 && Duration.isFinite(decoded.value)
    ? Effect.succeed(decoded.value)
    : Effect.fail(new OutboxConfigError({ message: `${what} must be a positive, finite duration` }))
}

/** What a transport that stores nothing it can lease, browse or count declares (a broker, the sync transport). @internal */
export const noCapabilities: Capabilities = {
  leases: false,
  browsing: false,
  countsDeliveries: false,
  stableIds: false,
  ackWithClaim: false,
  orderingKeys: false
}

/**
 * What a backend that stores messages as rows does (PostgreSQL, and the in-memory transport that mirrors it):
 * everything a transport can.
 *
 * @internal
 */
export const rowCapabilities: Capabilities = {
  leases: true,
  browsing: true,
  countsDeliveries: true,
  stableIds: true,
  ackWithClaim: true,
  orderingKeys: false
}

/** A `TransportError` of a backend's operation. @internal */
export const transportError = (
  transport: string,
  operation: string,
  message: string,
  cause?: unknown
): TransportError => new TransportError({ transport, operation, message, ...(cause === undefined ? {} : { cause }) })

/**
 * Fails when a broker layer used alone would send a transport's failures nowhere: its failure transport must be one
 * of its own transports, else the layer must be combined with the backend that serves it.
 *
 * @internal
 */
export const checkOwnFailureTransports = (
  broker: string,
  backend: {
    readonly names: ReadonlyArray<string>
    readonly failureTransport: (name: string) => Option.Option<string>
  }
): Effect.Effect<void, OutboxConfigError> => {
  for (const name of backend.names) {
    const failure = Option.getOrElse(backend.failureTransport(name), () => name)
    if (!backend.names.includes(failure)) {
      return Effect.fail(
        new OutboxConfigError({
          message: `${broker} transport ${name}: its failure transport ${failure} is not one of its transports; ` +
            `declare it, or combine with PgTransport through TransportRouter.layer to keep failures in PostgreSQL`
        })
      )
    }
  }
  return Effect.void
}

/**
 * The operations of a backend that stores nothing a worker could consume or an operator browse (the sync and CDC
 * transports): no leases, no failure transport, acks and releases that only check the name, and a worker's
 * session, retries, failures and the operator's reads refused with the backend's own words.
 *
 * @internal
 */
export const storesNothing = (options: {
  readonly names: ReadonlyArray<string>
  readonly lookup: (name: string) => Effect.Effect<unknown, UnknownTransportError>
  /** Why `operation` is not supported on transport `name`. */
  readonly unsupported: (name: string, operation: string) => string
  /** Why a worker has nothing to consume on transport `name`. */
  readonly nothingToConsume: (name: string) => string
}): Pick<
  TransportBackend,
  | "lease"
  | "failureTransport"
  | "open"
  | "ack"
  | "keepalive"
  | "start"
  | "release"
  | "retry"
  | "fail"
  | "list"
  | "find"
  | "remove"
  | "move"
> => {
  const { lookup } = options
  const unsupported = (name: string, operation: string) =>
    Effect.zipRight(
      lookup(name),
      Effect.fail(new TransportError({ transport: name, operation, message: options.unsupported(name, operation) }))
    )
  return {
    lease: () => Option.none(),
    // Nothing of it fails into a queue: its failures go back to the caller.
    failureTransport: () => Option.none(),
    open: (wanted) =>
      Effect.gen(function*() {
        for (const name of wanted) yield* lookup(name)
        const name = wanted[0] ?? options.names[0]!
        return yield* new UnknownTransportError({ transport: name, message: options.nothingToConsume(name) })
      }),
    ack: (name) => Effect.asVoid(lookup(name)),
    keepalive: (name) => Effect.asVoid(lookup(name)),
    start: (message) => Effect.as(lookup(message.transport), true),
    release: (name) => Effect.asVoid(lookup(name)),
    retry: (message) => unsupported(message.transport, "retry"),
    fail: (message) => unsupported(message.transport, "fail"),
    list: (name) => unsupported(name, "list"),
    find: (name) => unsupported(name, "find"),
    remove: (name) => unsupported(name, "remove"),
    move: (from) => unsupported(from, "move")
  }
}

/** The counts of a transport that holds nothing (the sync and CDC transports). @internal */
export const emptyStats = (name: string): TransportStats => ({
  transport: name,
  queue: name,
  ready: 0,
  delayed: 0,
  inFlight: 0,
  failed: 0,
  oldestReadyAgeMs: null,
  blockedKeys: 0
})
