/**
 * Routing: which transports a message type is sent to.
 *
 * @since 0.1.0
 */

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
