/**
 * `npm start`: the demo on an embedded PostgreSQL, or on `DATABASE_URL` when it is set.
 */
import { Command, Options } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import * as Demo from "./Demo.js"
import * as EmbeddedPostgres from "./EmbeddedPostgres.js"

const databaseUrl = Effect.gen(function*() {
  const fromEnv = process.env.DATABASE_URL
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv
  yield* Console.error("Starting an embedded PostgreSQL (set DATABASE_URL to use your own)…")
  const pg = yield* Effect.acquireRelease(
    Effect.promise(() => EmbeddedPostgres.start()),
    (pg) => Effect.promise(() => pg.stop())
  )
  return pg.url
})

const demo = Command.make(
  "demo",
  {
    json: Options.boolean("json").pipe(Options.withDescription("End with the summary as one JSON line")),
    orders: Options.integer("orders").pipe(Options.withDefault(3000), Options.withDescription("Orders to pay")),
    rollbackShare: Options.float("rollback-share").pipe(
      Options.withDefault(0.1),
      Options.withDescription("Share of payments rolled back on purpose (0..1)")
    ),
    producers: Options.integer("producers").pipe(Options.withDefault(8)),
    redeliverShare: Options.float("redeliver-share").pipe(
      Options.withDefault(0.02),
      Options.withDescription("Share of handled messages delivered again on purpose (0..1)")
    )
  },
  (options) =>
    Effect.gen(function*() {
      const url = yield* databaseUrl
      yield* Demo.run(options).pipe(
        Effect.provide(Layer.orDie(PgClient.layer({ url: Redacted.make(url), maxConnections: options.producers + 4 })))
      )
    }).pipe(Effect.scoped)
).pipe(Command.withDescription("Pay orders through the transactional outbox and prove every guarantee"))

const cli = Command.run(demo, { name: "effect-outbox demo", version: "0.1.0" })

cli(process.argv).pipe(
  Logger.withMinimumLogLevel(LogLevel.Warning),
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain
)
