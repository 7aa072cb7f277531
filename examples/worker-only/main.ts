/**
 * A worker-only process for a supervisor (systemd, Kubernetes, a process manager): the `outbox` command line with
 * the application's handlers mounted, so `consume` runs them.
 *
 * `npx tsx examples/worker-only/main.ts setup-transports` once, then `… consume outbox` under the supervisor
 * (`--limit`, `--time-limit`, `--memory-limit` make it exit 0 to be restarted fresh); SIGTERM lets the in-flight
 * messages finish and exits 0. `… failed:show`, `… stats` and the other operator commands work too.
 * DATABASE_URL names the database.
 */
// #region worker-only
import { Layer } from "effect"
import * as Cli from "effect-outbox/Cli"
import { handlers, Invoices } from "../http-api/app.js"

Cli.main(Cli.make({
  handlers: handlers.pipe(Layer.provide(Invoices.layer)), // the services of the handlers; SqlClient is the CLI's
  retry: { default: { maxRetries: 5 } }
}))
// #endregion
