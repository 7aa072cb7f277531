/**
 * The `dashboard` command: the web dashboard over every transport of the table, until interrupted.
 *
 * @internal
 */
import { Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Dashboard from "../dashboard/Dashboard.js"
import type { Environment } from "./environment.js"
import { CliError, target, withShownDefault } from "./options.js"

/** @internal */
export const make = ({ withOperatorTransport }: Environment) =>
  Command.make(
    "dashboard",
    {
      ...target,
      port: Options.integer("port").pipe(
        Options.withPseudoName("PORT"),
        Options.withDescription("The port to serve on (0: any free one)"),
        Options.mapEffect((n) =>
          n >= 0 && n <= 65535
            ? Effect.succeed(n)
            : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--port must be a port (0–65535), got ${n}`)))
        ),
        withShownDefault(Dashboard.defaultPort)
      ),
      host: Options.text("host").pipe(
        Options.withPseudoName("HOST"),
        Options.withDescription("The interface to listen on (0.0.0.0 or :: to serve beyond this machine)"),
        withShownDefault("127.0.0.1")
      )
    },
    (o) =>
      withOperatorTransport(
        o,
        [],
        Effect.gen(function*() {
          // The token comes from OUTBOX_DASHBOARD_TOKEN only: a flag would show in `ps` and the shell's history.
          const served = yield* Dashboard.serve({ port: o.port, host: o.host }).pipe(
            Effect.mapError((error) => new CliError({ message: error.message }))
          )
          const { host, port } = served.address
          yield* Console.log(`[OK] Serving the dashboard on http://${host.includes(":") ? `[${host}]` : host}:${port}/`)
          yield* Console.log(
            served.readOnly
              ? "// Read-only: no operator token is configured; set OUTBOX_DASHBOARD_TOKEN to enable retry and remove."
              : "// Retry and remove are enabled: each asks for the operator token (OUTBOX_DASHBOARD_TOKEN)."
          )
          yield* Console.log("// Stop it with CONTROL-C.")
          return yield* Effect.never
        }).pipe(Effect.scoped)
      )
  ).pipe(Command.withDescription("Serve the web dashboard: counts, failed messages, retry and remove"))
