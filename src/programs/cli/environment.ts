/**
 * The layers the commands run on, from the flags, the environment (`DATABASE_URL`, `OUTBOX_TABLE`,
 * `OUTBOX_IDEMPOTENCY_TABLE`, `AMQP_URL`) and the application's options.
 *
 * @internal
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import { describeError } from "../../internal/describeError.js"
import * as AmqpTransport from "../../layers/amqp/AmqpTransport.js"
import * as PgIdempotencyStore from "../../layers/PgIdempotencyStore.js"
import * as PgTransport from "../../layers/PgTransport.js"
import * as TransportRouter from "../../layers/TransportRouter.js"
import { Transport, type TransportShape } from "../../services/Transport.js"
import { TransportAdmin } from "../../services/TransportAdmin.js"
import type { CliOptions } from "../Cli.js"
import { CliError, fail } from "./options.js"

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
        return PgClient.layer({ url, connectTimeout: "5 seconds" })
      })
    ).pipe(
      Layer.mapError((error) =>
        error._tag === "OutboxCliError"
          ? error
          : new CliError({ message: `Cannot connect to PostgreSQL: ${describeError(error)}` })
      )
    )

  const transportLayer = (flag: Option.Option<Redacted.Redacted>) =>
    transportOnly.pipe(Layer.provideMerge(database(flag)))

  const transportOnly = Layer.unwrapEffect(
    Effect.gen(function*() {
      // The table can be overridden by `OUTBOX_TABLE`; the rest comes from the options as given.
      const pg = {
        ...Object.fromEntries(
          Object.entries(options.transport ?? {}).map(([key, value]) => [key, Config.succeed(value)])
        ),
        table: Config.string("OUTBOX_TABLE").pipe(
          Config.withDefault(options.transport?.table ?? PgTransport.defaultTable)
        )
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
  const idempotencyLayer = (flag: Option.Option<Redacted.Redacted>) =>
    idempotencyOnly.pipe(Layer.provide(database(flag)))

  const withTransport = <A, E, R>(flag: Option.Option<Redacted.Redacted>, self: Effect.Effect<A, E, R>) =>
    Effect.provide(self, transportLayer(flag))

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
    opened,
    transportLayer,
    transportOnly,
    idempotencyOptions,
    idempotencyOnly,
    idempotencyLayer,
    withTransport,
    known
  }
}

/** @internal */
export type Environment = ReturnType<typeof make>
