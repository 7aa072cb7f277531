/**
 * The recovery scenario's doomed worker (after test/fixtures/hanging-worker.ts): its handler announces
 * the message it started and then never returns; the benchmark kills it with SIGKILL while it holds
 * the messages of its claim.
 * Usage: node --import tsx bench/recovery-worker.ts <database-url> <lease-ms>
 */
import { NodeRuntime } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import { BenchNoop, queue, table } from "./common.js"

const [url, leaseMs] = process.argv.slice(2)

const handlers = Handlers.layer([
  Handlers.handler(
    BenchNoop,
    (_message, envelope) =>
      Effect.sync(() => process.stdout.write(`STARTED ${envelope.messageId}\n`)).pipe(Effect.zipRight(Effect.never))
  )
])

const layers = Layer.mergeAll(
  handlers,
  ScheduleRetryStrategy.layerDefault,
  PgTransport.layer({ table, transports: { [queue]: { redeliverTimeout: Duration.millis(Number(leaseMs)) } } })
).pipe(Layer.provide(PgClient.layer({ url: Redacted.make(url!), maxConnections: 4 })))

Worker.run({ transports: [queue], batchSize: 10, sleep: "20 millis" }).pipe(
  Effect.provide(layers),
  Logger.withMinimumLogLevel(LogLevel.Error),
  NodeRuntime.runMain
)
