/**
 * What a table transport's session does with a claim's answer, whatever the dialect: the order of the messages it
 * hands out, and when to claim again after an empty claim.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import { compareIds } from "../../internal/compareIds.js"

/** `(availableAt, id)` order, as `Claimed.messages` are. @internal */
export const byAvailability = (a: ReceivedMessage, b: ReceivedMessage): number => {
  const d = a.availableAt.getTime() - b.availableAt.getTime()
  return d !== 0 ? d : compareIds(a.id, b.id)
}

/**
 * When to claim again for a message due in `ms` (as the server counted when the statement started; `null`: nothing
 * waits). Counted from the statement's send (`sentAt`, `performance.now()`), not its answer: an answer can take
 * milliseconds to arrive on a machine woken from an idle, and counting from its arrival would wake the worker late. A
 * long wait ends early — long timers fire late and the first statement after an idle answers slowly — so the claim
 * then finds nothing yet and says how long is left, and a short second wait ends at the due time.
 *
 * @internal
 */
export const untilDue = (sentAt: number, ms: number | null): Option.Option<Duration.Duration> => {
  if (ms === null) return Option.none()
  const left = Math.max(0, sentAt + ms - performance.now())
  return Option.some(Duration.millis(left > 20 ? Math.floor(left * 0.95) - 10 : Math.ceil(left) + 1))
}
