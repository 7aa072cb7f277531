/**
 * Output for a terminal or a pipe: `@effect/cli` colours its help and its errors with ANSI codes, which a pipe or
 * a log file would keep as noise. When a stream is not a terminal, what is written to it goes out plain.
 *
 * @internal
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"

/** ANSI escape sequences (colours, bold, cursor moves). */
const ansi = /\u001b\[[0-9;?]*[A-Za-z]/g

/** `text` without ANSI escape sequences. @internal */
export const plain = (text: string): string => text.replace(ansi, "")

/** Each argument as text, plain when `strip`. */
const strip = (on: boolean, args: ReadonlyArray<unknown>): ReadonlyArray<unknown> =>
  on ? args.map((arg) => (typeof arg === "string" ? plain(arg) : arg)) : args

/**
 * Runs `self` with a console whose `log` (stdout) and `error` (stderr) write plain text to a stream that is not a
 * terminal.
 *
 * @internal
 */
export const plainWhenPiped = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.console, (base) => {
    const out = process.stdout.isTTY !== true
    const err = process.stderr.isTTY !== true
    if (!out && !err) return self
    const console: Console.Console = {
      ...base,
      log: (...args) => base.log(...strip(out, args)),
      info: (...args) => base.info(...strip(out, args)),
      error: (...args) => base.error(...strip(err, args)),
      warn: (...args) => base.warn(...strip(err, args)),
      unsafe: {
        ...base.unsafe,
        log: (...args) => base.unsafe.log(...strip(out, args)),
        info: (...args) => base.unsafe.info(...strip(out, args)),
        error: (...args) => base.unsafe.error(...strip(err, args)),
        warn: (...args) => base.unsafe.warn(...strip(err, args))
      }
    }
    return Effect.withConsole(self, console)
  })
