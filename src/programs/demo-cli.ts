/**
 * `npm run outbox -- <command>`: the outbox command line mounted with the demo's handlers and table,
 * as an application would mount it. Needs DATABASE_URL (or --dsn).
 */
import * as Cli from "./Cli.js"
import * as Demo from "./Demo.js"

Cli.main(Cli.make({ handlers: Demo.handlers, transport: Demo.transportOptions, idempotency: Demo.idempotencyOptions }))
