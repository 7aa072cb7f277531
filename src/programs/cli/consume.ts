/**
 * The options of `consume` and the worker options they stand for.
 *
 * @internal
 */
import { type Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Worker from "../worker/Worker.js"
import { fail, memoryLimit, positive, positiveSeconds, withShownDefault } from "./options.js"

/**
 * The options of `consume`, each a worker option (see `workerOptions`): a new worker option is one entry here and
 * one line there.
 */
export const consumeOptions = {
  limit: positive("limit").pipe(Options.withDescription("Stop after N messages"), Options.optional),
  failureLimit: positive("failure-limit").pipe(
    Options.withDescription("Stop after N messages were retried or failed"),
    Options.optional
  ),
  timeLimit: positive("time-limit").pipe(Options.withDescription("Stop after N seconds"), Options.optional),
  memoryLimit,
  sleep: Options.float("sleep").pipe(
    Options.withPseudoName("SECONDS"),
    Options.withDescription("Seconds to wait when every transport is empty"),
    withShownDefault(1)
  ),
  batchSize: positive("batch-size").pipe(
    Options.withDescription("Messages claimed per round trip"),
    withShownDefault(50)
  ),
  concurrency: positive("concurrency").pipe(
    Options.withDescription("Messages handled at once (1 keeps order)"),
    withShownDefault(1)
  ),
  shutdownTimeout: Options.float("shutdown-timeout").pipe(
    Options.withPseudoName("SECONDS"),
    Options.withDescription("Seconds in-flight handlers may run on after SIGTERM/SIGINT"),
    withShownDefault(30)
  ),
  handlerTimeout: positiveSeconds("handler-timeout").pipe(
    Options.withDescription("Seconds one handler run may take before it is interrupted and its message retried"),
    withShownDefault(900)
  ),
  verbose: Options.boolean("verbose").pipe(
    Options.withAlias("v"),
    Options.withDescription("One line per message: id, type, outcome, duration")
  ),
  metricsPort: Options.integer("metrics-port").pipe(
    Options.withPseudoName("PORT"),
    Options.withDescription("Serve /metrics, /healthz and /readyz on this port (and sample the queue gauges)"),
    Options.mapEffect((n) =>
      n >= 0 && n <= 65535
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--metrics-port must be a port (0–65535), got ${n}`)))
    ),
    Options.optional
  ),
  // An option of the endpoint, not of the worker: without --metrics-port there is no /healthz for it to bound.
  stallAfter: positiveSeconds("stall-after").pipe(
    Options.withDescription(
      "Seconds the worker's loop may make no progress before /healthz reports it unhealthy (default: --handler-timeout + 60)"
    ),
    Options.optional
  )
}

/** The parsed options of `consume`. */
export type ConsumeOptions = Command.Command.ParseConfig<typeof consumeOptions>

/** The worker's options from the parsed `consume` options (without the event hook, which `-v` adds). */
export const workerOptions = (o: ConsumeOptions & { readonly transports: ReadonlyArray<string> }) =>
  Effect.gen(function*() {
    if (!(o.sleep >= 0)) return yield* fail(`--sleep must be >= 0, got ${o.sleep}`)
    if (!(o.shutdownTimeout >= 0)) return yield* fail(`--shutdown-timeout must be >= 0, got ${o.shutdownTimeout}`)
    const optional = <A, B>(value: Option.Option<A>, f: (a: A) => B): B | Record<string, never> =>
      Option.match(value, { onNone: () => ({}), onSome: f })
    return {
      transports: o.transports,
      batchSize: o.batchSize,
      concurrency: o.concurrency,
      sleep: o.sleep * 1000,
      shutdownTimeout: o.shutdownTimeout * 1000,
      handlerTimeout: o.handlerTimeout * 1000,
      ...optional(o.limit, (limit) => ({ limit })),
      ...optional(o.failureLimit, (failureLimit) => ({ failureLimit })),
      ...optional(o.timeLimit, (s) => ({ timeLimit: s * 1000 })),
      ...optional(o.memoryLimit, (memoryLimit) => ({ memoryLimit }))
    } satisfies Worker.WorkerOptions
  })
