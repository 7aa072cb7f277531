/**
 * The package's `outbox` binary: the command tree without application handlers
 * (setup, failed-message commands and stats; an application mounts `consume` with its handlers).
 */
import * as Cli from "./Cli.js"

Cli.main(Cli.make())
