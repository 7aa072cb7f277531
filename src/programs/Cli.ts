/**
 * The `outbox` command line, built with `@effect/cli`. An application mounts it with its own handlers.
 *
 * @since 0.1.0
 */
import { Args, Command, Options } from "@effect/cli"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as PgTransport from "../layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../layers/ScheduleRetryStrategy.js"
import type { Handlers } from "../services/Handlers.js"
import { Transport } from "../services/Transport.js"
import * as Worker from "./Worker.js"

/**
 * What an application gives the command line.
 *
 * @since 0.1.0
 * @category models
 */
export interface CliOptions {
  /** The application's handlers; without them the tree has no `consume` command. */
  readonly handlers?: Layer.Layer<Handlers, unknown>
  readonly transport?: PgTransport.Options
  readonly retry?: ScheduleRetryStrategy.Options
}

const dsn = Options.redacted("dsn").pipe(
  Options.withDescription("PostgreSQL connection URL (default: $DATABASE_URL)"),
  Options.optional
)

const database = (flag: Option.Option<Redacted.Redacted>) =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      const url = Option.isSome(flag) ? flag.value : yield* Config.redacted("DATABASE_URL")
      return PgClient.layer({ url })
    })
  )

/**
 * Builds the command tree.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: CliOptions = {}) => {
  const transportLayer = (flag: Option.Option<Redacted.Redacted>) =>
    PgTransport.layer(options.transport).pipe(Layer.provide(database(flag)))

  const setupTransports = Command.make(
    "setup-transports",
    { dsn },
    ({ dsn }) =>
      Effect.gen(function*() {
        const transport = yield* Transport
        yield* transport.setup
        yield* Console.log(
          `Set up table ${options.transport?.table ?? PgTransport.defaultTable} for transports: ${transport.names.join(", ")}`
        )
      }).pipe(Effect.provide(transportLayer(dsn)))
  ).pipe(Command.withDescription("Create or migrate the outbox table (idempotent)"))

  const consume = (handlers: Layer.Layer<Handlers, unknown>) =>
    Command.make(
      "consume",
      {
        dsn,
        transports: Args.text({ name: "transport" }).pipe(Args.atLeast(1)),
        batchSize: Options.integer("batch-size").pipe(Options.withDefault(50)),
        concurrency: Options.integer("concurrency").pipe(Options.withDefault(1)),
        sleep: Options.float("sleep").pipe(Options.withDefault(1), Options.withDescription("Poll interval in seconds")),
        limit: Options.integer("limit").pipe(Options.optional),
        verbose: Options.boolean("verbose").pipe(Options.withAlias("v"))
      },
      (o) =>
        Worker.run({
          transports: o.transports,
          batchSize: o.batchSize,
          concurrency: o.concurrency,
          sleep: o.sleep * 1000,
          ...(Option.isSome(o.limit) ? { limit: o.limit.value } : {}),
          ...(o.verbose
            ? {
              onEvent: (event: Worker.WorkerEvent) =>
                Console.log(`${event.messageId} ${event.type} ${event._tag} ${event.durationMs}ms`)
            }
            : {})
        }).pipe(
          Effect.flatMap((summary) =>
            Console.log(`Stopped: handled ${summary.handled}, retried ${summary.retried}, failed ${summary.failed}`)
          ),
          Effect.provide(
            Layer.mergeAll(handlers, ScheduleRetryStrategy.layer(options.retry)).pipe(
              Layer.merge(transportLayer(o.dsn))
            )
          )
        )
    ).pipe(Command.withDescription("Run the worker on the given transports, by priority"))

  const subcommands = options.handlers === undefined
    ? [setupTransports] as const
    : [setupTransports, consume(options.handlers)] as const
  return Command.make("outbox").pipe(
    Command.withDescription("Operate the effect-outbox transactional outbox"),
    Command.withSubcommands(subcommands)
  )
}

/**
 * Runs a command tree on `argv` (`process.argv`).
 *
 * @since 0.1.0
 * @category runners
 */
export const run = (command: ReturnType<typeof make>) =>
  Command.run(command, { name: "outbox", version: "0.1.0" })
