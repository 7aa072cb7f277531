/**
 * A dispatch and a worker, as the smallest application writes them: run by `examples/packed/check.ts` from the
 * installed package (after `outbox setup-transports`). It dispatches three greetings in one transaction — one of
 * them to nobody, which its handler refuses for good — then runs the worker until the outbox is empty and prints
 * its summary as one JSON line. DATABASE_URL names the database.
 */
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Config, Console, Effect, Layer, Schema } from "effect"
import {
  Handlers,
  Outbox,
  PgTransport,
  ScheduleRetryStrategy,
  UnrecoverableMessageHandlingError,
  Worker
} from "effect-outbox"

class Greeted extends Schema.TaggedClass<Greeted>()("Greeted", { name: Schema.String }) {}

const handlers = Handlers.layer([
  Handlers.handler(Greeted, (greeted) =>
    greeted.name.length === 0
      ? Effect.fail(new UnrecoverableMessageHandlingError({ message: "a greeting to nobody" }))
      : Effect.logInfo(`hello, ${greeted.name}`))
])

const Live = Layer.mergeAll(Outbox.layer(), handlers, ScheduleRetryStrategy.layer()).pipe(
  Layer.provideMerge(PgTransport.layer()),
  Layer.provideMerge(PgClient.layerConfig({ url: Config.redacted("DATABASE_URL") }))
)

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.withTransaction(
    Effect.forEach(["Ada", "Grace", ""], (name) => Outbox.dispatch(new Greeted({ name })), { discard: true })
  )
  const summary = yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })
  yield* Console.log(JSON.stringify({ handled: summary.handled, failed: summary.failed }))
})

NodeRuntime.runMain(program.pipe(Effect.provide(Live)))
