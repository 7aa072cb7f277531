/**
 * The package's `outbox` binary: the command tree without application handlers.
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import * as Effect from "effect/Effect"
import * as Cli from "./Cli.js"

Cli.run(Cli.make())(process.argv).pipe(Effect.provide(NodeContext.layer), NodeRuntime.runMain)
