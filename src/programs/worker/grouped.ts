/**
 * Batch handlers over a claimed batch: before its messages are handled one by one, each batch handler is called
 * once with the batch's messages it runs for, and its exit for each message stands for that message's run of it
 * (`Handle.Prepared`). The one-by-one pass then decides every outcome by the usual rules, so retries, the
 * failure queue, handlers that already succeeded and the other handlers of a message work as for any handler.
 *
 * Left out of a shared call, and run alone in the one-by-one pass: a redelivered message (it may have crashed its
 * worker, and runs alone with its start recorded), one that does not decode, one whose batch handler already
 * succeeded on it, the messages past a message limit, and every message when a tracer is installed (its handlers'
 * work then belongs in its own `process` span). A handler with a single message of the batch runs in that pass too,
 * under the watchdog.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import type { Envelope, ReceivedMessage } from "../../domain/Envelope.js"
import { HandlerTimeoutError } from "../../domain/Errors.js"
import { cut, maxNameLength } from "../../internal/text.js"
import type { HandlersShape, RegisteredHandler } from "../../services/Handlers.js"
import * as Handle from "./handle.js"

/** The exits of a message's shared calls, as built here (the one-by-one pass reads them). */
type Exits = Map<RegisteredHandler, Exit.Exit<unknown, unknown>>

/** The messages of one batch handler in a claimed batch: their indices in the batch and their envelopes. */
interface Group {
  readonly indices: Array<number>
  readonly envelopes: Array<Envelope>
}

/**
 * Runs the batch handlers of a claimed batch (at most `allowed` of its messages) and returns, per index, what the
 * one-by-one pass needs: the decoded row, and the exits of the shared calls it was part of. Never fails. `timeoutMs` bounds a
 * call unless its handler has a timeout of its own; past it, each of its messages fails with `HandlerTimeoutError`
 * and the call is interrupted without being waited for.
 *
 * @internal
 */
export const prepare = (
  batch: ReadonlyArray<ReceivedMessage>,
  registry: HandlersShape,
  allowed: number,
  timeoutMs: number
): Effect.Effect<Array<Handle.Prepared | undefined>> =>
  Effect.suspend(() => {
    const prepared: Array<Handle.Prepared | undefined> = new Array(batch.length)
    const groups = new Map<RegisteredHandler, Group>()
    const end = Math.min(batch.length, allowed)
    for (let i = 0; i < end; i++) {
      const row = batch[i]!
      if (row.redelivered === true) continue
      const decoded = Handle.decode(row, registry)
      if (Either.isLeft(decoded)) continue
      // Kept for the one-by-one pass, which then decodes no row again.
      prepared[i] = { decoded: decoded.right, exits: undefined }
      const { envelope, handlers } = decoded.right
      const handledBy = envelope.headers.handledBy
      for (const h of handlers) {
        if (h.runBatch === undefined || handledBy?.includes(h.name) === true) continue
        let group = groups.get(h)
        if (group === undefined) groups.set(h, group = { indices: [], envelopes: [] })
        group.indices.push(i)
        group.envelopes.push(envelope)
      }
    }
    for (const [h, group] of groups) {
      if (group.indices.length < 2) groups.delete(h)
    }
    if (groups.size === 0) return Effect.succeed(prepared)
    return Effect.as(
      Effect.forEach(groups, ([h, group]) =>
        Effect.map(call(h, group.envelopes, timeoutMs), (exits) => {
          for (let k = 0; k < exits.length; k++) {
            const ready = prepared[group.indices[k]!] as { exits: Exits | undefined }
            ;(ready.exits ??= new Map()).set(h, exits[k]!)
          }
        }), { discard: true }),
      prepared
    )
  })

/** One batch handler's call, bounded by its timeout. */
const call = (
  h: RegisteredHandler,
  envelopes: ReadonlyArray<Envelope>,
  defaultTimeoutMs: number
): Effect.Effect<Array<Exit.Exit<unknown, unknown>>> => {
  const timeoutMs = h.timeout === undefined ? defaultTimeoutMs : Duration.toMillis(h.timeout)
  // Disconnected: a call that ignores its interruption does not hold the batch past its deadline.
  return Effect.timeoutTo(Effect.disconnect(h.runBatch!(envelopes)), {
    duration: Duration.millis(timeoutMs),
    onSuccess: (exits) => exits,
    onTimeout: () => {
      const name = cut(h.name, maxNameLength)
      const error = new HandlerTimeoutError({
        handler: name,
        timeoutMs,
        message: `Batch handler ${name} did not finish within ${
          Duration.format(Duration.millis(timeoutMs))
        } for ${envelopes.length} messages`
      })
      return envelopes.map(() => Exit.fail(error))
    }
  })
}
