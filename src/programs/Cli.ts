/**
 * The `outbox` command line (Symfony Messenger's command names): the command tree, to run as is or to mount in
 * an application with its own handlers.
 *
 * @since 0.1.0
 */
import { Command, ValidationError } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import { describeError } from "../internal/describeError.js"
import type * as AmqpTransport from "../layers/amqp/AmqpTransport.js"
import type * as KafkaTransport from "../layers/kafka/KafkaTransport.js"
import type * as PgCdcTransport from "../layers/PgCdcTransport.js"
import type * as PgIdempotencyStore from "../layers/PgIdempotencyStore.js"
import type * as PgTransport from "../layers/PgTransport.js"
import type * as ScheduleRetryStrategy from "../layers/ScheduleRetryStrategy.js"
import type { Handlers } from "../services/Handlers.js"
import type { IdempotencyStore } from "../services/IdempotencyStore.js"
import type { Transport } from "../services/Transport.js"
import * as Argv from "./cli/argv.js"
import * as Cdc from "./cli/cdc.js"
import * as Commands from "./cli/commands.js"
import * as DashboardCommand from "./cli/dashboard.js"
import * as Environment from "./cli/environment.js"
import * as Failed from "./cli/failed.js"
import * as Help from "./cli/help.js"
import * as CliLogger from "./cli/logger.js"
import { plainWhenPiped } from "./cli/terminal.js"

import { CliError } from "./cli/options.js"

export {
  /** @since 0.1.0 */
  CliError
} from "./cli/options.js"

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
   * The idempotency store's options (`OUTBOX_IDEMPOTENCY_TABLE` overrides the table). Given, they say the
   * application uses the store: `setup-transports` creates its table too. Without them the store still serves
   * `consume` and `idempotency:purge` with its defaults, and `setup-transports --idempotency` creates its table.
   * `false` leaves the store out.
   */
  readonly idempotency?: PgIdempotencyStore.Options | false
  /**
   * Transport options; `--table` and `OUTBOX_TABLE` override the table name, `--transport-queue NAME=QUEUE` a
   * transport's queue. The operator commands (`stats`, `failed:*`) also serve every other queue of the table.
   */
  readonly transport?: PgTransport.Options
  /**
   * A RabbitMQ transport served beside the PostgreSQL one (through `TransportRouter`), its URL from `url` or
   * `AMQP_URL`: `setup-transports` declares its exchange, queues and bindings, `consume amqp` reads it, `stats`
   * counts it, and its failures go to PostgreSQL's `failed` (where `failed:retry` sends them back to the broker).
   */
  readonly amqp?: Omit<AmqpTransport.Options, "url"> & { readonly url?: string | Redacted.Redacted<string> }
  /**
   * A Kafka transport served beside the PostgreSQL one (through `TransportRouter`), its brokers from `brokers` or
   * `KAFKA_URL` (`kafka://[user:password@]host:port[,host:port][?sasl=scram-sha-512&tls=true]`, or `host:port`
   * entries): `setup-transports` creates its topics, `consume kafka` joins its consumer group, `stats` shows the
   * group's lag per partition, and its failures go to PostgreSQL's `failed` (where `failed:retry` sends them back to
   * their topic).
   */
  readonly kafka?:
    & Omit<KafkaTransport.Options, "brokers">
    & { readonly brokers?: string | ReadonlyArray<string> | Redacted.Redacted<string> }
  /**
   * A CDC transport served beside the table (`PgCdcTransport`, through `TransportRouter`): `setup-transports`
   * checks the server and creates its event table and publication, `stats` shows its replication slot, and
   * `cdc:connector` prints the Debezium connector that carries it.
   */
  readonly cdc?: PgCdcTransport.Options
  readonly retry?: ScheduleRetryStrategy.Options
  /** Extra commands mounted beside the built-in ones. */
  readonly commands?: ReadonlyArray<Command.Command<string, never, unknown, unknown>>
}

/**
 * Builds the command tree.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: CliOptions = {}) => {
  const environment = Environment.make(options)
  const { consume, idempotencyPurge, setupTransports, stats, storageCompact } = Commands.make(options, environment)
  const { failedRemove, failedRetry, failedShow } = Failed.make(environment)
  const dashboard = DashboardCommand.make(environment)
  const builtIn = [setupTransports, failedShow, failedRetry, failedRemove, stats, storageCompact, dashboard] as const
  const subcommands = [
    ...builtIn,
    ...(environment.idempotencyOptions === undefined ? [] : [idempotencyPurge]),
    ...(options.handlers === undefined ? [] : [consume(options.handlers)]),
    ...(options.cdc === undefined ? [] : [Cdc.make(options.cdc)]),
    ...(options.commands ?? [])
  ] as unknown as readonly [typeof setupTransports]
  return Command.make("outbox").pipe(
    Command.withDescription("Operate the effect-outbox transactional outbox"),
    Command.withSubcommands(subcommands)
  )
}

/**
 * Runs a command tree on `argv` (`process.argv`): an Effect that fails with the command's error. Before
 * `@effect/cli` parses them, the arguments are checked (an unknown option or command fails with a `CliError` naming
 * the nearest valid one; options before the command are moved after it), and `--help` is rendered here.
 *
 * @since 0.1.0
 * @category runners
 */
export const run = (command: ReturnType<typeof make>) => {
  const cli = Command.run(command, { name: "outbox", version })
  const tree = Argv.treeOf(command)
  return (argv: ReadonlyArray<string>) =>
    Effect.suspend(() => {
      const prepared = Argv.prepare(tree, argv.slice(2))
      if (Either.isLeft(prepared)) return Effect.fail(new CliError({ message: prepared.left }))
      const help = helpOf(command, tree, prepared.right)
      return help === undefined ? cli([...argv.slice(0, 2), ...prepared.right]) : Console.log(help)
    })
}

/** The package's version, as `--version` prints it. */
const version = "0.1.0"

/** The help `args` ask for (`--help` or `-h` before any `--`), or `undefined` when they ask for none. */
const helpOf = (command: ReturnType<typeof make>, tree: Argv.Tree, args: ReadonlyArray<string>) => {
  const end = args.indexOf("--")
  const head = end < 0 ? args : args.slice(0, end)
  if (args.length === 0) return Help.rootHelp(command, "outbox", version)
  if (!head.includes("--help") && !head.includes("-h")) return undefined
  let at = 0
  while (at < head.length && head[at]!.startsWith("-")) at += Argv.builtIns.get(head[at]!)?.takesValue ? 2 : 1
  const spec = at < head.length ? tree.get(head[at]!) : undefined
  if (spec === undefined) return Help.rootHelp(command, "outbox", version)
  return spec.nested ? undefined : Help.commandHelp("outbox", spec.name, spec.descriptor)
}

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
    // INFO and above, as Effect's default: a worker's and its handlers' logs show (`--log-level` changes it).
    Logger.withMinimumLogLevel(LogLevel.Info),
    Effect.provide(Logger.replace(Logger.defaultLogger, CliLogger.make({ omitOutcomes: verboseFlag }))),
    plainWhenPiped,
    Effect.provide(NodeContext.layer),
    // The pretty logger would replace the one above, and it spreads an entry over several lines.
    NodeRuntime.runMain({ disableErrorReporting: true, disablePrettyLogger: true })
  )
}
