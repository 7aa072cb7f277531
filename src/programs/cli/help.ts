/**
 * `--help`, rendered here from the commands' own descriptions. `@effect/cli`'s rendering puts every command's whole
 * usage on one line of the command list (200 columns and more), and each option's value type above its description
 * ("A user-defined piece of text."); this one lists the commands by name, wraps each usage at `width` columns, and
 * gives an option its description only.
 *
 * @internal
 */
import { CliConfig, Command, CommandDescriptor, HelpDoc, type Span, type Usage } from "@effect/cli"
import * as HashMap from "effect/HashMap"
import * as Option from "effect/Option"
import { plain } from "./terminal.js"

/** The width the help is wrapped at. @internal */
export const width = 100

/** Words wrapped at `width`, each line after the first indented by `indent` spaces. @internal */
export const wrap = (text: string, indent: number, first = ""): string => {
  const lines: Array<string> = []
  let line = first
  let fresh = true
  for (const word of text.split(/ +/).filter((w) => w.length > 0)) {
    if (!fresh && line.length + 1 + word.length > width) {
      lines.push(line)
      line = " ".repeat(indent) + word
    } else {
      line = fresh ? line + word : `${line} ${word}`
    }
    fresh = false
  }
  lines.push(line)
  return lines.join("\n")
}

const spanText = (span: Span.Span): string => plain(HelpDoc.toAnsiText(HelpDoc.p(span))).trim()

/** A usage part as the help shows it: `[--dsn URL]`, `--transport-queue NAME=QUEUE...`, `<transport>...`. */
const usageText = (usage: Usage.Usage): string => {
  switch (usage._tag) {
    case "Named": {
      const names = usage.names.join("|")
      return Option.match(usage.acceptedValues, {
        onNone: () => names,
        onSome: (value) => `${names} ${value.replace(/ \| /g, "|")}`
      })
    }
    case "Optional":
      return `[${usageText(usage.usage)}]`
    case "Repeated":
      return `${usageText(usage.usage)}...`
    case "Alternation":
      return `${usageText(usage.left)} | ${usageText(usage.right)}`
    case "Concat":
      return [usageText(usage.left), usageText(usage.right)].filter((s) => s.length > 0).join(" ")
    case "Mixed":
      return "<command>"
    case "Empty":
      return ""
  }
}

/** The parts of a command's usage, one per option or argument (a part is never broken over two lines). */
const usageParts = (usage: Usage.Usage): ReadonlyArray<string> =>
  usage._tag === "Concat" ? [...usageParts(usage.left), ...usageParts(usage.right)] : [usageText(usage)]

/** The blocks of a help document, in order. */
const blocks = (doc: HelpDoc.HelpDoc): ReadonlyArray<HelpDoc.HelpDoc> =>
  doc._tag === "Sequence" ? [...blocks(doc.left), ...blocks(doc.right)] : doc._tag === "Empty" ? [] : [doc]

/**
 * What `@effect/cli` says of an option's value type, which the usage already shows (`--dsn URL`, `--max integer`,
 * `--format text|json`), and of its being optional, which the brackets show.
 */
const typeLine =
  /^(A user-defined piece of text( that is confidential)?|A true or false value|An integer|A floating point number|A (file|directory|file or directory)( that must( not)? exist)?|This setting is optional|This (option|argument) may be repeated zero or more times|This argument must be repeated at least \d+ times?)\.$|^One of the following: |^A date /

/** An option's or an argument's description: its paragraphs but the type's, the default said as such. */
const describe = (doc: HelpDoc.HelpDoc): string =>
  blocks(doc).flatMap((block) => (block._tag === "Paragraph" ? [spanText(block.value)] : []))
    .filter((text) => !typeLine.test(text))
    .map((text) => text.replace(/^This setting is optional\. Defaults to: (.*)$/, "Default: $1"))
    .map((text) => (/[.!?]$/.test(text) ? text : `${text}.`))
    .join(" ")

/** The sections of a command's help (`DESCRIPTION`, `ARGUMENTS`, `OPTIONS`): paragraphs and definitions. */
const sections = (doc: HelpDoc.HelpDoc) => {
  const found = new Map<string, Array<readonly [string, string]>>()
  let current = ""
  for (const block of blocks(doc)) {
    if (block._tag === "Header") current = spanText(block.value)
    else if (block._tag === "Paragraph") {
      found.set(current, [...(found.get(current) ?? []), ["", spanText(block.value)]])
    } else if (block._tag === "DescriptionList") {
      for (const [term, description] of block.definitions) {
        found.set(current, [...(found.get(current) ?? []), [spanText(term), describe(description)]])
      }
    }
  }
  return found
}

const helpConfig = { ...CliConfig.defaultConfig, showBuiltIns: false }

/** A command's description, `""` when it has none. */
const descriptionOf = (descriptor: CommandDescriptor.Command<unknown>): string =>
  (sections(CommandDescriptor.getHelp(descriptor, helpConfig)).get("DESCRIPTION") ?? []).map(([, d]) => d).join(" ")

/** A definition list: each term on its line, its description below, indented. */
const definitions = (entries: ReadonlyArray<readonly [string, string]>): ReadonlyArray<string> =>
  entries.flatMap(([term, description]) => [
    `  ${term}`,
    ...(description.length > 0 ? [wrap(description, 6, "      ")] : [])
  ])

/** What every command takes besides its own options. */
const globalOptions: ReadonlyArray<readonly [string, string]> = [
  ["--help, -h", "Show this help; `outbox <command> --help`: a command's options"],
  ["--version", "Show the version"],
  [
    "--log-level all|trace|debug|info|warning|error|fatal|none",
    "The least level of the log lines shown (default: info)"
  ],
  ["--completions sh|bash|fish|zsh", "Print a script that completes the commands and options in that shell"],
  ["--wizard", "Build a command step by step, with prompts"]
]

/**
 * The commands of a tree in the order they were given to it (`Command.getSubcommands` is a hash map): the order of
 * `@effect/cli`'s own list of them.
 *
 * @internal
 */
export const ordered = <Name extends string, R, E, A>(
  command: Command.Command<Name, R, E, A>
): ReadonlyArray<readonly [string, CommandDescriptor.Command<unknown>]> => {
  const listed = plain(HelpDoc.toAnsiText(Command.getHelp(command, helpConfig)))
  const at = (name: string) => {
    const i = listed.indexOf(`- ${name} `)
    return i < 0 ? Infinity : i
  }
  return HashMap.toEntries(Command.getSubcommands(command)).sort(([a], [b]) => at(a) - at(b) || a.localeCompare(b))
}

/** The help of the whole tree: the commands by name and description, and the options every command takes. @internal */
export const rootHelp = <Name extends string, R, E, A>(
  command: Command.Command<Name, R, E, A>,
  name: string,
  version: string
): string => {
  const commands = ordered(command)
  const nameWidth = Math.max(...commands.map(([n]) => n.length))
  const description = (sections(Command.getHelp(command, helpConfig)).get("DESCRIPTION") ?? []).map(([, d]) => d)
  return [
    wrap(`${name} ${version}${description.length > 0 ? `: ${description.join(" ")}` : ""}`, 0),
    "",
    "USAGE",
    `  ${name} <command> [options] [arguments]`,
    `  ${name} <command> --help`,
    "",
    "COMMANDS",
    ...commands.map(([n, descriptor]) => wrap(descriptionOf(descriptor), nameWidth + 4, `  ${n.padEnd(nameWidth)}  `)),
    "",
    "OPTIONS OF EVERY COMMAND",
    ...definitions(globalOptions),
    "",
    wrap(
      `A command's options follow its name (\`${name} stats --dsn URL\`); given before it, they are moved after it.`,
      0
    )
  ].join("\n")
}

/** The help of one command: its description, its usage wrapped, its arguments and options described. @internal */
export const commandHelp = (name: string, command: string, descriptor: CommandDescriptor.Command<unknown>): string => {
  const found = sections(CommandDescriptor.getHelp(descriptor, helpConfig))
  const [, ...parts] = usageParts(CommandDescriptor.getUsage(descriptor))
  const prefix = `  ${name} ${command} `
  const description = (found.get("DESCRIPTION") ?? []).map(([, d]) => d).join(" ")
  const args = found.get("ARGUMENTS") ?? []
  const options = found.get("OPTIONS") ?? []
  return [
    wrap(`${name} ${command}${description.length > 0 ? `: ${description}` : ""}`, 0),
    "",
    "USAGE",
    wrap(parts.map((part) => part.replace(/ /g, "\u00a0")).join(" "), prefix.length, prefix).replace(/\u00a0/g, " "),
    ...(args.length > 0 ? ["", "ARGUMENTS", ...definitions(args)] : []),
    ...(options.length > 0 ? ["", "OPTIONS", ...definitions(options)] : []),
    "",
    wrap(`Every command also takes --help, --log-level, --completions and --wizard (\`${name} --help\`).`, 0)
  ].join("\n")
}
