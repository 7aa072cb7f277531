/**
 * Several transport backends served as one `Transport`: PostgreSQL for the outbox and the failure queue,
 * a broker for the second hop.
 *
 * Each method goes to the backend serving the transport it names. Two operations cross backends:
 * - `fail` of a transport whose failure transport lives on another backend (a RabbitMQ transport whose
 *   failures go to PostgreSQL's `failed`): the message is first sent to the failure transport — same message
 *   id, same body, the new headers — and only then acked on its own backend. A crash in between leaves it in
 *   both places (a duplicate, never a loss).
 * - `move` to a transport on another backend (`failed:retry` of a broker message back to the broker): the
 *   message is read, sent to the target, and only then removed from the source.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { OutgoingMessage } from "../domain/Envelope.js"
import { OutboxConfigError, TransportError, UnknownTransportError } from "../domain/Errors.js"
import * as Headers from "../domain/Headers.js"
import type { MessageId } from "../domain/MessageId.js"
import { Transport, type TransportShape } from "../services/Transport.js"

/**
 * Combines backends into one transport. Fails with `OutboxConfigError` when two backends serve the same
 * transport name, or when a transport's failure transport is served by none.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (...backends: ReadonlyArray<TransportShape>): Effect.Effect<TransportShape, OutboxConfigError> =>
  Effect.gen(function*() {
    const byName = new Map<string, TransportShape>()
    for (const backend of backends) {
      for (const name of backend.names) {
        if (byName.has(name)) {
          return yield* new OutboxConfigError({ message: `Two transport backends serve the transport ${name}` })
        }
        byName.set(name, backend)
      }
    }
    if (byName.size === 0) {
      return yield* new OutboxConfigError({ message: "TransportRouter: no transport to serve" })
    }
    for (const [name, backend] of byName) {
      const failure = Option.getOrElse(backend.failureTransport(name), () => name)
      if (!byName.has(failure)) {
        return yield* new OutboxConfigError({
          message: `The failure transport ${failure} of ${name} is served by no backend; known: ${
            Array.from(byName.keys()).join(", ")
          }`
        })
      }
    }
    const names = Array.from(byName.keys())

    const unknown = (name: string) =>
      new UnknownTransportError({
        transport: name,
        message: `Unknown transport ${JSON.stringify(name)}; known: ${names.join(", ")}`
      })
    const lookup = (name: string): Effect.Effect<TransportShape, UnknownTransportError> => {
      const backend = byName.get(name)
      return backend === undefined ? Effect.fail(unknown(name)) : Effect.succeed(backend)
    }
    const lookupOrError = (name: string, operation: string): Effect.Effect<TransportShape, TransportError> => {
      const backend = byName.get(name)
      return backend === undefined
        ? Effect.fail(new TransportError({ transport: name, operation, message: unknown(name).message }))
        : Effect.succeed(backend)
    }

    const fail: TransportShape["fail"] = (name, id, options) =>
      Effect.gen(function*() {
        const backend = yield* lookupOrError(name, "fail")
        const failure = Option.getOrElse(backend.failureTransport(name), () => name)
        const target = byName.get(failure)!
        if (target === backend) return yield* backend.fail(name, id, options)
        const message = options.message
        if (message === undefined) {
          return yield* new TransportError({
            transport: name,
            operation: "fail",
            message: `The failure transport ${failure} lives on another backend: fail needs the message itself`
          })
        }
        // Send first, ack second: a crash in between duplicates, never loses.
        yield* target.send(failure, [{
          messageId: message.messageId as MessageId,
          type: Headers.typeOf(options.headers) ?? Headers.typeOf(message.headers) ?? "<unknown>",
          body: message.body,
          headers: options.headers,
          delayMs: 0
        }]).pipe(
          Effect.mapError((e) =>
            e._tag === "TransportError"
              ? e
              : new TransportError({ transport: name, operation: "fail", message: e.message, cause: e })
          )
        )
        yield* backend.ack(name, [id])
      })

    const move: TransportShape["move"] = (from, id, options) =>
      Effect.gen(function*() {
        const source = yield* lookup(from)
        const target = yield* lookup(options.to)
        if (source === target) return yield* source.move(from, id, options)
        const found = yield* source.find(from, id)
        if (Option.isNone(found)) return false
        const outgoing: OutgoingMessage = {
          messageId: found.value.messageId as MessageId,
          type: Headers.typeOf(options.headers) ?? Headers.typeOf(found.value.headers) ?? "<unknown>",
          body: found.value.body,
          headers: options.headers,
          delayMs: 0
        }
        yield* target.send(options.to, [outgoing])
        return (yield* source.remove(from, [id])) === 1
      })

    const wakeups: TransportShape["wakeups"] = (wanted) =>
      Effect.gen(function*() {
        const groups = new Map<TransportShape, Array<string>>()
        for (const name of wanted) {
          const backend = byName.get(name)
          if (backend === undefined) continue
          groups.set(backend, [...(groups.get(backend) ?? []), name])
        }
        const waits: Array<(maxWait: Duration.Duration) => Effect.Effect<void>> = []
        for (const [backend, group] of groups) waits.push(yield* backend.wakeups(group))
        if (waits.length === 0) return (maxWait: Duration.Duration) => Effect.sleep(maxWait)
        if (waits.length === 1) return waits[0]!
        return (maxWait: Duration.Duration) => Effect.raceAll(waits.map((wait) => wait(maxWait)))
      })

    const stats: TransportShape["stats"] = (name) =>
      Effect.gen(function*() {
        const backend = yield* lookup(name)
        const own = yield* backend.stats(name)
        const failure = Option.getOrElse(backend.failureTransport(name), () => name)
        const target = byName.get(failure)!
        if (target === backend) return own
        const failed = yield* target.stats(failure)
        return { ...own, failed: failed.failed }
      })

    const setup = Effect.map(
      Effect.forEach(backends, (backend) => backend.setup),
      (applied) => applied.flat()
    )

    const shape: TransportShape = {
      names,
      lease: (name) => (byName.get(name)?.lease(name) ?? Option.none()),
      failureTransport: (name) => (byName.get(name)?.failureTransport(name) ?? Option.none()),
      setup,
      send: (name, messages) => Effect.flatMap(lookup(name), (b) => b.send(name, messages)),
      claim: (name, batchSize) => Effect.flatMap(lookup(name), (b) => b.claim(name, batchSize)),
      ackAndClaim: (name, ids, batchSize) =>
        Effect.flatMap(lookup(name), (b) =>
          b.ackAndClaim !== undefined
            ? b.ackAndClaim(name, ids, batchSize)
            : Effect.zipRight(b.ack(name, ids), b.claim(name, batchSize))),
      ack: (name, ids) => Effect.flatMap(lookupOrError(name, "ack"), (b) => b.ack(name, ids)),
      retry: (name, id, options) => Effect.flatMap(lookupOrError(name, "retry"), (b) => b.retry(name, id, options)),
      fail,
      keepalive: (name, ids) => Effect.flatMap(lookupOrError(name, "keepalive"), (b) => b.keepalive(name, ids)),
      release: (name, ids) => Effect.flatMap(lookupOrError(name, "release"), (b) => b.release(name, ids)),
      list: (name, options) => Effect.flatMap(lookup(name), (b) => b.list(name, options)),
      find: (name, id) => Effect.flatMap(lookup(name), (b) => b.find(name, id)),
      remove: (name, ids) => Effect.flatMap(lookup(name), (b) => b.remove(name, ids)),
      move,
      nextDue: (name) => Effect.flatMap(lookup(name), (b) => b.nextDue(name)),
      wakeups,
      stats
    }
    return shape
  })

/**
 * The combined transport as a layer, from the backends' constructors (for example
 * `TransportRouter.layer(PgTransport.make({ table }), AmqpTransport.make({ url, transports: { amqp: {} } }))`).
 * Scoped constructors (the broker's connection) live as long as the layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <const Backends extends ReadonlyArray<Effect.Effect<TransportShape, any, any>>>(
  ...backends: Backends
): Layer.Layer<
  Transport,
  OutboxConfigError | Effect.Effect.Error<Backends[number]>,
  Exclude<Effect.Effect.Context<Backends[number]>, Scope.Scope>
> =>
  Layer.scoped(
    Transport,
    Effect.flatMap(
      Effect.all(backends as ReadonlyArray<Effect.Effect<TransportShape, unknown, unknown>>),
      (shapes) => make(...shapes)
    ) as Effect.Effect<TransportShape, OutboxConfigError | Effect.Effect.Error<Backends[number]>, any>
  )
