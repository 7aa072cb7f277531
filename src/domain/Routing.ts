/**
 * Routing: which transports a message type is sent to.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"

/**
 * A map from message tag to transport names. Types without a route go to the default transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface Routing {
  readonly routes?: Readonly<Record<string, ReadonlyArray<string>>>
  readonly defaultTransports?: ReadonlyArray<string>
}

/**
 * The default transport name (`outbox`).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTransport = "outbox"

/**
 * The default failure transport name (`failed`).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultFailureTransport = "failed"

/**
 * The default lease of a claim (a transport's redeliver timeout).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultRedeliverTimeout: Duration.Duration = Duration.seconds(30)

/**
 * Resolves the transports for a message type. An explicit override (the `transportNames` dispatch
 * option) wins over the routes, as Symfony's `TransportNamesStamp` does.
 *
 * @since 0.1.0
 * @category resolution
 */
export const resolve = (
  routing: Routing,
  type: string,
  override?: ReadonlyArray<string>
): ReadonlyArray<string> => {
  if (override !== undefined && override.length > 0) return dedupe(override)
  const routed = routing.routes?.[type]
  if (routed !== undefined && routed.length > 0) return dedupe(routed)
  return dedupe(routing.defaultTransports ?? [defaultTransport])
}

const dedupe = (names: ReadonlyArray<string>): ReadonlyArray<string> => Array.from(new Set(names))
