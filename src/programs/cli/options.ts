/**
 * The flags the commands share, and the one-line failure of a command.
 *
 * @internal
 */
import { Args, HelpDoc, Options, ValidationError } from "@effect/cli"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { defaultFailureTransport } from "../../domain/Routing.js"
import { parseBytes } from "./format.js"

/**
 * A failure of a command, printed as one line.
 *
 * @since 0.1.0
 * @category errors
 */
export class CliError extends Schema.TaggedError<CliError>()("OutboxCliError", { message: Schema.String }) {}

/** Fails the command with one line. @internal */
export const fail = (message: string) => Effect.fail(new CliError({ message }))

export const dsn = Options.redacted("dsn").pipe(
  Options.withDescription("PostgreSQL connection URL (default: $DATABASE_URL)"),
  Options.optional
)
export const format = Options.choice("format", ["text", "json"]).pipe(Options.withDefault("text" as const))
export const verbose = Options.boolean("verbose").pipe(Options.withAlias("v"), Options.withDescription("More detail"))
export const force = Options.boolean("force").pipe(Options.withDescription("Do not ask for confirmation"))
export const all = Options.boolean("all")
export const classFilter = Options.text("class-filter").pipe(
  Options.withDescription("Only messages of this type (the message tag)"),
  Options.optional
)
export const failureTransport = Options.text("transport").pipe(
  Options.withDescription("The failure transport"),
  Options.withDefault(defaultFailureTransport)
)
export const ids = Args.text({ name: "id" }).pipe(Args.repeated)

export const positive = (name: string) =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      n > 0
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} must be > 0, got ${n}`)))
    )
  )

export const memoryLimit = Options.text("memory-limit").pipe(
  Options.withDescription("Stop when resident memory exceeds this (e.g. 128M; K, M, G)"),
  Options.mapEffect((text) => {
    const bytes = parseBytes(text)
    return bytes === undefined
      ? Effect.fail(
        ValidationError.invalidValue(HelpDoc.p(`--memory-limit: expected a size such as 128M, got ${text}`))
      )
      : Effect.succeed(bytes)
  }),
  Options.optional
)
