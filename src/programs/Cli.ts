/**
 * The `outbox` command line, built with `@effect/cli`: Symfony Messenger's verbs, done better.
 * An application mounts it with its own handlers in one call: `Cli.main(Cli.make({ handlers }))`.
 *
 * @since 0.1.0
 */
import { Args, Command, HelpDoc, Options, Prompt, ValidationError } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type { StoredMessage, TransportStats } from "../domain/Envelope.js"
import * as Headers from "../domain/Headers.js"
import * as AmqpTransport from "../layers/amqp/AmqpTransport.js"
import * as PgIdempotencyStore from "../layers/PgIdempotencyStore.js"
import * as PgTransport from "../layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../layers/ScheduleRetryStrategy.js"
import * as TransportRouter from "../layers/TransportRouter.js"
import type { Handlers } from "../services/Handlers.js"
import { IdempotencyStore } from "../services/IdempotencyStore.js"
import { Transport, type TransportShape } from "../services/Transport.js"
import { TransportAdmin } from "../services/TransportAdmin.js"
import { defaultFailureTransport } from "../domain/Routing.js"
import { formatAge, formatTime, oneLine, parseBytes, parseDurationMs, renderTable, truncate } from "./internal/format.js"
import * as Worker from "./worker/Worker.js"
import { describeError } from "../internal/describeError.js"

/**
 * What an application gives the command line.
 *
 * @since 0.1.0
 * @category models
 */
export interface CliOptions {
  /**
   * The application's handlers (they may use the `SqlClient`, the `IdempotencyStore` and the `Transport` — a
   * `Forwarder` sends through it); without them there is no `consume` command.
   */
  readonly handlers?: Layer.Layer<Handlers, unknown, SqlClient.SqlClient | IdempotencyStore | Transport>
  /**
   * The idempotency store's options (`OUTBOX_IDEMPOTENCY_TABLE` overrides the table); `setup-transports` creates
   * its table too. `false` leaves it out.
   */
  readonly idempotency?: PgIdempotencyStore.Options | false
  /** Transport options; `OUTBOX_TABLE` overrides the table name. */
  readonly transport?: PgTransport.Options
  /**
   * A RabbitMQ transport served beside the PostgreSQL one (through `TransportRouter`), its URL from `url` or
   * `AMQP_URL`: `setup-transports` declares its exchange, queues and bindings, `consume amqp` reads it, `stats`
   * counts it, and its failures go to PostgreSQL's `failed` (where `failed:retry` sends them back to the broker).
   */
  readonly amqp?: Omit<AmqpTransport.Options, "url"> & { readonly url?: string | Redacted.Redacted<string> }
  readonly retry?: ScheduleRetryStrategy.Options
  /** Extra commands mounted beside the built-in ones. */
  readonly commands?: ReadonlyArray<Command.Command<string, never, unknown, unknown>>
}

/**
 * A failure of a command, printed as one line.
 *
 * @since 0.1.0
 * @category errors
 */
export class CliError extends Schema.TaggedError<CliError>()("OutboxCliError", { message: Schema.String }) {}

const dsn = Options.redacted("dsn").pipe(
  Options.withDescription("PostgreSQL connection URL (default: $DATABASE_URL)"),
  Options.optional
)
const format = Options.choice("format", ["text", "json"]).pipe(Options.withDefault("text" as const))
const verbose = Options.boolean("verbose").pipe(Options.withAlias("v"), Options.withDescription("More detail"))
const force = Options.boolean("force").pipe(Options.withDescription("Do not ask for confirmation"))
const all = Options.boolean("all")
const classFilter = Options.text("class-filter").pipe(
  Options.withDescription("Only messages of this type (the message tag)"),
  Options.optional
)
const failureTransport = Options.text("transport").pipe(
  Options.withDescription("The failure transport"),
  Options.withDefault(defaultFailureTransport)
)
const ids = Args.text({ name: "id" }).pipe(Args.repeated)

const positive = (name: string) =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      n > 0 ? Effect.succeed(n) : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} must be > 0, got ${n}`)))
    )
  )

const memoryLimit = Options.text("memory-limit").pipe(
  Options.withDescription("Stop when resident memory exceeds this (e.g. 128M; K, M, G)"),
  Options.mapEffect((text) => {
    const bytes = parseBytes(text)
    return bytes === undefined
      ? Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--memory-limit: expected a size such as 128M, got ${text}`)))
      : Effect.succeed(bytes)
  }),
  Options.optional
)

const fail = (message: string) => Effect.fail(new CliError({ message }))

/**
 * Builds the command tree.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: CliOptions = {}) => {
  const database = (flag: Option.Option<Redacted.Redacted>) =>
    Layer.unwrapEffect(
      Effect.gen(function*() {
        const url = Option.isSome(flag)
          ? flag.value
          : yield* Config.redacted("DATABASE_URL").pipe(
            Effect.mapError(() => new CliError({ message: "No database: pass --dsn or set DATABASE_URL" }))
          )
        return PgClient.layer({ url, connectTimeout: "5 seconds" })
      })
    ).pipe(
      Layer.mapError((error) =>
        error._tag === "OutboxCliError" ? error : new CliError({ message: `Cannot connect to PostgreSQL: ${describeError(error)}` })
      )
    )

  const transportLayer = (flag: Option.Option<Redacted.Redacted>) => transportOnly.pipe(Layer.provideMerge(database(flag)))

  const transportOnly = Layer.unwrapEffect(
    Effect.gen(function*() {
      // The table can be overridden by `OUTBOX_TABLE`; the rest comes from the options as given.
      const pg = {
        ...Object.fromEntries(Object.entries(options.transport ?? {}).map(([key, value]) => [key, Config.succeed(value)])),
        table: Config.string("OUTBOX_TABLE").pipe(Config.withDefault(options.transport?.table ?? PgTransport.defaultTable))
      } as Config.Config.Wrap<PgTransport.Options>
      if (options.amqp === undefined) return PgTransport.layerConfig(pg)
      const { url: explicit, ...amqp } = options.amqp
      const url = explicit ?? (yield* Config.redacted("AMQP_URL").pipe(
        Effect.mapError(() => new CliError({ message: "No broker: set AMQP_URL" }))
      ))
      return TransportRouter.layer(PgTransport.makeConfig(pg), AmqpTransport.make({ ...amqp, url }))
    })
  )

  const idempotencyOptions = options.idempotency === false ? undefined : options.idempotency ?? {}
  const idempotencyOnly = Layer.unwrapEffect(
    Effect.map(
      Config.option(Config.string("OUTBOX_IDEMPOTENCY_TABLE")),
      (table) =>
        PgIdempotencyStore.layer({
          ...idempotencyOptions,
          ...(Option.isSome(table) ? { table: table.value } : {})
        })
    )
  )
  const idempotencyLayer = (flag: Option.Option<Redacted.Redacted>) => idempotencyOnly.pipe(Layer.provide(database(flag)))

  const withTransport = <A, E, R>(flag: Option.Option<Redacted.Redacted>, self: Effect.Effect<A, E, R>) =>
    Effect.provide(self, transportLayer(flag))

  const known = (transport: TransportShape, names: ReadonlyArray<string>) =>
    Effect.forEach(names, (name) =>
      transport.names.includes(name)
        ? Effect.void
        : fail(`The "${name}" transport does not exist (known: ${transport.names.join(", ")})`))

  const setupTransports = Command.make(
    "setup-transports",
    { dsn, transports: Args.text({ name: "transport" }).pipe(Args.repeated) },
    (o) =>
      withTransport(
        o.dsn,
        Effect.gen(function*() {
          const transport = yield* Transport
          yield* known(transport, o.transports)
          const applied = [...yield* (yield* TransportAdmin).setup]
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
          if (idempotencyOptions !== undefined) yield* Console.log("[OK] The idempotency store was set up successfully.")
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
                  Console.log(
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
            ? Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--older-than: expected a duration such as 30d, got ${text}`)))
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

  const failedShow = Command.make(
    "failed:show",
    {
      dsn,
      id: Args.text({ name: "id" }).pipe(Args.optional),
      max: positive("max").pipe(Options.withDefault(50)),
      classFilter,
      stats: Options.boolean("stats").pipe(Options.withDescription("Count failed messages per type")),
      transport: failureTransport,
      format,
      verbose
    },
    (o) =>
      withTransport(
        o.dsn,
        Effect.gen(function*() {
          const transport = yield* Transport
          const admin = yield* TransportAdmin
          yield* known(transport, [o.transport])
          const typeFilter = Option.getOrUndefined(o.classFilter)
          if (Option.isSome(o.id)) {
            const found = yield* admin.find(o.transport, o.id.value)
            if (Option.isNone(found)) {
              return yield* fail(`The message "${o.id.value}" was not found in the "${o.transport}" transport`)
            }
            const details = describeFailed(found.value, o.verbose)
            return yield* o.format === "json" ? Console.log(JSON.stringify(details, null, 2)) : printFailed(details)
          }
          if (o.stats) {
            const counts = new Map<string, number>()
            for (const m of yield* admin.list(o.transport, { max: Number.MAX_SAFE_INTEGER, type: typeFilter })) {
              const type = Headers.typeOf(m.headers) ?? "(undecodable)"
              counts.set(type, (counts.get(type) ?? 0) + 1)
            }
            const rows = [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
            return yield* o.format === "json"
              ? Console.log(JSON.stringify(Object.fromEntries(rows), null, 2))
              : rows.length === 0
              ? Console.log("[OK] No failed messages were found.")
              : Console.log(renderTable(["Class", "Count"], rows.map(([t, n]) => [t, String(n)])))
          }
          const messages = yield* admin.list(o.transport, { max: o.max, type: typeFilter })
          const summaries = messages.map((m) => describeFailed(m, false))
          if (o.format === "json") return yield* Console.log(JSON.stringify(summaries, null, 2))
          if (summaries.length === 0) return yield* Console.log("[OK] No failed messages were found.")
          const total = (yield* admin.stats(o.transport)).ready
          yield* Console.log(
            total === 1
              ? "There is 1 message in the failure transport."
              : `There are ${total} messages in the failure transport.`
          )
          yield* Console.log(
            renderTable(
              ["Id", "Class", "Failed at", "Error"],
              summaries.map((d) => [d.id, d.type, d.failedAt, truncate(oneLine(d.error), 100)])
            )
          )
          if (summaries.length === o.max) yield* Console.log(`Showing first ${o.max} messages.`)
          yield* Console.log(`Run "failed:show <id> -v" to see message details.`)
        })
      )
  ).pipe(Command.withDescription("List failed messages, or show one in detail"))

  /** The ids to act on: the given ones, or every failed message (of a type) with --all. */
  const selection = (
    transport: TransportShape,
    name: string,
    o: { readonly ids: ReadonlyArray<string>; readonly all: boolean; readonly classFilter: Option.Option<string> }
  ) =>
    Effect.gen(function*() {
      const admin = yield* TransportAdmin
      if (o.all && o.ids.length > 0) return yield* fail("You cannot specify message ids when using --all")
      if (!o.all && o.ids.length === 0) {
        return yield* fail("Please specify at least one message id, or --all for every failed message")
      }
      if (Option.isSome(o.classFilter) && !o.all) return yield* fail("--class-filter goes with --all")
      if (o.all) {
        const messages = yield* admin.list(name, {
          max: Number.MAX_SAFE_INTEGER,
          type: Option.getOrUndefined(o.classFilter)
        })
        return messages
      }
      const found: Array<StoredMessage> = []
      const missing: Array<string> = []
      for (const id of o.ids) {
        const m = yield* admin.find(name, id)
        if (Option.isSome(m)) found.push(m.value)
        else missing.push(id)
      }
      if (missing.length > 0) {
        return yield* fail(`Not in the "${name}" transport: ${missing.map((id) => `"${id}"`).join(", ")}`)
      }
      return found
    })

  const confirm = (message: string, forced: boolean) =>
    Effect.gen(function*() {
      if (forced) return
      if (!process.stdin.isTTY) {
        return yield* fail(`${message} Refusing without --force in a non-interactive session.`)
      }
      const yes = yield* Prompt.confirm({ message, initial: false }).pipe(
        Effect.catchAll(() => Effect.succeed(false))
      )
      if (!yes) return yield* fail("Cancelled.")
    })

  /** The failed messages a `failed:retry`/`failed:remove` run acts on, handed to `act` (not called when none). */
  const onSelected = <E, R>(
    o: {
      readonly dsn: Option.Option<Redacted.Redacted>
      readonly ids: ReadonlyArray<string>
      readonly all: boolean
      readonly classFilter: Option.Option<string>
      readonly transport: string
    },
    act: (transport: TransportShape, messages: ReadonlyArray<StoredMessage>) => Effect.Effect<void, E, R>
  ) =>
    withTransport(
      o.dsn,
      Effect.gen(function*() {
        const transport = yield* Transport
        yield* known(transport, [o.transport])
        const messages = yield* selection(transport, o.transport, o)
        if (messages.length === 0) return yield* Console.log("[OK] No failed messages were found.")
        yield* act(transport, messages)
      })
    )

  const failedRetry = Command.make(
    "failed:retry",
    { dsn, ids, all, classFilter, force, transport: failureTransport },
    (o) =>
      onSelected(o, (transport, messages) =>
        Effect.gen(function*() {
          const admin = yield* TransportAdmin
          const plan: Array<{ readonly message: StoredMessage; readonly to: string; readonly headers: Headers.Headers }> = []
          for (const message of messages) {
            const headers = Headers.decode(message.headers)
            if (Either.isLeft(headers)) {
              return yield* fail(`Message "${message.id}" has corrupt headers: it can only be shown or removed`)
            }
            const to = headers.right.originalTransport ?? o.transport
            if (!transport.names.includes(to)) {
              return yield* fail(`Message "${message.id}" came from the unknown transport "${to}"`)
            }
            // A new start: the retry budget and the last error are cleared; handlers that already succeeded stay skipped.
            const { errorDetails: _e, originalTransport: _o, redeliveries: _r, ...rest } = headers.right
            plan.push({ message, to, headers: new Headers.Headers(rest) })
          }
          yield* confirm(`Retry ${plan.length} message(s)?`, o.force)
          let moved = 0
          for (const { headers, message, to } of plan) {
            if (yield* admin.move(o.transport, message.id, { to, headers })) {
              moved++
              yield* Console.log(`[OK] Message "${message.id}" (${message.messageId}) sent back to "${to}".`)
            }
          }
          yield* Console.log(`${moved} message(s) will be retried by the workers of their transports.`)
        }))
  ).pipe(Command.withDescription("Send failed messages back to their original transport, ready now"))

  const failedRemove = Command.make(
    "failed:remove",
    { dsn, ids, all, classFilter, force, transport: failureTransport },
    (o) =>
      onSelected(o, (transport, messages) =>
        Effect.gen(function*() {
          const admin = yield* TransportAdmin
          yield* confirm(`Permanently remove ${messages.length} message(s)?`, o.force)
          let removed = 0
          for (let i = 0; i < messages.length; i += 1000) {
            removed += yield* admin.remove(o.transport, messages.slice(i, i + 1000).map((m) => m.id))
          }
          yield* Console.log(`[OK] ${removed} message(s) removed.`)
        }))
  ).pipe(Command.withDescription("Delete failed messages"))

  const stats = Command.make(
    "stats",
    { dsn, transports: Args.text({ name: "transport" }).pipe(Args.repeated), format },
    (o) =>
      withTransport(
        o.dsn,
        Effect.gen(function*() {
          const transport = yield* Transport
          const admin = yield* TransportAdmin
          yield* known(transport, o.transports)
          const names = o.transports.length > 0 ? o.transports : transport.names
          const rows: Array<TransportStats> = yield* Effect.forEach(names, (name) => admin.stats(name))
          if (o.format === "json") {
            return yield* Console.log(
              JSON.stringify({ transports: Object.fromEntries(rows.map(({ transport, ...rest }) => [transport, rest])) }, null, 2)
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

  const builtIn = [setupTransports, failedShow, failedRetry, failedRemove, stats] as const
  const subcommands = [
    ...builtIn,
    ...(idempotencyOptions === undefined ? [] : [idempotencyPurge]),
    ...(options.handlers === undefined ? [] : [consume(options.handlers)]),
    ...(options.commands ?? [])
  ] as unknown as readonly [typeof setupTransports]
  return Command.make("outbox").pipe(
    Command.withDescription("Operate the effect-outbox transactional outbox"),
    Command.withSubcommands(subcommands)
  )
}

interface FailedDetails {
  readonly id: string
  readonly type: string
  readonly messageId: string
  readonly failedAt: string
  readonly error: string
  readonly errorTag: string
  readonly errorMessage: string
  readonly originalTransport: string | null
  readonly retries: ReadonlyArray<{ readonly retry: number; readonly delayMs: number; readonly error: string }>
  readonly cause?: string | null
  readonly body?: unknown
  readonly bodyDecodable?: boolean
}

const describeFailed = (m: StoredMessage, verbose: boolean): FailedDetails => {
  const decoded = Headers.decode(m.headers)
  const headers = Either.getOrUndefined(decoded)
  const details = headers?.errorDetails
  const errorTag = details?.tag ?? (headers === undefined ? "MessageDecodeError" : "(unknown)")
  const errorMessage = details?.message ?? (headers === undefined ? "The headers could not be decoded." : "")
  const base: FailedDetails = {
    id: m.id,
    type: headers?.type ?? "(undecodable)",
    messageId: m.messageId,
    failedAt: formatTime(m.availableAt),
    error: `${errorTag}: ${errorMessage}`,
    errorTag,
    errorMessage,
    originalTransport: headers?.originalTransport ?? null,
    retries: (headers?.redeliveries ?? []).map((r) => ({
      retry: r.retryCount,
      delayMs: r.delayMs,
      error: `${r.errorTag}: ${r.errorMessage}`
    }))
  }
  if (!verbose) return base
  let body: unknown = m.body
  let bodyDecodable = true
  try {
    body = JSON.parse(m.body)
  } catch {
    bodyDecodable = false
  }
  return { ...base, cause: details?.cause ?? null, body, bodyDecodable }
}

const printFailed = (d: FailedDetails) =>
  Effect.gen(function*() {
    yield* Console.log("Failed Message Details")
    yield* Console.log(renderTable(["Field", "Value"], [
      ["Id", d.id],
      ["Class", d.type],
      ["Message Id", d.messageId],
      ["Failed at", d.failedAt],
      ["Error", truncate(oneLine(d.errorMessage), 200)],
      ["Error Class", d.errorTag],
      ["Transport", d.originalTransport ?? "(unknown)"]
    ]))
    yield* Console.log("Message history:")
    if (d.retries.length === 0) yield* Console.log("  (no retries)")
    for (const r of d.retries) yield* Console.log(`  * retry #${r.retry} after ${formatAge(r.delayMs)}: ${r.error}`)
    if (d.body === undefined) {
      yield* Console.log(`Re-run with -v to see the cause and the message body.`)
    } else {
      yield* Console.log("Cause:")
      yield* Console.log(d.cause ?? "(no data)")
      yield* Console.log(d.bodyDecodable ? "Message:" : "Message (undecodable, raw body):")
      yield* Console.log(d.bodyDecodable ? JSON.stringify(d.body, null, 2) : String(d.body))
    }
    yield* Console.log(`Run "failed:retry ${d.id}" to retry this message, "failed:remove ${d.id}" to delete it.`)
  })


/**
 * Runs a command tree on `argv` (`process.argv`): an Effect that fails with the command's error.
 *
 * @since 0.1.0
 * @category runners
 */
export const run = (command: ReturnType<typeof make>) => Command.run(command, { name: "outbox", version: "0.1.0" })

/**
 * Runs a command tree as the process's main program: a failure prints one line (the whole cause with
 * `-v`) and exits 1; a worker stopped by a limit or a signal exits 0.
 *
 * @since 0.1.0
 * @category runners
 */
export const main = (command: ReturnType<typeof make>, argv: ReadonlyArray<string> = process.argv): void => {
  const verboseFlag = argv.includes("-v") || argv.includes("--verbose")
  // `outbox failed:show | head` closes the pipe early: that is not an error.
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(process.exitCode ?? 0)
  })
  run(command)(argv).pipe(
    Effect.catchAllCause((cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
      const failure = Cause.failureOption(cause)
      // @effect/cli has already printed its own validation errors.
      if (Option.isSome(failure) && ValidationError.isValidationError(failure.value)) {
        return Effect.sync(() => void (process.exitCode = 1))
      }
      const line = Option.match(failure, {
        onNone: () => `unexpected error: ${describeError(Cause.squash(cause))}`,
        onSome: (error) => describeError(error)
      })
      return Console.error(verboseFlag ? Cause.pretty(cause) : `error: ${line}`).pipe(
        Effect.zipRight(Effect.sync(() => void (process.exitCode = 1)))
      )
    }),
    Logger.withMinimumLogLevel(verboseFlag ? LogLevel.Info : LogLevel.Warning),
    Effect.provide(NodeContext.layer),
    NodeRuntime.runMain({ disableErrorReporting: true })
  )
}
