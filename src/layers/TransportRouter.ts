/**
 * Several transport backends served as one: PostgreSQL for the outbox and the failure queue, a broker for
 * the second hop.
 *
 * Each method goes to the backend serving the transport it names (an unknown name is an
 * `UnknownTransportError`), and a worker session opens one session per backend. Two operations cross backends:
 * - `fail` of a transport whose failure transport lives on another backend (a RabbitMQ transport whose
 *   failures go to PostgreSQL's `failed`): the message is first sent to the failure transport — same message
 *   id, same body, the new headers — and only then acked on its own backend. A crash in between leaves it in
 *   both places (a duplicate, never a loss).
 * - `move` to a transport on another backend (`failed:retry` of a broker message back to the broker): the
 *   message is read, sent to the target, and only then removed from the source.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { resend } from "../domain/Envelope.js"
import {
  OutboxConfigError,
  type StorageNotReadyError,
  TransportError,
  type UnknownTransportError
} from "../domain/Errors.js"
import { checkKnown, unknownTransport } from "../internal/transports.js"
import { type Session, Transport, type TransportShape } from "../services/Transport.js"
import { TransportAdmin, type TransportAdminShape, type TransportBackend } from "../services/TransportAdmin.js"

/**
 * Combines backends into one. Fails with `OutboxConfigError` when two backends serve the same transport name,
 * or when a transport's failure transport is served by none.
 *
 * A transport's capabilities are its backend's, except that a transport whose failure transport lives on
 * another backend has no `stableIds` (its failed messages arrive there as copies with ids of their own), and — when
 * its backend browses (a table, whose failed messages hold their keys) — no `orderingKeys` (a failed message there
 * cannot hold its key here). A backend that cannot browse (Kafka) never holds a key for a failed message, so its keys
 * stay.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  ...backends: ReadonlyArray<TransportBackend>
): Effect.Effect<TransportBackend, OutboxConfigError> =>
  Effect.gen(function*() {
    const byName = new Map<string, TransportBackend>()
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
    const failureOf = (name: string, backend: TransportBackend) =>
      Option.getOrElse(backend.failureTransport(name), () => name)
    for (const [name, backend] of byName) {
      const failure = failureOf(name, backend)
      if (!byName.has(failure)) {
        return yield* new OutboxConfigError({
          message: `The failure transport ${failure} of ${name} is served by no backend; known: ${
            Array.from(byName.keys()).join(", ")
          }`
        })
      }
    }
    const names = Array.from(byName.keys())

    const lookup = (name: string): Effect.Effect<TransportBackend, UnknownTransportError> => {
      const backend = byName.get(name)
      return backend === undefined ? Effect.fail(unknownTransport(name, names)) : Effect.succeed(backend)
    }
    /** A send's errors as an operation without `StorageNotReadyError` reports them. */
    const withoutNotReady = (name: string, operation: string) =>
    (
      e: TransportError | UnknownTransportError | StorageNotReadyError
    ): TransportError | UnknownTransportError =>
      e._tag === "StorageNotReadyError"
        ? new TransportError({ transport: name, operation, message: e.message, cause: e })
        : e

    const open: TransportShape["open"] = (wanted) =>
      Effect.gen(function*() {
        yield* checkKnown(wanted, byName)
        const own = Array.from(new Set(wanted))
        const groups = new Map<TransportBackend, Array<string>>()
        for (const name of own) {
          const backend = byName.get(name)!
          groups.set(backend, [...(groups.get(backend) ?? []), name])
        }
        const sessions = new Map<TransportBackend, Session>()
        for (const [backend, group] of groups) sessions.set(backend, yield* backend.open(group))
        const waits = Array.from(sessions.values(), (session) => session.wait)
        const wait: Session["wait"] = (maxWait) =>
          waits.length === 0 ? Effect.sleep(maxWait) : Effect.raceAll(waits.map((w) => w(maxWait)))
        return {
          transports: own,
          claim: (name, batchSize, acks) => {
            const session = own.includes(name) ? sessions.get(byName.get(name)!) : undefined
            return session === undefined
              ? Effect.fail(unknownTransport(name, own))
              : session.claim(name, batchSize, acks)
          },
          wait
        }
      })

    const fail: TransportShape["fail"] = (message, headers) =>
      Effect.gen(function*() {
        const backend = yield* lookup(message.transport)
        const failure = failureOf(message.transport, backend)
        const target = byName.get(failure)!
        if (target === backend) return yield* backend.fail(message, headers)
        // Send first, ack second: a crash in between duplicates, never loses.
        yield* target.send(failure, [resend(message, headers)]).pipe(
          Effect.mapError(withoutNotReady(message.transport, "fail"))
        )
        yield* backend.ack(message.transport, [message.id])
      })

    const move: TransportAdminShape["move"] = (from, id, options) =>
      Effect.gen(function*() {
        const source = yield* lookup(from)
        const target = yield* lookup(options.to)
        if (source === target) return yield* source.move(from, id, options)
        const found = yield* source.find(from, id)
        if (Option.isNone(found)) return false
        yield* target.send(options.to, [resend(found.value, options.headers)]).pipe(
          Effect.mapError(withoutNotReady(options.to, "move"))
        )
        return (yield* source.remove(from, [id])) === 1
      })

    const stats: TransportAdminShape["stats"] = (name) =>
      Effect.gen(function*() {
        const backend = yield* lookup(name)
        const own = yield* backend.stats(name)
        const failure = failureOf(name, backend)
        const target = byName.get(failure)!
        if (target === backend) return own
        const failed = yield* target.stats(failure)
        return { ...own, failed: failed.failed }
      })

    const router: TransportBackend = {
      names,
      capabilities: (name) => {
        const backend = byName.get(name)
        if (backend === undefined) return Option.none()
        const crossing = byName.get(failureOf(name, backend)) !== backend
        return Option.map(
          backend.capabilities(name),
          (c) => (crossing ? { ...c, stableIds: false, orderingKeys: c.orderingKeys && !c.browsing } : c)
        )
      },
      lease: (name) => byName.get(name)?.lease(name) ?? Option.none(),
      failureTransport: (name) => byName.get(name)?.failureTransport(name) ?? Option.none(),
      send: (name, messages) => Effect.flatMap(lookup(name), (b) => b.send(name, messages)),
      open,
      ack: (name, ids) => Effect.flatMap(lookup(name), (b) => b.ack(name, ids)),
      retry: (message, options) => Effect.flatMap(lookup(message.transport), (b) => b.retry(message, options)),
      fail,
      keepalive: (name, ids) => Effect.flatMap(lookup(name), (b) => b.keepalive(name, ids)),
      start: (message) => Effect.flatMap(lookup(message.transport), (b) => b.start(message)),
      release: (name, ids) => Effect.flatMap(lookup(name), (b) => b.release(name, ids)),
      setup: Effect.map(Effect.forEach(backends, (backend) => backend.setup), (applied) => applied.flat()),
      list: (name, options) => Effect.flatMap(lookup(name), (b) => b.list(name, options)),
      find: (name, id) => Effect.flatMap(lookup(name), (b) => b.find(name, id)),
      remove: (name, ids) => Effect.flatMap(lookup(name), (b) => b.remove(name, ids)),
      move,
      stats
    }
    return router
  })

/**
 * The combined backend as the `Transport` and `TransportAdmin` services, from the backends' constructors (for
 * example `TransportRouter.layer(PgTransport.make({ table }), AmqpTransport.make({ url, transports: { amqp: {} } }))`).
 * Scoped constructors (the broker's connection) live as long as the layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <const Backends extends ReadonlyArray<Effect.Effect<TransportBackend, any, any>>>(
  ...backends: Backends
): Layer.Layer<
  Transport | TransportAdmin,
  OutboxConfigError | Effect.Effect.Error<Backends[number]>,
  Exclude<Effect.Effect.Context<Backends[number]>, Scope.Scope>
> =>
  Layer.scopedContext(
    Effect.flatMap(
      Effect.all(backends as ReadonlyArray<Effect.Effect<TransportBackend, unknown, unknown>>),
      (shapes) =>
        Effect.map(
          make(...shapes),
          (router) => Context.make(Transport, router).pipe(Context.add(TransportAdmin, router))
        )
    ) as Effect.Effect<
      Context.Context<Transport | TransportAdmin>,
      OutboxConfigError | Effect.Effect.Error<Backends[number]>,
      any
    >
  )
