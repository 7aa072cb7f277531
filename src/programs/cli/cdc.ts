/**
 * `cdc:connector`: the Debezium connector configuration that carries the application's CDC transport
 * (`Cli.make({ cdc })`) — Kafka Connect's REST JSON, or a standalone worker's properties.
 *
 * @internal
 */
import { Command, Options } from "@effect/cli"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type * as PgCdcTransport from "../../layers/PgCdcTransport.js"
import { CliError, dsn, fail } from "./options.js"

/** The command, for the CDC options of `Cli.make({ cdc })`. @internal */
export const make = (cdc: PgCdcTransport.Options) =>
  Command.make(
    "cdc:connector",
    {
      dsn,
      name: Options.text("name").pipe(
        Options.withDescription("The connector's name (default: effect-outbox-cdc)"),
        Options.optional
      ),
      user: Options.text("user").pipe(
        Options.withDescription("The role the connector logs in as, which needs REPLICATION (default: the URL's)"),
        Options.optional
      ),
      properties: Options.boolean("properties").pipe(
        Options.withDescription("Print a standalone worker's connector properties instead of the REST JSON")
      ),
      withPassword: Options.boolean("with-password").pipe(
        Options.withDescription(
          "Put the URL's password in the configuration (default: a ${file:…} reference for Connect's file provider)"
        )
      )
    },
    (o) =>
      Effect.gen(function*() {
        const url = Option.isSome(o.dsn) ? o.dsn.value : yield* Config.redacted("DATABASE_URL").pipe(
          Effect.mapError(() => new CliError({ message: "No database: pass --dsn or set DATABASE_URL" }))
        )
        const parsed = yield* Effect.try({
          try: () => new URL(Redacted.value(url)),
          catch: () => new CliError({ message: "--dsn: not a URL (postgres://user:password@host:port/database)" })
        })
        if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
          return yield* fail("cdc:connector: the CDC transport runs on PostgreSQL (postgres://…)")
        }
        const PgCdc = yield* Effect.promise(() => import("../../layers/PgCdcTransport.js"))
        const user = Option.getOrElse(o.user, () => decodeURIComponent(parsed.username))
        const connector = yield* PgCdc.connectorConfig(cdc, {
          ...(Option.isSome(o.name) ? { name: o.name.value } : {}),
          database: {
            host: parsed.hostname,
            port: parsed.port === "" ? 5432 : Number(parsed.port),
            user,
            dbname: decodeURIComponent(parsed.pathname.slice(1)) || user,
            ...(o.withPassword ? { password: Redacted.make(decodeURIComponent(parsed.password)) } : {})
          }
        })
        yield* Console.log(
          o.properties ? PgCdc.toProperties(connector).trimEnd() : JSON.stringify(connector, null, 2)
        )
      })
  ).pipe(
    Command.withDescription(
      "Print the Debezium connector configuration for the CDC transport: the REST JSON (POST it to Kafka Connect's " +
        "/connectors), or --properties for a standalone worker"
    )
  )
