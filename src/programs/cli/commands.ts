/**
 * The operational commands: `setup-transports`, `consume`, `idempotency:purge`, `stats`.
 *
 * @internal
 */
import { Args, Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { TransportStats } from "../../domain/Envelope.js"
import * as ScheduleRetryStrategy from "../../layers/ScheduleRetryStrategy.js"
import { IdempotencyStore } from "../../services/IdempotencyStore.js"
import { Transport } from "../../services/Transport.js"
import type { CliOptions } from "../Cli.js"
import * as Worker from "../worker/Worker.js"
import type { Environment } from "./environment.js"
import { formatAge, oneLine, parseDurationMs, renderTable } from "./format.js"
import { dsn, fail, format, memoryLimit, positive, verbose } from "./options.js"

/** @internal */
export const make = (options: CliOptions, environment: Environment) => {
  const {
    database,
    idempotencyLayer,
    idempotencyOnly,
    idempotencyOptions,
    known,
    opened,
    transportOnly,
    withTransport
  } = environment
  const setupTransports = Command.make(
    "setup-transports",
    { dsn, transports: Args.text({ name: "transport" }).pipe(Args.repeated) },
    (o) =>
      withTransport(
        o.dsn,
        Effect.gen(function*() {
          const { admin, transport } = yield* opened(o.transports)
          const applied = [...yield* admin.setup]
          if (idempotencyOptions !== undefined) {
            const store = yield* Effect.provide(IdempotencyStore, idempotencyOnly)
            applied.push(...(yield* store.setup).map((m) => `idempotency ${m}`))
          }
          yield* Console.log(
            applied.length === 0
              ? "Schema is up to date; nothing to do."
              : `Applied migrations: ${applied.join(", ")}`
          )
          for (const name of o.transports.length > 0 ? o.transports : transport.names) {
            yield* Console.log(`[OK] The "${name}" transport was set up successfully.`)
          }
          if (idempotencyOptions !== undefined) {
            yield* Console.log("[OK] The idempotency store was set up successfully.")
          }
        })
      )
  ).pipe(Command.withDescription("Create or migrate the outbox table (idempotent, versioned)"))

  const consume = (handlers: NonNullable<CliOptions["handlers"]>) =>
    Command.make(
      "consume",
      {
        dsn,
        transports: Args.text({ name: "transport" }).pipe(Args.atLeast(1)),
        limit: positive("limit").pipe(Options.withDescription("Stop after N messages"), Options.optional),
        failureLimit: positive("failure-limit").pipe(
          Options.withDescription("Stop after N messages were retried or failed"),
          Options.optional
        ),
        timeLimit: positive("time-limit").pipe(Options.withDescription("Stop after N seconds"), Options.optional),
        memoryLimit,
        sleep: Options.float("sleep").pipe(
          Options.withDefault(1),
          Options.withDescription("Seconds to wait when every transport is empty")
        ),
        batchSize: positive("batch-size").pipe(Options.withDefault(50)),
        concurrency: positive("concurrency").pipe(Options.withDefault(1)),
        shutdownTimeout: Options.float("shutdown-timeout").pipe(
          Options.withDefault(30),
          Options.withDescription("Seconds in-flight handlers may run on after SIGTERM/SIGINT")
        ),
        verbose
      },
      (o) =>
        Effect.gen(function*() {
          const transport = yield* Transport
          yield* known(transport, o.transports)
          if (!(o.sleep >= 0)) return yield* fail(`--sleep must be >= 0, got ${o.sleep}`)
          yield* Console.log(`[OK] Consuming messages from transport(s) "${o.transports.join(", ")}".`)
          yield* Console.log("// Quit the worker with CONTROL-C (it finishes the messages in flight).")
          const summary = yield* Worker.run({
            transports: o.transports,
            batchSize: o.batchSize,
            concurrency: o.concurrency,
            sleep: o.sleep * 1000,
            shutdownTimeout: o.shutdownTimeout * 1000,
            ...Option.match(o.limit, { onNone: () => ({}), onSome: (limit) => ({ limit }) }),
            ...Option.match(o.failureLimit, { onNone: () => ({}), onSome: (failureLimit) => ({ failureLimit }) }),
            ...Option.match(o.timeLimit, { onNone: () => ({}), onSome: (s) => ({ timeLimit: s * 1000 }) }),
            ...Option.match(o.memoryLimit, { onNone: () => ({}), onSome: (memoryLimit) => ({ memoryLimit }) }),
            ...(o.verbose
              ? {
                onEvent: (event: Worker.WorkerEvent) =>
                  event._tag === "Started" || event._tag === "Stopped" ? Effect.void : Console.log(
                    `${event.messageId} ${event.type} ${event._tag.toLowerCase()} ${event.durationMs}ms` +
                      (event._tag === "Handled" ? "" : ` ${event.error.tag}: ${oneLine(event.error.message)}`)
                  )
              }
              : {})
          })
          yield* Console.log(
            `Worker stopped (${summary.stoppedBy}): handled ${summary.handled}, retried ${summary.retried}, ` +
              `failed ${summary.failed}.`
          )
        }).pipe(
          Effect.provide(
            Layer.mergeAll(handlers, ScheduleRetryStrategy.layer(options.retry)).pipe(
              Layer.provideMerge(idempotencyOptions === undefined ? Layer.empty : idempotencyOnly),
              Layer.provideMerge(transportOnly),
              Layer.provideMerge(database(o.dsn))
            )
          )
        )
    ).pipe(Command.withDescription("Run the worker on the given transports, by priority"))

  const idempotencyPurge = Command.make(
    "idempotency:purge",
    {
      dsn,
      olderThan: Options.text("older-than").pipe(
        Options.withDescription("Delete records processed longer ago than this (e.g. 30d, 12h, 90 minutes)"),
        Options.mapEffect((text) => {
          const ms = parseDurationMs(text)
          return ms === undefined || !(ms > 0)
            ? Effect.fail(
              ValidationError.invalidValue(HelpDoc.p(`--older-than: expected a duration such as 30d, got ${text}`))
            )
            : Effect.succeed(ms)
        })
      ),
      batchSize: positive("batch-size").pipe(Options.withDefault(1000))
    },
    (o) =>
      Effect.gen(function*() {
        const store = yield* IdempotencyStore
        let batches = 0
        const deleted = yield* store.purgeExclusive({
          olderThan: o.olderThan,
          batchSize: o.batchSize,
          onBatch: () => Effect.sync(() => void batches++)
        })
        yield* Option.match(deleted, {
          onNone: () => Console.log("Another purger holds the lock; nothing done."),
          onSome: (n) =>
            Console.log(`[OK] Deleted ${n} record(s) older than ${formatAge(o.olderThan)} in ${batches} batch(es).`)
        })
      }).pipe(Effect.provide(idempotencyLayer(o.dsn)))
  ).pipe(Command.withDescription("Delete idempotency records older than a window, in batches, one purger at a time"))

  const stats = Command.make(
    "stats",
    { dsn, transports: Args.text({ name: "transport" }).pipe(Args.repeated), format },
    (o) =>
      withTransport(
        o.dsn,
        Effect.gen(function*() {
          const { admin, transport } = yield* opened(o.transports)
          const names = o.transports.length > 0 ? o.transports : transport.names
          const rows: Array<TransportStats> = yield* Effect.forEach(names, (name) => admin.stats(name))
          if (o.format === "json") {
            return yield* Console.log(
              JSON.stringify(
                { transports: Object.fromEntries(rows.map(({ transport, ...rest }) => [transport, rest])) },
                null,
                2
              )
            )
          }
          yield* Console.log(renderTable(
            ["Transport", "Queue", "Ready", "Delayed", "In flight", "Failed", "Oldest ready"],
            rows.map((r) => [
              r.transport,
              r.queue,
              String(r.ready),
              String(r.delayed),
              String(r.inFlight),
              String(r.failed),
              formatAge(r.oldestReadyAgeMs)
            ])
          ))
        })
      )
  ).pipe(Command.withDescription("Messages per transport: ready, delayed, in flight, failed, oldest ready age"))

  return { setupTransports, consume, idempotencyPurge, stats }
}
