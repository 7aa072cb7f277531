/**
 * The flags the commands share, and the one-line failure of a command.
 *
 * @internal
 */
import { Args, HelpDoc, Options, ValidationError } from "@effect/cli"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
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

/**
 * `Options.withDefault` that `--help` shows: @effect/cli 0.77 prints "Defaults to: …" only for a fallback that is
 * an `Option`, so the value goes through one.
 *
 * @internal
 */
export const withShownDefault = <A>(fallback: A) => (self: Options.Options<A>): Options.Options<A> =>
  self.pipe(
    Options.map(Option.some),
    Options.withDefault(Option.some(fallback)),
    Options.map(Option.getOrElse(() => fallback))
  )

/** Fails the command with one line. @internal */
export const fail = (message: string) => Effect.fail(new CliError({ message }))

export const dsn = Options.redacted("dsn").pipe(
  Options.withDescription("PostgreSQL connection URL (default: $DATABASE_URL)"),
  Options.optional
)
export const table = Options.text("table").pipe(
  Options.withDescription("The outbox table, [schema.]name (default: $OUTBOX_TABLE, else the application's table)"),
  Options.optional
)
export const transportQueues = Options.text("transport-queue").pipe(
  Options.withDescription(
    "NAME=QUEUE: transport NAME uses queue_name QUEUE (repeatable; also $OUTBOX_TRANSPORT_QUEUES, comma-separated)"
  ),
  Options.repeated
)

/**
 * Where the messages are: every command's `--dsn`, `--table` and `--transport-queue`.
 *
 * @internal
 */
export const target = { dsn, table, transportQueues }

/** The parsed `target` options. @internal */
export interface Target {
  readonly dsn: Option.Option<Redacted.Redacted>
  readonly table: Option.Option<string>
  readonly transportQueues: ReadonlyArray<string>
}

export const format = Options.choice("format", ["text", "json"]).pipe(
  Options.withDescription("Output format"),
  withShownDefault<"text" | "json">("text")
)
export const verbose = Options.boolean("verbose").pipe(Options.withAlias("v"), Options.withDescription("More detail"))
export const force = Options.boolean("force").pipe(Options.withDescription("Do not ask for confirmation"))
export const all = Options.boolean("all").pipe(Options.withDescription("Every failed message (of --class-filter)"))
export const classFilter = Options.text("class-filter").pipe(
  Options.withDescription("Only messages of this type (the message tag)"),
  Options.optional
)
export const failureTransport = Options.text("transport").pipe(
  Options.withDescription("The failure transport"),
  withShownDefault(defaultFailureTransport)
)
export const ids = Args.text({ name: "id" }).pipe(
  Args.withDescription("Transport ids (failed:show lists them)"),
  Args.repeated
)

export const positive = (name: string) =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      n > 0
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} must be > 0, got ${n}`)))
    )
  )

/** A number of seconds greater than zero, as a float option named `name`. @internal */
export const positiveSeconds = (name: string) =>
  Options.float(name).pipe(
    Options.mapEffect((n) =>
      n > 0 && Number.isFinite(n)
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} must be a number of seconds > 0, got ${n}`)))
    )
  )

/** A size flag (`128M`; K, M, G: powers of 1024), in bytes; `example` shows the form in its error. @internal */
export const size = (name: string, description: string, example: string) =>
  Options.text(name).pipe(
    Options.withDescription(description),
    Options.mapEffect((text) => {
      const bytes = parseBytes(text)
      return bytes === undefined
        ? Effect.fail(
          ValidationError.invalidValue(HelpDoc.p(`--${name}: expected a size such as ${example}, got ${text}`))
        )
        : Effect.succeed(bytes)
    })
  )

export const memoryLimit = size(
  "memory-limit",
  "Stop when resident memory exceeds this (e.g. 128M; K, M, G)",
  "128M"
).pipe(Options.optional)
