/**
 * The command line as given, checked before `@effect/cli` parses it. `@effect/cli` takes a mistyped option of a
 * command with repeated arguments for an argument (`stats --fromat json` counted a "--fromat" transport), refuses
 * options before the command (`outbox --dsn … stats`) as an "Invalid subcommand", and says the same of `consume`
 * on a binary without handlers. Here an unknown option is refused by name with the nearest valid one, options
 * before the command are moved after it, and an unknown command gets the nearest one, or, for `consume`, where
 * consuming is.
 *
 * @internal
 */
import { type Command, CommandDescriptor, type Usage } from "@effect/cli"
import * as Either from "effect/Either"
import * as HashMap from "effect/HashMap"
import * as Option from "effect/Option"
import { ordered } from "./help.js"

/** A command's options: each name (and alias) and whether it takes a value. @internal */
export interface CommandSpec {
  readonly name: string
  readonly options: ReadonlyMap<string, { readonly takesValue: boolean }>
  /** Whether it has commands of its own (then `@effect/cli` checks what follows it). */
  readonly nested: boolean
  readonly descriptor: CommandDescriptor.Command<unknown>
}

/** The commands of a tree, by name. @internal */
export type Tree = ReadonlyMap<string, CommandSpec>

/** The options every command takes (`@effect/cli`'s built-in ones). @internal */
export const builtIns: ReadonlyMap<string, { readonly takesValue: boolean }> = new Map([
  ["--help", { takesValue: false }],
  ["-h", { takesValue: false }],
  ["--version", { takesValue: false }],
  ["--wizard", { takesValue: false }],
  ["--completions", { takesValue: true }],
  ["--log-level", { takesValue: true }]
])

/** The named parts of a usage (options and arguments), in order. @internal */
export const namedParts = (usage: Usage.Usage): ReadonlyArray<Usage.Named> => {
  switch (usage._tag) {
    case "Named":
      return [usage]
    case "Optional":
    case "Repeated":
      return namedParts(usage.usage)
    case "Alternation":
    case "Concat":
      return [...namedParts(usage.left), ...namedParts(usage.right)]
    default:
      return []
  }
}

/** The commands of `command`'s tree. @internal */
export const treeOf = <Name extends string, R, E, A>(command: Command.Command<Name, R, E, A>): Tree => {
  const tree = new Map<string, CommandSpec>()
  for (const [name, descriptor] of ordered(command)) {
    const options = new Map<string, { readonly takesValue: boolean }>()
    for (const part of namedParts(CommandDescriptor.getUsage(descriptor))) {
      for (const option of part.names) {
        if (option.startsWith("-")) options.set(option, { takesValue: Option.isSome(part.acceptedValues) })
      }
    }
    const nested = HashMap.some(CommandDescriptor.getSubcommands(descriptor), (_, child: string) => child !== name)
    tree.set(name, { name, options, nested, descriptor })
  }
  return tree
}

/** How far apart two words are (Levenshtein: insertions, deletions, substitutions and transpositions). */
export const distance = (a: string, b: string): number => {
  const d: Array<Array<number>> = Array.from({ length: a.length + 1 }, (_, i) => [i])
  for (let j = 1; j <= b.length; j++) d[0]![j] = j
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1)
      }
    }
  }
  return d[a.length]![b.length]!
}

/** The candidate nearest to `word`, when it is near enough to be a typo of it. @internal */
export const nearest = (word: string, candidates: Iterable<string>): string | undefined => {
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of candidates) {
    const d = distance(word, candidate)
    if (d < bestDistance) [best, bestDistance] = [candidate, d]
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(word.length / 3)) ? best : undefined
}

const isOption = (token: string) => token.startsWith("-") && token.length > 1 && !/^-\d/.test(token)
const optionName = (token: string) => token.startsWith("--") ? token.split("=", 1)[0]! : token

/** Where the example of an application's worker is, for `consume` on a binary without handlers. */
const consumeHint = "`consume` runs the application's handlers, so the bare `outbox` binary has none: mount the " +
  "command line in the application with Cli.make({ handlers }) and run `consume` from there (examples/worker-only/" +
  `main.ts; the README's "Command line" section)`

/** The refusal of an option that `spec` (or, without one, no command) takes, with the nearest one it takes. */
const unknownOption = (option: string, spec: CommandSpec | undefined): string => {
  if (spec === undefined) return `Unknown option ${option}: \`outbox --help\` lists the commands, and each its options`
  const near = nearest(option, [...spec.options.keys()].filter((o) => o.startsWith("--")))
  return `Unknown option ${option} for ${spec.name}${near === undefined ? "" : ` (did you mean ${near}?)`}: ` +
    `\`outbox ${spec.name} --help\` lists its options`
}

/**
 * The arguments to hand to `@effect/cli` (after the executable and the script), or the one line that refuses them.
 *
 * @internal
 */
export const prepare = (tree: Tree, args: ReadonlyArray<string>): Either.Either<ReadonlyArray<string>, string> => {
  const end = args.indexOf("--")
  const head = end < 0 ? args : args.slice(0, end)
  const rest = end < 0 ? [] : args.slice(end)
  // The options before the command, with their values, and where the command is.
  const allOptions = new Map([...builtIns, ...[...tree.values()].flatMap((spec) => [...spec.options])])
  let at = 0
  while (at < head.length && isOption(head[at]!)) {
    const option = allOptions.get(optionName(head[at]!))
    if (option === undefined) {
      // Refused for the command it comes before, when one follows.
      const next = head.slice(at + 1).find((token) => tree.has(token))
      return Either.left(unknownOption(optionName(head[at]!), next === undefined ? undefined : tree.get(next)))
    }
    at += option.takesValue && !head[at]!.includes("=") ? 2 : 1
  }
  if (at >= head.length) {
    const stray = head.find((token) => isOption(token) && !builtIns.has(optionName(token)))
    return stray === undefined ? Either.right(args) : Either.left(
      `${optionName(stray)} goes with a command, and none is given: \`outbox <command> ${
        optionName(stray)
      } …\` (\`outbox --help\` lists the commands)`
    )
  }
  const name = head[at]!
  const spec = tree.get(name)
  if (spec === undefined) {
    if (name === "consume") return Either.left(consumeHint)
    const near = nearest(name, tree.keys())
    return Either.left(
      `Unknown command "${name}"${near === undefined ? "" : ` (did you mean ${near}?)`}: the commands are ` +
        `${[...tree.keys()].join(", ")} (outbox --help describes them)`
    )
  }
  // The built-in options stay where they are; the command's own follow its name.
  const global: Array<string> = []
  const moved: Array<string> = []
  for (let i = 0; i < at; i++) {
    const token = head[i]!
    const option = allOptions.get(optionName(token))
    const taken = option?.takesValue === true && !token.includes("=") && i + 1 < at ? [token, head[++i]!] : [token]
    ;(builtIns.has(optionName(token)) ? global : moved).push(...taken)
  }
  const own = [...moved, ...head.slice(at + 1)]
  if (!spec.nested) {
    const known = new Map([...builtIns, ...spec.options])
    for (let i = 0; i < own.length; i++) {
      const token = own[i]!
      if (!isOption(token)) continue
      const option = known.get(optionName(token))
      if (option === undefined) return Either.left(unknownOption(optionName(token), spec))
      if (option.takesValue && !token.includes("=")) i++
    }
  }
  return Either.right([...global, name, ...own, ...rest])
}
