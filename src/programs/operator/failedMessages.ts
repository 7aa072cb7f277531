/**
 * What `failed:retry` and `failed:remove` do to failed messages, in one place: the command line and the dashboard
 * both call these, so a retry or a removal is the same whichever asked for it.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { StoredMessage } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"
import { TransportAdmin } from "../../services/TransportAdmin.js"

/** A failed message that can be sent back: where to, and with which headers. @internal */
export interface RetryStep {
  readonly message: StoredMessage
  readonly to: string
  readonly headers: Headers.Headers
}

/** The retry of a selection: the messages that can go back, and why each other one cannot. @internal */
export interface RetryPlan {
  readonly steps: ReadonlyArray<RetryStep>
  readonly refused: ReadonlyArray<string>
}

/**
 * Plans the retry of failed messages of the `from` failure transport, `served` being the transports that can take
 * them back. A message whose plan is refused stays where it is.
 *
 * @internal
 */
export const planRetry = (
  messages: ReadonlyArray<StoredMessage>,
  from: string,
  served: ReadonlyArray<string>
): RetryPlan => {
  const steps: Array<RetryStep> = []
  const refused: Array<string> = []
  for (const message of messages) {
    const checked = retryStep(message, from, served)
    if (Either.isLeft(checked)) refused.push(checked.left)
    else steps.push({ message, ...checked.right })
  }
  return { steps, refused }
}

/**
 * Sends the planned messages back to their transports, ready now; `onMoved` hears of each one moved. Returns the
 * steps done (a message removed or retried by someone else meanwhile is not among them).
 *
 * @internal
 */
export const applyRetry = <E = never, R = never>(
  from: string,
  steps: ReadonlyArray<RetryStep>,
  onMoved: (step: RetryStep) => Effect.Effect<void, E, R> = () => Effect.void
) =>
  Effect.gen(function*() {
    const admin = yield* TransportAdmin
    const moved: Array<RetryStep> = []
    for (const step of steps) {
      if (yield* admin.move(from, step.message.id, { to: step.to, headers: step.headers })) {
        moved.push(step)
        yield* onMoved(step)
      }
    }
    return moved
  })

/** Deletes messages of a failure transport, a thousand ids per statement. Returns how many were deleted. @internal */
export const removeMessages = (from: string, messages: ReadonlyArray<StoredMessage>) =>
  Effect.gen(function*() {
    const admin = yield* TransportAdmin
    let removed = 0
    for (let i = 0; i < messages.length; i += 1000) {
      removed += yield* admin.remove(from, messages.slice(i, i + 1000).map((m) => m.id))
    }
    return removed
  })

/**
 * Where a failed message goes back to and with which headers, or why it cannot: its headers cannot be read, its
 * original headers were corrupt (the worker kept their text in `rawHeaders`; sent back, it would fail again as an
 * unknown type and lose its reason), or it came from a transport nobody serves. A retry is a new start: the retry
 * budget and the last error are cleared; handlers that already succeeded stay skipped.
 */
const retryStep = (
  message: StoredMessage,
  from: string,
  served: ReadonlyArray<string>
): Either.Either<{ readonly to: string; readonly headers: Headers.Headers }, string> => {
  const decoded = Headers.decode(message.headers)
  if (Either.isLeft(decoded)) {
    return Either.left(`Message "${message.id}" has corrupt headers: it can only be shown or removed.`)
  }
  const headers = decoded.right
  if (headers.rawHeaders !== undefined) {
    return Either.left(
      `Message "${message.id}" cannot be retried: its original headers were corrupt, so its type and stamps are ` +
        `unknown (failed:show ${message.id} -v shows them); it can only be shown or removed.`
    )
  }
  const to = headers.originalTransport ?? from
  if (!served.includes(to)) {
    return Either.left(
      `Message "${message.id}" came from the unknown transport "${to}" (known: ${served.join(", ")}): ` +
        `pass --transport-queue ${to}=QUEUE to name its queue.`
    )
  }
  const { errorDetails: _e, originalTransport: _o, redeliveries: _r, ...rest } = headers
  return Either.right({ to, headers: new Headers.Headers(rest) })
}
