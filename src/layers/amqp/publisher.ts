/**
 * Publishing of the RabbitMQ transport: persistent, `mandatory` messages on a confirm channel, each send
 * waiting for every confirm, a returned (unroutable) message reported as a failure.
 *
 * @internal
 */
import type * as Amqp from "amqplib"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { TransportError } from "../../domain/Errors.js"
import { errorText, transportError } from "./codec.js"

/** A publication waiting for its confirm; `returned` is set when the broker returned it as unroutable. */
interface Pending {
  readonly messageId: string
  returned: string | undefined
}

/**
 * The confirm channel of a connection and its publications awaiting confirms.
 *
 * @internal
 */
export interface Publisher {
  readonly channel: Amqp.ConfirmChannel
  readonly pending: Array<Pending>
}

/**
 * One message to publish: where to, and what.
 *
 * @internal
 */
export interface Publication {
  readonly exchange: string
  readonly routingKey: string
  readonly content: Buffer
  readonly properties: Amqp.Options.Publish
}

/**
 * Wraps a fresh confirm channel. A returned (unroutable) mandatory message comes before its confirm: it marks
 * the oldest pending publication of that message id, so that its confirm reports the failure.
 *
 * @internal
 */
export const attach = (channel: Amqp.ConfirmChannel): Publisher => {
  const publisher: Publisher = { channel, pending: [] }
  channel.on("return", (message: Amqp.Message) => {
    const id = String(message.properties.messageId ?? "")
    const entry = publisher.pending.find((p) => p.messageId === id && p.returned === undefined)
    if (entry !== undefined) {
      const exchange = message.fields.exchange === "" ? "(default exchange)" : message.fields.exchange
      const reply = (message.fields as unknown as { replyText?: string }).replyText ?? "NO_ROUTE"
      entry.returned = `${exchange} / ${message.fields.routingKey}: ${reply}`
    }
  })
  return publisher
}

/**
 * Publishes in order and waits for every confirm. Fails at the first nack, return, channel loss or timeout;
 * a failure after a partial publish can duplicate (the caller retries), never lose.
 *
 * @internal
 */
export const publishAll = (
  publisher: Publisher,
  options: {
    readonly transport: string
    readonly operation: string
    readonly confirmTimeout: Duration.Duration
  },
  publications: ReadonlyArray<Publication>
): Effect.Effect<void, TransportError> => {
  const { confirmTimeout, operation, transport } = options
  if (publications.length === 0) return Effect.void
  return Effect.async<void, TransportError>((resume) => {
    let remaining = publications.length
    let settled = false
    const done = (failure: TransportError | undefined) => {
      if (settled) return
      if (failure !== undefined) {
        settled = true
        resume(Effect.fail(failure))
      } else if (--remaining === 0) {
        settled = true
        resume(Effect.void)
      }
    }
    for (const p of publications) {
      const entry: Pending = { messageId: String(p.properties.messageId ?? ""), returned: undefined }
      publisher.pending.push(entry)
      const forget = () => {
        const i = publisher.pending.indexOf(entry)
        if (i >= 0) publisher.pending.splice(i, 1)
      }
      try {
        publisher.channel.publish(
          p.exchange,
          p.routingKey,
          p.content,
          { ...p.properties, mandatory: true, persistent: true },
          (err: unknown) => {
            forget()
            if (err !== null && err !== undefined) {
              const text = errorText(err)
              done(transportError(
                transport,
                operation,
                text === "message nacked"
                  ? `RabbitMQ refused message ${entry.messageId} (nack): it is not stored`
                  : `No confirm for message ${entry.messageId}: ${text}`,
                err
              ))
            } else if (entry.returned !== undefined) {
              done(transportError(
                transport,
                operation,
                `Message ${entry.messageId} is unroutable (${entry.returned}): no queue is bound for it; ` +
                  `run setup-transports`
              ))
            } else {
              done(undefined)
            }
          }
        )
      } catch (e) {
        forget()
        done(transportError(transport, operation, `Cannot publish: ${errorText(e)}`, e))
        break
      }
    }
  }).pipe(
    Effect.timeoutFail({
      duration: confirmTimeout,
      onTimeout: () =>
        transportError(transport, operation, `RabbitMQ did not confirm within ${Duration.format(confirmTimeout)}`)
    })
  )
}
