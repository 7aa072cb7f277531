/**
 * A chaos worker process: `Worker.run` in the role its configuration names (see `model.ts`), until it is killed.
 * It exits when its parent goes away (its stdin closes), so a chaos run that dies leaves no worker behind.
 * Usage: node --import tsx chaos/worker.ts '<WorkerConfig as JSON>'
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Worker from "../src/programs/worker/Worker.js"
import { queue, workerApplicationName, type WorkerConfig } from "./model.js"
import { database, workerStack } from "./stack.js"

const config = JSON.parse(process.argv[2]!) as WorkerConfig

process.stdin.on("end", () => process.exit(0)).on("error", () => process.exit(0)).resume()

/** Printed once the layers are built (the pool has connected): the chaos program injects faults only then. */
const ready = Effect.sync(() => process.stdout.write("READY\n"))

ready.pipe(Effect.zipRight(Worker.run({
  transports: [config.role === "broker-consumer" ? "amqp" : config.role === "kafka-consumer" ? "kafka" : queue],
  batchSize: config.batchSize,
  concurrency: config.concurrency,
  sleep: "250 millis",
  shutdownTimeout: "2 seconds",
  idempotencyPurge: false,
  ...(config.settleTimeoutMs === undefined ? {} : { settleTimeout: Duration.millis(config.settleTimeoutMs) })
}))).pipe(
  Effect.provide(workerStack(config).pipe(Layer.provide(database(config.url, workerApplicationName)))),
  // Warnings too: the chaos program counts the settling writes given up after settleTimeout.
  Logger.withMinimumLogLevel(LogLevel.Warning),
  NodeRuntime.runMain
)
