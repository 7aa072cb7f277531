import { HelpDoc, ValidationError } from "@effect/cli"
import { NodeContext } from "@effect/platform-node"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import { spawn } from "node:child_process"
import * as Cli from "../../src/programs/Cli.js"
import { track } from "./leftovers.js"

/** What a command printed and how it ended. */
export interface CliResult {
  readonly stdout: string
  readonly stderr: string
  readonly exit: Exit.Exit<unknown, unknown>
}

const capture = (base: Console.Console, out: Array<string>, err: Array<string>): Console.Console => {
  const text = (args: ReadonlyArray<unknown>) => args.map((a) => (typeof a === "string" ? a : String(a))).join(" ")
  const log = (...args: ReadonlyArray<unknown>) => Effect.sync(() => void out.push(text(args)))
  const error = (...args: ReadonlyArray<unknown>) => Effect.sync(() => void err.push(text(args)))
  return {
    ...base,
    log,
    info: log,
    error,
    warn: error,
    unsafe: {
      ...base.unsafe,
      log: (...args) => void out.push(text(args)),
      info: (...args) => void out.push(text(args)),
      error: (...args) => void err.push(text(args)),
      warn: (...args) => void err.push(text(args))
    }
  }
}

/** Runs the real command tree in process with captured output. */
export const runCli = (command: ReturnType<typeof Cli.make>, args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const out: Array<string> = []
    const err: Array<string> = []
    const base = yield* Effect.console
    const exit = yield* Cli.run(command)(["node", "outbox", ...args]).pipe(
      Effect.provide(NodeContext.layer),
      Effect.withConsole(capture(base, out, err)),
      Logger.withMinimumLogLevel(LogLevel.None),
      Effect.exit
    )
    return { stdout: out.join("\n"), stderr: err.join("\n"), exit } satisfies CliResult
  })

/**
 * The text of the `ValidationError` a command failed with (@effect/cli's rejection of an option or argument),
 * or `undefined` when it did not fail with one — a command that failed for any other reason (the database
 * down, a bug) is not a validation failure.
 */
export const validationError = (result: CliResult): string | undefined => {
  if (Exit.isSuccess(result.exit)) return undefined
  const failure = Cause.failureOption(result.exit.cause)
  if (Option.isNone(failure) || !ValidationError.isValidationError(failure.value)) return undefined
  return HelpDoc.toAnsiText(failure.value.error).replace(/\u001b\[[0-9;]*m/g, "")
}

/** A running process of a fixture, with its output lines. */
export interface Proc {
  readonly pid: number
  readonly lines: Array<string>
  readonly stderr: Array<string>
  /** Resolves with the first stdout line matching. */
  readonly waitFor: (pattern: RegExp) => Promise<string>
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
  readonly kill: (signal: NodeJS.Signals) => void
}

/**
 * Spawns `node --import tsx <script> ...args` with extra environment. The child is tracked (support/leftovers.ts):
 * it is killed when the test process ends, however it ends.
 */
export const spawnScript = (script: string, args: ReadonlyArray<string>, env: Record<string, string>): Proc => {
  const child = spawn(process.execPath, ["--import", "tsx", script, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const tracked = track({ label: `${script} ${child.pid}`, processes: [{ pid: child.pid! }], dirs: [] })
  child.once("exit", tracked.release)
  const lines: Array<string> = []
  const stderr: Array<string> = []
  const waiters: Array<{ pattern: RegExp; resolve: (line: string) => void }> = []
  let buffer = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    buffer += chunk
    let nl: number
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl)
      buffer = buffer.slice(nl + 1)
      lines.push(line)
      for (const w of waiters.splice(0)) {
        if (w.pattern.test(line)) w.resolve(line)
        else waiters.push(w)
      }
    }
  })
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => stderr.push(chunk))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal }))
  )
  return {
    pid: child.pid!,
    lines,
    stderr,
    waitFor: (pattern) =>
      new Promise((resolve, reject) => {
        const found = lines.find((l) => pattern.test(l))
        if (found !== undefined) return resolve(found)
        waiters.push({ pattern, resolve })
        void exited.then(({ code, signal }) =>
          reject(new Error(`process exited (${code ?? signal}) before ${pattern}: ${stderr.join("")}`))
        )
      }),
    exited,
    kill: (signal) => void child.kill(signal)
  }
}
