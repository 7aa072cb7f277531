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
  Options.withPseudoName("URL"),
  Options.withDescription(
    "The database: postgres://user:password@host:port/database, or mysql:// for MySQL and MariaDB " +
      "(default: $DATABASE_URL)"
  ),
  Options.optional
)
export const table = Options.text("table").pipe(
  Options.withPseudoName("TABLE"),
  Options.withDescription("The outbox table, [schema.]name (default: $OUTBOX_TABLE, else the application's table)"),
  Options.optional
)
export const transportQueues = Options.text("transport-queue").pipe(
  Options.withPseudoName("NAME=QUEUE"),
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
  Options.withPseudoName("TYPE"),
  Options.withDescription("Only messages of this type (the message tag)"),
  Options.optional
)
export const failureTransport = Options.text("transport").pipe(
  Options.withPseudoName("NAME"),
  Options.withDescription("The failure transport whose messages to act on"),
  withShownDefault(defaultFailureTransport)
)
export const ids = Args.text({ name: "id" }).pipe(
  Args.withDescription("Transport ids (failed:show lists them)"),
  Args.repeated
)

/**
 * Fails unless every id is a message id: the transports' ids are whole numbers (the Id column of `failed:show`).
 * Checked before the database is asked: "not found" would not say what an id looks like.
 *
 * @internal
 */
export const checkIds = (values: ReadonlyArray<string>) => {
  const wrong = values.filter((id) => !/^[1-9][0-9]{0,18}$/.test(id))
  return wrong.length === 0 ? Effect.void : fail(
    `${wrong.length === 1 ? "Not a message id" : "Not message ids"}: ${
      wrong.map((id) => JSON.stringify(id)).join(", ")
    }` +
      ` (an id is a positive whole number, from the Id column of failed:show: e.g. failed:show 42)`
  )
}

export const positive = (name: string) =>
  Options.integer(name).pipe(
    Options.withPseudoName("N"),
    Options.mapEffect((n) =>
      n > 0
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} must be > 0, got ${n}`)))
    )
  )

/** A number of seconds greater than zero, as a float option named `name`. @internal */
export const positiveSeconds = (name: string) =>
  Options.float(name).pipe(
    Options.withPseudoName("SECONDS"),
    Options.mapEffect((n) =>
      n > 0 && Number.isFinite(n)
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} must be a number of seconds > 0, got ${n}`)))
    )
  )

/** A size flag (`128M`; K, M, G: powers of 1024), in bytes; `example` shows the form in its error. @internal */
export const size = (name: string, description: string, example: string) =>
  Options.text(name).pipe(
    Options.withPseudoName("SIZE"),
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
