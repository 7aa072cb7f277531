/**
 * The command line's logger: the pretty logger's words, one line per entry — a reason that is a Schema tree or a
 * stack would otherwise spread one failure over many lines. With `-v`, each message already has its own line (the
 * worker's events), so the worker's own log of each retry and move to the failure queue is left out: one line per
 * failure either way.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as DefaultServices from "effect/DefaultServices"
import * as FiberId from "effect/FiberId"
import * as FiberRefs from "effect/FiberRefs"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"
import { describeError } from "../../internal/describeError.js"
import { oneLine } from "./format.js"

/**
 * The worker's log of one outcome (`batch.ts`): "outbox worker: retry #2 of OrderPaid <id> in 3s: …" and
 * "outbox worker: OrderPaid <id> moved to the failure queue: …". With `-v` the event line says the same.
 */
const outcomeLine = /^outbox worker: (?:retry #\d+ of \S+ \S+ in |\S+ \S+ moved to the failure queue: )/

/** A part of a log message as one line: text as is, anything else as `describeError` words it. */
const partText = (part: unknown): string => oneLine(typeof part === "string" ? part : describeError(part))

/**
 * The logger: every entry on one line — `[time] LEVEL (#fiber): message key=value` — on stdout, where Effect's
 * default logger writes; with `omitOutcomes`, the worker's outcome lines are dropped.
 *
 * @internal
 */
export const make = (options: { readonly omitOutcomes: boolean }): Logger.Logger<unknown, void> =>
  Logger.make((entry) => {
    const parts = (Array.isArray(entry.message) ? entry.message : [entry.message]).map(partText)
    if (options.omitOutcomes && parts.length > 0 && outcomeLine.test(parts[0]!)) return
    // Cause.pretty prints a stack over many lines: its words stand for it here.
    if (!Cause.isEmpty(entry.cause)) parts.push(partText(Cause.squash(entry.cause)))
    let line = `[${entry.date.toISOString()}] ${entry.logLevel.label} (${FiberId.threadName(entry.fiberId)}): ${
      parts.join(" ")
    }`
    for (const [key, value] of HashMap.toEntries(entry.annotations)) line += ` ${key}=${partText(value)}`
    // Where Effect's default logger writes: the fiber's Console (stdout unless replaced).
    const services = FiberRefs.getOrDefault(entry.context, DefaultServices.currentServices)
    Context.get(services, Console.Console).unsafe.log(line)
  })
