/**
 * Lease renewal: every held message's lease is renewed every third of the shortest lease, in a fiber of its
 * own, so a slow handler is never redelivered while its worker lives.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type { TransportShape } from "../../services/Transport.js"
import * as OutboxMetrics from "../OutboxMetrics.js"
import type { Acks } from "./acks.js"
import type { RunState } from "./state.js"

/** Runs until interrupted; nothing to do for transports without leases. @internal */
export const run = (
  acks: Acks,
  transport: TransportShape,
  names: ReadonlyArray<string>,
  state: Pick<RunState, "metrics">
): Effect.Effect<void> => {
  const leased = names.filter((name) => Option.isSome(transport.lease(name)))
  const leases = leased.flatMap((name) => Option.toArray(transport.lease(name)).map(Duration.toMillis))
  if (leases.length === 0) return Effect.void
  const every = Duration.millis(Math.max(10, Math.min(...leases) / 3))
  const beat = Effect.forEach(leased, (name) => {
    const held = acks.held.get(name)
    if (held === undefined || held.size === 0) return Effect.void
    return transport.keepalive(name, Array.from(held)).pipe(
      Effect.tap(() => {
        if (state.metrics) OutboxMetrics.leaseRenewals.unsafeUpdate(1, OutboxMetrics.transportLabels(name))
      }),
      Effect.catchAll((error) => Effect.logWarning("outbox worker: lease renewal failed", error))
    )
  }, { discard: true })
  return beat.pipe(Effect.repeat(Schedule.spaced(every)), Effect.delay(every), Effect.asVoid, Effect.interruptible)
}
