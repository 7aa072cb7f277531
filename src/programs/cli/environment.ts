/**
 * The layers the commands run on, from the flags (`--dsn`, `--table`, `--transport-queue`), the environment
 * (`DATABASE_URL`, `OUTBOX_TABLE`, `OUTBOX_TRANSPORT_QUEUES`, `OUTBOX_IDEMPOTENCY_TABLE`, `AMQP_URL`) and the
 * application's options. The operator commands also serve the queues the table holds that no option names, so the
 * `outbox` binary works on any deployment without its code.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import type { OutboxConfigError, StorageNotReadyError } from "../../domain/Errors.js"
import * as Identifier from "../../domain/Identifier.js"
import { describeError } from "../../internal/describeError.js"
import { failureTransports } from "../../internal/transports.js"
import * as PgTransport from "../../layers/PgTransport.js"
import * as TransportRouter from "../../layers/TransportRouter.js"
import { Transport, type TransportShape } from "../../services/Transport.js"
import { backendLayer, TransportAdmin, type TransportBackend } from "../../services/TransportAdmin.js"
import type { CliOptions } from "../Cli.js"
import { CliDialect, type Dialect, fromUrl } from "./dialects.js"
import * as Optional from "./optional.js"
import { CliError, fail, type Target } from "./options.js"

/**
 * What the operator commands know of the deployment beside the transports: the table, and the transports named
 * only by the origin their failed messages record (their queue is assumed to bear their name).
 *
 * @internal
 */
export class Deployment extends Context.Tag("effect-outbox/cli/Deployment")<Deployment, {
  readonly table: string
  readonly inferred: ReadonlySet<string>
}>() {}

/** Where a transport's messages are, for the operator commands: the PostgreSQL transport's options. */
interface Resolved {
  readonly options: PgTransport.Options
  readonly inferred: ReadonlySet<string>
}

/** The `NAME=QUEUE` pairs of `--transport-queue` and `OUTBOX_TRANSPORT_QUEUES` (comma-separated), checked. */
const parseQueues = (values: ReadonlyArray<string>) =>
  Effect.forEach(values, (value): Effect.Effect<readonly [string, string], CliError | OutboxConfigError> => {
    const equals = value.indexOf("=")
    if (equals <= 0 || equals === value.length - 1) {
      return fail(
        `--transport-queue: expected NAME=QUEUE (a transport and its queue_name), got ${JSON.stringify(value)}`
      )
    }
    return Effect.all([
      Identifier.validateQueueName(value.slice(0, equals).trim()),
      Identifier.validateQueueName(value.slice(equals + 1).trim())
    ])
  })

/** @internal */
export const make = (options: CliOptions) => {
  const database = (flag: Option.Option<Redacted.Redacted>) =>
    Layer.unwrapEffect(
      Effect.gen(function*() {
        const url = Option.isSome(flag)
          ? flag.value
          : yield* Config.redacted("DATABASE_URL").pipe(
            Effect.mapError(() => new CliError({ message: "No database: pass --dsn or set DATABASE_URL" }))
          )
        const dialect = yield* dialectOf(url)
        return Layer.merge(
          dialect.client(url).pipe(
            Layer.mapError((error) =>
              isCliError(error)
                ? error
                : new CliError({ message: `Cannot connect to ${dialect.name}: ${describeError(error)}` })
            )
          ),
          Layer.succeed(CliDialect, dialect)
        )
      })
    )

  /** The table: `--table`, else `OUTBOX_TABLE`, else the application's, else `messenger_messages`; checked. */
  const tableOf = (target: Target) =>
    Effect.gen(function*() {
      const table = Option.isSome(target.table)
        ? target.table.value
        : yield* Config.string("OUTBOX_TABLE").pipe(
          Config.withDefault(options.transport?.table ?? PgTransport.defaultTable),
          Effect.orElseSucceed(() => options.transport?.table ?? PgTransport.defaultTable)
        )
      return yield* Identifier.validateTableName(table, 48)
    })

  /** The names the brokers serve beside the table (`Cli.make({ amqp, kafka })`): never taken for a queue of the table. */
  const brokerNames = [
    ...(options.amqp === undefined ? [] : Object.keys(options.amqp.transports ?? { amqp: {} })),
    ...(options.kafka === undefined ? [] : Object.keys(options.kafka.transports ?? { kafka: {} })),
    ...(options.cdc === undefined ? [] : Object.keys(options.cdc.transports ?? { cdc: {} }))
  ]

  /**
   * The transports of the table: the application's, with the queues of `--transport-queue`; with `discover`, also
   * every queue the table holds and every transport its failure queues (and `inspect`) record as an origin.
   */
  const resolve = (
    target: Target,
    discover: { readonly inspect: ReadonlyArray<string> } | undefined
  ) =>
    Effect.gen(function*() {
      const dialect = yield* CliDialect
      const table = yield* tableOf(target)
      const fromEnv = yield* Config.string("OUTBOX_TRANSPORT_QUEUES").pipe(
        Config.withDefault(""),
        Effect.orElseSucceed(() => "")
      )
      const pairs = yield* parseQueues([
        ...fromEnv.split(",").map((s) => s.trim()).filter((s) => s.length > 0),
        ...target.transportQueues
      ])
      const transports: Record<string, PgTransport.TransportOptions> = {
        ...(options.transport?.transports ?? { outbox: {} })
      }
      for (const [name, queue] of pairs) transports[name] = { ...transports[name], queueName: queue }
      const inferred = new Set<string>()
      if (discover !== undefined) {
        const taken = new Set(brokerNames)
        const used = new Set<string>()
        const reserve = () => {
          for (const [name, , o] of failureTransports(transports)) {
            taken.add(name)
            used.add(o?.queueName ?? name)
          }
        }
        reserve()
        for (const queue of yield* explained(table, dialect.queueNames({ table }))) {
          if (!taken.has(queue) && !used.has(queue)) transports[queue] = {}
        }
        reserve()
        // The transports whose failures wait in each failure queue: one not served yet bears its queue's name.
        const resolved = failureTransports(transports)
        const queueOf = (name: string) => {
          const found = resolved.find(([n]) => n === name)
          return found?.[2]?.queueName ?? name
        }
        const failureQueues = new Set([
          ...resolved.map(([, failure]) => queueOf(failure)),
          ...discover.inspect.map(queueOf)
        ])
        for (const queue of failureQueues) {
          for (const { transport } of yield* explained(table, dialect.failedFrom(queue, { table }))) {
            if (transport === null || taken.has(transport) || used.has(transport)) continue
            transports[transport] = {}
            taken.add(transport)
            used.add(transport)
            inferred.add(transport)
          }
        }
      }
      return { options: { ...options.transport, table, transports }, inferred } satisfies Resolved
    })

  const served = (resolved: Resolved) =>
    Effect.gen(function*() {
      const dialect = yield* CliDialect
      if (options.amqp === undefined && options.kafka === undefined && options.cdc === undefined) {
        return backendLayer(dialect.transport(resolved.options))
      }
      const brokers: Array<Effect.Effect<TransportBackend, OutboxConfigError, Scope.Scope | SqlClient.SqlClient>> = []
      if (options.amqp !== undefined) {
        const { url: explicit, ...amqp } = options.amqp
        const url = explicit ?? (yield* Config.redacted("AMQP_URL").pipe(
          Effect.mapError(() => new CliError({ message: "No broker: set AMQP_URL" }))
        ))
        const AmqpTransport = yield* Optional.load(Optional.amqp, () => import("../../layers/amqp/AmqpTransport.js"))
        brokers.push(AmqpTransport.make({ ...amqp, url }))
      }
      if (options.kafka !== undefined) {
        const { brokers: explicit, ...kafka } = options.kafka
        const bootstrap = explicit ?? (yield* Config.redacted("KAFKA_URL").pipe(
          Effect.mapError(() => new CliError({ message: "No Kafka broker: set KAFKA_URL (kafka://host:port)" }))
        ))
        const KafkaTransport = yield* Optional.load(
          Optional.kafka,
          () => import("../../layers/kafka/KafkaTransport.js")
        )
        brokers.push(KafkaTransport.make({ ...kafka, brokers: bootstrap }))
      }
      if (options.cdc !== undefined) {
        if (dialect.name !== "PostgreSQL") {
          return yield* fail("The CDC transport (Cli.make({ cdc })) runs on PostgreSQL")
        }
        const PgCdcTransport = yield* Effect.promise(() => import("../../layers/PgCdcTransport.js"))
        brokers.push(PgCdcTransport.make(options.cdc))
      }
      return TransportRouter.layer(dialect.transport(resolved.options), ...brokers)
    })

  /** The application's transports (what `consume` and `setup-transports` serve), on the `SqlClient` in context. */
  const transportOnly = (target: Target) => Layer.unwrapEffect(Effect.flatMap(resolve(target, undefined), served))

  const transportLayer = (target: Target) => transportOnly(target).pipe(Layer.provideMerge(database(target.dsn)))

  /** The transports of the operator commands: the application's and every queue of the table, with `Deployment`. */
  const operatorLayer = (target: Target, inspect: ReadonlyArray<string>) =>
    Layer.unwrapEffect(
      Effect.gen(function*() {
        const resolved = yield* resolve(target, { inspect })
        return Layer.merge(
          yield* served(resolved),
          Layer.succeed(Deployment, { table: resolved.options.table!, inferred: resolved.inferred })
        )
      })
    ).pipe(Layer.provideMerge(database(target.dsn)))

  const idempotencyOptions = options.idempotency === false ? undefined : options.idempotency ?? {}
  const idempotencyOnly = Layer.unwrapEffect(
    Effect.map(
      Effect.all([Config.option(Config.string("OUTBOX_IDEMPOTENCY_TABLE")), CliDialect]),
      ([table, dialect]) =>
        dialect.idempotency({
          ...idempotencyOptions,
          ...(Option.isSome(table) ? { table: table.value } : {})
        })
    )
  )
  const idempotencyLayer = (flag: Option.Option<Redacted.Redacted>) =>
    idempotencyOnly.pipe(Layer.provide(database(flag)))

  /** Runs an operator command (`stats`, `failed:*`) on every transport of the table; `inspect`: its failure queues. */
  const withOperatorTransport = <A, E, R>(
    target: Target,
    inspect: ReadonlyArray<string>,
    self: Effect.Effect<A, E, R>
  ) => Effect.provide(Effect.flatMap(Deployment, ({ table }) => explained(table, self)), operatorLayer(target, inspect))

  /** Runs a command on the application's transports. */
  const withTransport = <A, E, R>(target: Target, self: Effect.Effect<A, E, R>) =>
    Effect.provide(self, transportLayer(target))

  const known = (transport: TransportShape, names: ReadonlyArray<string>) =>
    Effect.forEach(names, (name) =>
      transport.names.includes(name)
        ? Effect.void
        : fail(`The "${name}" transport does not exist (known: ${transport.names.join(", ")})`))

  /** The transport and its operator side, once the names given on the command line are known to be served. */
  const opened = (names: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const transport = yield* Transport
      yield* known(transport, names)
      return { transport, admin: yield* TransportAdmin }
    })

  return {
    database,
    tableOf,
    opened,
    transportOnly,
    idempotencyOptions,
    idempotencyOnly,
    idempotencyLayer,
    withOperatorTransport,
    withTransport,
    known
  }
}

/**
 * An operator read's failure on a table that is missing or not granted, as the `StorageNotReadyError` the hot path
 * reports (which table, and what to run): the reads map their SQL failures to a `TransportError` only.
 */
const explained = <A, E, R>(table: string, self: Effect.Effect<A, E, R>) =>
  Effect.flatMap(CliDialect, (dialect) =>
    Effect.mapError(self, (error): E | StorageNotReadyError => {
      const cause =
        typeof error === "object" && error !== null && (error as { _tag?: unknown })._tag === "TransportError"
          ? (error as { cause?: unknown }).cause
          : undefined
      return isSqlError(cause) ? dialect.notReady(table, cause) ?? error : error
    }))

const isSqlError = (value: unknown): value is SqlError =>
  typeof value === "object" && value !== null && (value as { _tag?: unknown })._tag === "SqlError"

/**
 * A DSN must be a PostgreSQL or MySQL URL, whose scheme picks the dialect: `pg` would read a bare word as a host name
 * and answer `--dsn not-a-url` with `getaddrinfo ENOTFOUND base`.
 */
const dialectOf = (url: Redacted.Redacted): Effect.Effect<Dialect, CliError> => {
  const dialect = fromUrl(Redacted.value(url))
  return dialect !== undefined ? Effect.succeed(dialect) : fail(
    "The DSN is not a valid PostgreSQL or MySQL URL: expected postgres://user:password@host:port/database or " +
      "mysql://user:password@host:port/database (from --dsn or DATABASE_URL)"
  )
}

const isCliError = (error: unknown): error is CliError =>
  typeof error === "object" && error !== null && (error as { _tag?: unknown })._tag === "OutboxCliError"

/** @internal */
export type Environment = ReturnType<typeof make>
