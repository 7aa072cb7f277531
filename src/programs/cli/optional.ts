/**
 * The optional peer dependencies of the command line. A module that imports one is loaded only by the command that
 * needs it: the `outbox` binary of an application that installed none of them must still run every other command,
 * and a static import would stop it at startup with Node's stack. When one is missing, the command says which
 * feature needs what, and the line that installs it (versions pinned: without one, npm installs Effect 4's).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import { describeError } from "../../internal/describeError.js"
import { CliError } from "./options.js"

/** A feature's optional peers, as `npm install` takes them (the versions this repository tests). @internal */
export interface OptionalPeers {
  /** What needs them, as the start of a sentence. */
  readonly feature: string
  readonly packages: ReadonlyArray<string>
}

/** @internal */
export const amqp: OptionalPeers = {
  feature: "The RabbitMQ transport (Cli.make({ amqp }))",
  packages: ["amqplib@2.3.1"]
}

/** @internal */
export const kafka: OptionalPeers = {
  feature: "The Kafka transport (Cli.make({ kafka }))",
  packages: ["@platformatic/kafka@1.35.0"]
}

/** @internal */
export const mysql: OptionalPeers = {
  feature: "A MySQL or MariaDB DSN",
  packages: ["@effect/sql-mysql2@0.53.0"]
}

/** @internal */
export const metrics: OptionalPeers = {
  feature: "--metrics-port",
  packages: [
    "@effect/opentelemetry@0.64.1",
    "@opentelemetry/exporter-prometheus@0.223.0",
    "@opentelemetry/sdk-metrics@2.12.0",
    "@opentelemetry/resources@2.12.0",
    "@opentelemetry/api@1.9.1"
  ]
}

/** The package Node could not find, from an import's failure; `undefined` for any other failure. @internal */
export const missingPackage = (error: unknown): string | undefined => {
  if (typeof error !== "object" || error === null) return undefined
  const { code, message } = error as { readonly code?: unknown; readonly message?: unknown }
  if (code !== "ERR_MODULE_NOT_FOUND" || typeof message !== "string") return undefined
  return /Cannot find (?:package|module) '([^']+)'/.exec(message)?.[1]
}

/**
 * The message of a failed import of `peers`' module: the missing package and the line that installs them all.
 *
 * @internal
 */
export const loadFailure = (peers: OptionalPeers, error: unknown): string => {
  const missing = missingPackage(error)
  const install = `npm install --save-exact ${peers.packages.join(" ")}`
  return missing !== undefined && !missing.startsWith(".") && !missing.startsWith("/")
    ? `${peers.feature} needs the package ${missing}, which is not installed: ${install}`
    : `${peers.feature}: cannot load its module (${describeError(error)}); it needs ${install}`
}

/**
 * Imports a module that needs `peers`, failing with a one-line `CliError` that names what to install.
 *
 * @internal
 */
export const load = <A>(peers: OptionalPeers, importModule: () => Promise<A>): Effect.Effect<A, CliError> =>
  Effect.tryPromise({ try: importModule, catch: (error) => new CliError({ message: loadFailure(peers, error) }) })
