/**
 * The failure-queue commands: `failed:show`, `failed:retry`, `failed:remove`.
 *
 * @internal
 */
import { Args, Command, Options, Prompt } from "@effect/cli"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { StoredMessage } from "../../domain/Envelope.js"
import * as Headers from "../../domain/Headers.js"
import type { TransportShape } from "../../services/Transport.js"
import { TransportAdmin } from "../../services/TransportAdmin.js"
import { applyRetry, planRetry, removeMessages } from "../operator/failedMessages.js"
import { Deployment, type Environment } from "./environment.js"
import { renderTable, truncate } from "./format.js"
import {
  all,
  checkIds,
  classFilter,
  fail,
  failureTransport,
  force,
  format,
  ids,
  positive,
  type Target,
  target,
  verbose,
  withShownDefault
} from "./options.js"
import { describeFailed, printFailed, reasonCell } from "./render.js"

/** @internal */
export const make = ({ opened, withOperatorTransport }: Environment) => {
  const failedShow = Command.make(
    "failed:show",
    {
      ...target,
      id: Args.text({ name: "id" }).pipe(
        Args.withDescription("A transport id: show that message in detail"),
        Args.optional
      ),
      max: positive("max").pipe(Options.withDescription("List at most N messages"), withShownDefault(50)),
      classFilter,
      stats: Options.boolean("stats").pipe(Options.withDescription("Count failed messages per type")),
      transport: failureTransport,
      format,
      verbose
    },
    (o) =>
      Effect.zipRight(
        checkIds(Option.toArray(o.id)),
        withOperatorTransport(
          o,
          [o.transport],
          Effect.gen(function*() {
            const { admin } = yield* opened([o.transport])
            const typeFilter = Option.getOrUndefined(o.classFilter)
            if (Option.isSome(o.id)) {
              const found = yield* admin.find(o.transport, o.id.value)
              if (Option.isNone(found)) {
                return yield* fail(`The message "${o.id.value}" was not found in the "${o.transport}" transport`)
              }
              const details = describeFailed(found.value, o.verbose)
              return yield* o.format === "json" ? Console.log(JSON.stringify(details, null, 2)) : printFailed(details)
            }
            if (o.stats) {
              const counts = new Map<string, number>()
              for (const m of yield* admin.list(o.transport, { max: Number.MAX_SAFE_INTEGER, type: typeFilter })) {
                const type = Headers.typeOf(m.headers) ?? "(undecodable)"
                counts.set(type, (counts.get(type) ?? 0) + 1)
              }
              const rows = [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
              return yield* o.format === "json"
                ? Console.log(JSON.stringify(Object.fromEntries(rows), null, 2))
                : rows.length === 0
                ? Console.log("[OK] No failed messages were found.")
                : Console.log(renderTable(["Class", "Count"], rows.map(([t, n]) => [truncate(t, 80), String(n)])))
            }
            const messages = yield* admin.list(o.transport, { max: o.max, type: typeFilter })
            const summaries = messages.map((m) => describeFailed(m, false))
            if (o.format === "json") return yield* Console.log(JSON.stringify(summaries, null, 2))
            if (summaries.length === 0) return yield* Console.log("[OK] No failed messages were found.")
            const counts = yield* admin.stats(o.transport)
            const total = counts.ready + counts.delayed + counts.inFlight
            yield* Console.log(
              total === 1
                ? "There is 1 message in the failure transport."
                : `There are ${total} messages in the failure transport.`
            )
            yield* Console.log(
              renderTable(
                ["Id", "Class", "Failed at", "Error"],
                summaries.map((d) => [d.id, truncate(d.type, 60), d.failedAt, reasonCell(d)])
              )
            )
            if (summaries.length === o.max) yield* Console.log(`Showing first ${o.max} messages.`)
            yield* Console.log(`Run "failed:show <id> -v" to see message details.`)
          })
        )
      )
  ).pipe(Command.withDescription("List failed messages, or show one in detail"))

  /** The ids to act on: the given ones, or every failed message (of a type) with --all. */
  const selection = (
    transport: TransportShape,
    name: string,
    o: { readonly ids: ReadonlyArray<string>; readonly all: boolean; readonly classFilter: Option.Option<string> }
  ) =>
    Effect.gen(function*() {
      const admin = yield* TransportAdmin
      if (o.all && o.ids.length > 0) return yield* fail("You cannot specify message ids when using --all")
      if (!o.all && o.ids.length === 0) {
        return yield* fail("Please specify at least one message id, or --all for every failed message")
      }
      if (Option.isSome(o.classFilter) && !o.all) return yield* fail("--class-filter goes with --all")
      if (o.all) {
        const messages = yield* admin.list(name, {
          max: Number.MAX_SAFE_INTEGER,
          type: Option.getOrUndefined(o.classFilter)
        })
        return messages
      }
      const found: Array<StoredMessage> = []
      const missing: Array<string> = []
      for (const id of o.ids) {
        const m = yield* admin.find(name, id)
        if (Option.isSome(m)) found.push(m.value)
        else missing.push(id)
      }
      if (missing.length > 0) {
        return yield* fail(`Not in the "${name}" transport: ${missing.map((id) => `"${id}"`).join(", ")}`)
      }
      return found
    })

  const confirm = (message: string, forced: boolean) =>
    Effect.gen(function*() {
      if (forced) return
      if (!process.stdin.isTTY) {
        return yield* fail(`${message} Refusing without --force in a non-interactive session.`)
      }
      const yes = yield* Prompt.confirm({ message, initial: false }).pipe(
        Effect.catchAll(() => Effect.succeed(false))
      )
      if (!yes) return yield* fail("Cancelled.")
    })

  /** The failed messages a `failed:retry`/`failed:remove` run acts on, handed to `act` (not called when none). */
  const onSelected = <E, R>(
    o: Target & {
      readonly ids: ReadonlyArray<string>
      readonly all: boolean
      readonly classFilter: Option.Option<string>
      readonly transport: string
    },
    act: (transport: TransportShape, messages: ReadonlyArray<StoredMessage>) => Effect.Effect<void, E, R>
  ) =>
    Effect.zipRight(
      checkIds(o.ids),
      withOperatorTransport(
        o,
        [o.transport],
        Effect.gen(function*() {
          const { transport } = yield* opened([o.transport])
          const messages = yield* selection(transport, o.transport, o)
          if (messages.length === 0) return yield* Console.log("[OK] No failed messages were found.")
          yield* act(transport, messages)
        })
      )
    )

  const failedRetry = Command.make(
    "failed:retry",
    { ...target, ids, all, classFilter, force, transport: failureTransport },
    (o) =>
      onSelected(o, (transport, messages) =>
        Effect.gen(function*() {
          const { inferred } = yield* Deployment
          const { refused, steps } = planRetry(messages, o.transport, transport.names)
          // Each refused message stays where it is, with its reason: said here, one line each.
          for (const reason of refused) yield* Console.error(`[ERROR] ${reason}`)
          if (steps.length > 0) {
            yield* confirm(`Retry ${steps.length} message(s)?`, o.force)
            const moved = yield* applyRetry(o.transport, steps, ({ message, to }) =>
              Console.log(
                `[OK] Message "${message.id}" (${message.messageId}) sent back to "${to}"` +
                  (inferred.has(to)
                    ? ` (its queue_name is taken to be "${to}", as no option names it: ` +
                      `pass --transport-queue ${to}=QUEUE if it is another).`
                    : ".")
              ))
            yield* Console.log(`${moved.length} message(s) will be retried by the workers of their transports.`)
          }
          if (refused.length > 0) {
            return yield* fail(
              `${refused.length} message(s) could not be retried and stay in the "${o.transport}" transport ` +
                `with their reason (see above)`
            )
          }
        }))
  ).pipe(Command.withDescription("Send failed messages back to their original transport, ready now"))

  const failedRemove = Command.make(
    "failed:remove",
    { ...target, ids, all, classFilter, force, transport: failureTransport },
    (o) =>
      onSelected(o, (_transport, messages) =>
        Effect.gen(function*() {
          yield* confirm(`Permanently remove ${messages.length} message(s)?`, o.force)
          const removed = yield* removeMessages(o.transport, messages)
          yield* Console.log(`[OK] ${removed} message(s) removed.`)
        }))
  ).pipe(Command.withDescription("Delete failed messages"))

  return { failedShow, failedRetry, failedRemove }
}
