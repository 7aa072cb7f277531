/**
 * What the transport suite's cases share: test messages, one-claim sessions and the capability gate.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { OutgoingMessage, ReceivedMessage } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"
import * as MessageId from "../../domain/MessageId.js"
import type { Capabilities } from "../../services/Transport.js"
import type { TransportBackend } from "../../services/TransportAdmin.js"

/** The lease the backend under test gives `outbox`, in milliseconds. @internal */
export const lease = 10_000

/**
 * Registers a case that runs only when the backend can: its capabilities for `outbox`, and a clock to move.
 *
 * @internal
 */
export type When<R> = (
  title: string,
  needs: { readonly capabilities?: ReadonlyArray<keyof Capabilities>; readonly time?: boolean },
  body: (
    t: TransportBackend,
    advance: (ms: number) => Effect.Effect<void, unknown, R>
  ) => Effect.Effect<void, unknown, R>
) => void

export const outgoing = (n: number, delayMs = 0, type = "Test"): OutgoingMessage => ({
  messageId: MessageId.make(),
  type,
  body: JSON.stringify({ _tag: type, n }),
  headers: Headers.encode(new Headers.Headers({ type })),
  delayMs
})

/** Messages 1 to 5, ready now. */
export const five = (): ReadonlyArray<OutgoingMessage> => [1, 2, 3, 4, 5].map((n) => outgoing(n))

export const numbers = (rows: ReadonlyArray<{ readonly body: string }>) =>
  rows.map((r) => JSON.parse(r.body).n as number)

export const stamped = (stamp: string) => new Headers.Headers({ type: "Test", custom: { stamp } })

/** One claim in a session of its own. */
export const claim = (t: TransportBackend, name: string, size: number, acks: ReadonlyArray<string> = []) =>
  Effect.scoped(Effect.flatMap(t.open([name]), (session) => session.claim(name, size, acks)))

export const claimMessages = (t: TransportBackend, name: string, size: number, acks: ReadonlyArray<string> = []) =>
  Effect.map(claim(t, name, size, acks), (claimed): ReadonlyArray<ReceivedMessage> => claimed.messages)
