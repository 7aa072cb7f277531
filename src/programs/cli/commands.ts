/**
 * The operational commands: `setup-transports`, `consume`, `idempotency:purge`, `stats`.
 *
 * @internal
 */
import { Args, Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { TransportStats } from "../../domain/Envelope.js"
import * as PgCompaction from "../../layers/PgCompaction.js"
import * as ScheduleRetryStrategy from "../../layers/ScheduleRetryStrategy.js"
import { IdempotencyStore } from "../../services/IdempotencyStore.js"
import { Transport } from "../../services/Transport.js"
import type { CliOptions } from "../Cli.js"
import * as Worker from "../worker/Worker.js"
import * as WorkerHealth from "../WorkerHealth.js"
import { consumeOptions, workerOptions } from "./consume.js"
import { CliDialect } from "./dialects.js"
import { Deployment, type Environment } from "./environment.js"
import { formatAge, formatBytes, headline, parseDurationMs, renderTable, truncate } from "./format.js"
import * as Optional from "./optional.js"
import { CliError, dsn, fail, format, positive, size, target, withShownDefault } from "./options.js"

/**
 * Runs the worker with the metrics endpoint on `port` (its probes are the worker's health, live within
 * `stallAfterSeconds` when given, else within the worker's default) and the queue gauges sampled. The endpoint's
 * module is loaded only here: the OpenTelemetry packages it needs are optional.
 */
const withMetricsEndpoint = <A, E, R>(
  port: number,
  stallAfterSeconds: Option.Option<number>,
  run: (observed: Partial<Worker.WorkerOptions>) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function*() {
    const MetricsServer = yield* Optional.load(Optional.metrics, () => import("../observability/MetricsServer.js"))
    const health = WorkerHealth.make(
      Option.match(stallAfterSeconds, { onNone: () => ({}), onSome: (s) => ({ stallAfter: Duration.seconds(s) }) })
    )
    const server = yield* MetricsServer.make({ port, live: health.live, ready: health.ready }).pipe(
      Effect.mapError((error) => new CliError({ message: error.message }))
    )
    yield* Console.log(
      `[OK] Serving /metrics, /healthz and /readyz on http://${server.address.host}:${server.address.port}.`
    )
    return yield* run({ health, sampleQueues: "15 seconds" })
  }).pipe(Effect.scoped)

/** The `-v` line of one message: id, type, outcome, duration, and for a failure its tag and most useful line. */
const eventLine = (event: Extract<Worker.WorkerEvent, { readonly _tag: "Handled" | "Retried" | "Failed" }>): string =>
  `${event.messageId} ${event.type} ${event._tag.toLowerCase()} ${event.durationMs}ms` +
  (event._tag === "Handled" ? "" : ` ${event.error.tag}: ${headline(event.error.message, 300)}`)

/** @internal */
export const make = (options: CliOptions, environment: Environment) => {
  const {
    database,
    idempotencyLayer,
    idempotencyOnly,
    idempotencyOptions,
    known,
    opened,
    tableOf,
    transportOnly,
    withOperatorTransport,
    withTransport
  } = environment

  /** The application says it uses the idempotency store: `Cli.make({ idempotency: { … } })`. */
  const idempotencyConfigured = options.idempotency !== undefined && options.idempotency !== false

  const setupTransports = Command.make(
    "setup-transports",
    {
      ...target,
      transports: Args.text({ name: "transport" }).pipe(
        Args.withDescription("Transports to report (default: all)"),
        Args.repeated
      ),
      idempotency: Options.boolean("idempotency").pipe(
        Options.withDescription("Also create or migrate the idempotency table (for idempotent handlers)")
      )
    },
    (o) =>
      withTransport(
        o,
        Effect.gen(function*() {
          const withStore = o.idempotency || idempotencyConfigured
          if (withStore && idempotencyOptions === undefined) {
            return yield* fail("This application has no idempotency store (Cli.make({ idempotency: false }))")
          }
          const { admin, transport } = yield* opened(o.transports)
          const applied = [...yield* admin.setup]
          if (withStore) {
            const store = yield* Effect.provide(IdempotencyStore, idempotencyOnly)
            applied.push(...(yield* store.setup).map((m) => `idempotency ${m}`))
          }
          yield* Console.log(
            applied.length === 0 ? "Schema is up to date; nothing to do." : `Applied migrations: ${applied.join(", ")}`
          )
          for (const name of o.transports.length > 0 ? o.transports : transport.names) {
            yield* Console.log(`[OK] The "${name}" transport was set up successfully.`)
          }
          if (withStore) yield* Console.log("[OK] The idempotency store was set up successfully.")
        })
      )
  ).pipe(Command.withDescription("Create or migrate the outbox table (idempotent, versioned)"))

  const consume = (handlers: NonNullable<CliOptions["handlers"]>) =>
    Command.make(
      "consume",
      {
        ...target,
        transports: Args.text({ name: "transport" }).pipe(
          Args.withDescription("The transports to consume, at least one; the first given is served first"),
          Args.atLeast(1)
        ),
        ...consumeOptions
      },
      (o) =>
        Effect.gen(function*() {
          // Refused rather than ignored: an operator who sets it expects a liveness probe that is not there.
          if (Option.isSome(o.stallAfter) && Option.isNone(o.metricsPort)) {
            return yield* fail("--stall-after bounds the /healthz probe of --metrics-port: give --metrics-port too")
          }
          const transport = yield* Transport
          yield* known(transport, o.transports)
          const worker = yield* workerOptions(o)
          yield* Console.log(`[OK] Consuming messages from transport(s) "${o.transports.join(", ")}".`)
          yield* Console.log("// Quit the worker with CONTROL-C (it finishes the messages in flight).")
          const run = (observed: Partial<Worker.WorkerOptions>) =>
            Worker.run({
              ...worker,
              ...observed,
              ...(o.verbose ?
                {
                  onEvent: (event: Worker.WorkerEvent) =>
                    event._tag === "Started" || event._tag === "Stopped" ? Effect.void : Console.log(eventLine(event))
                } :
                {})
            })
          const summary = yield* Option.match(o.metricsPort, {
            onNone: () => run({}),
            onSome: (port) => withMetricsEndpoint(port, o.stallAfter, run)
          })
          yield* Console.log(
            `Worker stopped (${summary.stoppedBy}): handled ${summary.handled}, retried ${summary.retried}, ` +
              `failed ${summary.failed}.`
          )
        }).pipe(
          Effect.provide(
            Layer.mergeAll(handlers, ScheduleRetryStrategy.layer(options.retry)).pipe(
              Layer.provideMerge(idempotencyOptions === undefined ? Layer.empty : idempotencyOnly),
              Layer.provideMerge(transportOnly(o)),
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
        Options.withPseudoName("DURATION"),
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
      batchSize: positive("batch-size").pipe(
        Options.withDescription("Records deleted per transaction"),
        withShownDefault(1000)
      )
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
    {
      ...target,
      transports: Args.text({ name: "transport" }).pipe(
        Args.withDescription("Transports to count (default: all)"),
        Args.repeated
      ),
      format
    },
    (o) =>
      withOperatorTransport(
        o,
        [],
        Effect.gen(function*() {
          const { admin, transport } = yield* opened(o.transports)
          const { table } = yield* Deployment
          // A transport without a failure transport (sync, CDC) is no one's failure transport either.
          const failureOf = (name: string) => Option.getOrUndefined(transport.failureTransport(name))
          const isDefined = (name: string | undefined): name is string => name !== undefined
          const failureNames = new Set(transport.names.map(failureOf).filter(isDefined))
          const names = o.transports.length > 0 ? o.transports : transport.names
          const queues = names.filter((name) => !failureNames.has(name))
          const failures = [
            ...new Set([...names.filter((name) => failureNames.has(name)), ...queues.map(failureOf).filter(isDefined)])
          ]
          const counts = new Map<string, TransportStats>()
          for (const name of new Set([...queues, ...failures])) counts.set(name, yield* admin.stats(name))
          // Who each failure queue's messages failed from: read from their headers where the queue can be browsed.
          const origins = new Map<string, ReadonlyMap<string | null, number>>()
          for (const name of failures) {
            if (!Option.exists(transport.capabilities(name), (c) => c.browsing)) continue
            const from = yield* (yield* CliDialect).failedFrom(counts.get(name)!.queue, { table })
            origins.set(name, new Map(from.map((row) => [row.transport, row.count])))
          }
          const failedFrom = (name: string): number | null => {
            const failure = failureOf(name)
            const from = failure === undefined ? undefined : origins.get(failure)
            return from === undefined ? null : from.get(name) ?? 0
          }
          const failureRows = failures.filter((name) => names.includes(name)).map((name) => {
            const c = counts.get(name)!
            return {
              name,
              queue: c.queue,
              messages: c.ready + c.delayed + c.inFlight,
              oldestAgeMs: c.oldestReadyAgeMs,
              from: origins.get(name)
            }
          })
          if (o.format === "json") {
            return yield* Console.log(JSON.stringify(
              {
                transports: Object.fromEntries(queues.map((name) => {
                  const { transport: _, ...c } = counts.get(name)!
                  return [name, { ...c, failed: failedFrom(name), failureTransport: failureOf(name) }]
                })),
                failureTransports: Object.fromEntries(failureRows.map(({ from, name, ...row }) => [name, {
                  ...row,
                  from: from === undefined ? null : Object.fromEntries(
                    [...from.entries()].map(([origin, n]) => [origin ?? unknownOrigin, n])
                  )
                }]))
              },
              null,
              2
            ))
          }
          if (queues.length > 0) {
            yield* Console.log(renderTable(
              ["Transport", "Queue", "Ready", "Delayed", "In flight", "Failed", "Oldest ready", "Blocked keys"],
              queues.map((name) => {
                const c = counts.get(name)!
                const failed = failedFrom(name)
                const keyed = Option.exists(transport.capabilities(name), (capabilities) => capabilities.orderingKeys)
                return [
                  name,
                  c.queue,
                  String(c.ready),
                  String(c.delayed),
                  String(c.inFlight),
                  failed === null ? "-" : String(failed),
                  formatAge(c.oldestReadyAgeMs),
                  keyed ? String(c.blockedKeys) : "-"
                ]
              })
            ))
          }
          const lagging = queues.filter((name) => counts.get(name)!.partitions !== undefined)
          if (lagging.length > 0) {
            yield* Console.log("")
            yield* Console.log(renderTable(
              ["Transport", "Topic", "Partition", "Committed", "End", "Lag"],
              lagging.flatMap((name) =>
                counts.get(name)!.partitions!.map((p) => [
                  name,
                  p.topic,
                  String(p.partition),
                  p.committed === null ? "-" : String(p.committed),
                  String(p.end),
                  String(p.lag)
                ])
              )
            ))
          }
          const slots = queues.filter((name) => counts.get(name)!.slot !== undefined)
          if (slots.length > 0) {
            yield* Console.log("")
            yield* Console.log(renderTable(
              ["Transport", "Replication slot", "Connector", "WAL retained", "Not confirmed", "WAL status"],
              slots.map((name) => {
                const slot = counts.get(name)!.slot
                return slot === null || slot === undefined
                  ? [name, "missing", "-", "-", "-", "-"]
                  : [
                    name,
                    slot.name,
                    slot.active ? "reading" : "none",
                    formatBytes(slot.retainedBytes),
                    formatBytes(slot.pendingBytes),
                    slot.walStatus ?? "-"
                  ]
              })
            ))
          }
          if (failureRows.length > 0) {
            if (queues.length > 0) yield* Console.log("")
            yield* Console.log(renderTable(
              ["Failure transport", "Queue", "Messages", "Oldest", "Failed from"],
              failureRows.map((row) => [
                row.name,
                row.queue,
                String(row.messages),
                formatAge(row.oldestAgeMs),
                row.from === undefined
                  ? "-"
                  : truncate(
                    [...row.from.entries()].sort((a, b) => b[1] - a[1])
                      .map(([origin, n]) => `${origin ?? unknownOrigin} ${n}`).join(", ") || "-",
                    100
                  )
              ])
            ))
          }
        })
      )
  ).pipe(
    Command.withDescription(
      "Messages per transport (ready, delayed, in flight, failed from it, oldest ready age), per failure transport, " +
        "and a Kafka consumer group's lag per partition"
    )
  )

  const storageCompact = Command.make(
    "storage:compact",
    {
      dsn: target.dsn,
      table: target.table,
      force: Options.boolean("force").pipe(
        Options.withDescription("Rebuild every index, bloated or not")
      ),
      minSize: size("min-size", "Leave indexes up to this size alone (e.g. 1M; K, M, G)", "1M").pipe(
        withShownDefault(1024 * 1024)
      )
    },
    (o) =>
      Effect.gen(function*() {
        const dialect = yield* CliDialect
        if (!dialect.compaction) {
          return yield* fail(`storage:compact rebuilds PostgreSQL's indexes; on ${dialect.name} use OPTIMIZE TABLE`)
        }
        const table = yield* tableOf({ ...o, transportQueues: [] })
        const done = yield* PgCompaction.compactIndexes({ table, force: o.force, minBytes: o.minSize })
        if (Option.isNone(done)) return yield* Console.log("Another compactor holds the table; nothing done.")
        const { dropped, indexes } = done.value
        for (const name of dropped) yield* Console.log(`Dropped ${name}, left invalid by an interrupted rebuild.`)
        yield* Console.log(renderTable(
          ["INDEX", "BEFORE", "AFTER", ""],
          indexes.map((index) => [
            index.index,
            formatBytes(index.bytesBefore),
            formatBytes(index.bytesAfter),
            index.rebuilt ? "rebuilt" : "kept"
          ])
        ))
        const rebuilt = indexes.filter((index) => index.rebuilt)
        const sum = (values: ReadonlyArray<number>) => values.reduce((a, b) => a + b, 0)
        yield* Console.log(
          `[OK] Rebuilt ${rebuilt.length} of ${indexes.length} index(es): ` +
            `${formatBytes(sum(rebuilt.map((index) => index.bytesBefore)))} → ` +
            `${formatBytes(sum(rebuilt.map((index) => index.bytesAfter)))}.`
        )
      }).pipe(Effect.provide(database(o.dsn)))
  ).pipe(
    Command.withDescription(
      "Rebuild the table's mostly empty indexes (REINDEX CONCURRENTLY), one compactor at a time; needs the owner"
    )
  )

  return { setupTransports, consume, idempotencyPurge, stats, storageCompact }
}

/** How `stats` names the origin of failed messages whose headers record none. */
const unknownOrigin = "(unknown)"
