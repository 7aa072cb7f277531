/**
 * effect-outbox, driven through its public API: `PgClient.layer` → `PgTransport.layer` →
 * `Outbox.layer` + `Handlers.layer` + `ScheduleRetryStrategy.layerDefault`, consumed by `Worker.run`.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { spawn } from "node:child_process"
import * as path from "node:path"
import pg from "pg"
import * as Message from "../src/domain/Message.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { withClient } from "./cluster.js"
import {
  BenchNoop,
  type BurnDownContender,
  businessRow,
  businessUpdateSql,
  clock,
  type DispatchContender,
  type DispatchOptions,
  keyOf,
  keyOfRow,
  type OrderedContender,
  queue,
  root,
  runProducers,
  table,
  tsNodeArgs,
  withDeadline
} from "./common.js"

const quiet = <A, E, R>(self: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(self, LogLevel.Error)

/** The whole stack over one database; `onHandled` runs in the no-op handler. */
export const stack = (url: string, options: { readonly maxConnections: number; readonly onHandled?: () => void }) => {
  const onHandled = options.onHandled ?? (() => {})
  return Layer.mergeAll(
    Outbox.layer(),
    Handlers.layer([Handlers.handler(BenchNoop, () => Effect.sync(onHandled))]),
    ScheduleRetryStrategy.layerDefault
  ).pipe(
    Layer.provideMerge(PgTransport.layer({ table })),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: options.maxConnections }))
  )
}

/**
 * Creates the table with the transport's own migrations (`transport.setup`). UNKEYED_INDEX=off drops the partial
 * index of unkeyed rows afterwards (to measure what maintaining it costs a dispatch; claims need it).
 */
export const setup = (url: string): Promise<void> =>
  Effect.runPromise(
    Effect.gen(function*() {
      const transport = yield* PgTransport.make({ table })
      yield* transport.setup
      if (process.env["UNKEYED_INDEX"] === "off") {
        yield* (yield* SqlClient.SqlClient).unsafe(`DROP INDEX "${table}_unkeyed_idx"`)
      }
    }).pipe(
      Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })),
      Effect.scoped,
      quiet
    )
  )

/**
 * A UUIDv7 in SQL (48-bit Unix milliseconds, version 7, random rest), as `MessageId.make` produces.
 */
const uuidv7Sql = `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
  placing substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
  FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`

/** The body and headers `Outbox.dispatch(new BenchNoop({ n }))` writes (checked by `verify`). */
export const bodySql = (n: string) => `'{"n":' || ${n} || ',"_tag":"BenchNoop"}'`
export const headersSql = `'{"type":"BenchNoop"}'`

/** Pre-inserts messages `from..to` in the shape `Outbox.dispatch` writes, in one statement per 100 000. */
export const seed = (url: string, from: number, to: number): Promise<void> =>
  withClient(url, async (client) => {
    for (let lo = from; lo <= to; lo += 100_000) {
      const hi = Math.min(to, lo + 99_999)
      await client.query(
        `INSERT INTO "${table}" (message_id, body, headers, queue_name, created_at, available_at)
         SELECT ${uuidv7Sql}, ${bodySql("g")}, ${headersSql}, $3, now(), now()
         FROM generate_series($1::int, $2::int) AS g`,
        [lo, hi, queue]
      )
    }
  })

/** A `BenchNoop` whose class derives its ordering key (`Message.orderingKey`): its body and handler are BenchNoop's. */
class KeyedBenchNoop extends BenchNoop {
  constructor(n: number, readonly key: string) {
    super({ n })
  }
  [Message.orderingKey]() {
    return this.key
  }
}

/**
 * Dispatches messages `1..messages` through the library, `dispatchAll` in transactions of 1 000 (one send
 * statement each); with `keys`, message n on key `k${n % keys}` (derived by its class, so that one call carries many
 * keys), in the order of n.
 */
export const seedDispatched = (url: string, messages: number, keys: number | undefined): Promise<void> =>
  Effect.runPromise(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const outbox = yield* Outbox.Outbox
      for (let lo = 1; lo <= messages; lo += 1_000) {
        const batch: Array<BenchNoop> = []
        for (let n = lo; n <= Math.min(messages, lo + 999); n++) {
          batch.push(keys === undefined ? new BenchNoop({ n }) : new KeyedBenchNoop(n, keyOf(n, keys)))
        }
        yield* sql.withTransaction(outbox.dispatchAll(batch))
      }
    }).pipe(Effect.provide(stack(url, { maxConnections: 1 })), quiet)
  )

/** Consumes until the queue is empty (or the cap): the timed part of our burn-down. */
export const consume = (
  url: string,
  options: {
    readonly batchSize: number
    readonly concurrency?: number
    readonly capMs: number
    readonly onHandled?: () => void
  }
): Promise<{ readonly handled: number; readonly capped: boolean }> => {
  let handled = 0
  const layer = stack(url, {
    maxConnections: 4,
    onHandled: () => {
      handled++
      options.onHandled?.()
    }
  })
  return Effect.runPromise(
    Effect.gen(function*() {
      const context = yield* Layer.build(layer)
      // METRICS=off: the worker without its metrics (to measure what they cost)
      const metrics = process.env.METRICS === "off" ? { metrics: false } : {}
      const result = yield* Worker.run({
        transports: [queue],
        batchSize: options.batchSize,
        ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
        stopWhenEmpty: true,
        ...metrics
      }).pipe(
        Effect.provide(context),
        Effect.timeoutOption(Duration.millis(options.capMs))
      )
      return { handled, capped: Option.isNone(result) }
    }).pipe(Effect.scoped, quiet)
  )
}

export const burnDown = (batchSize: number, label: string, settings: string): BurnDownContender => ({
  id: `ours-${batchSize}`,
  label,
  settings,
  run: async (url, options) => {
    await setup(url)
    await seed(url, 1, options.messages)
    await options.settle()
    const time = clock()
    const result = await consume(url, { batchSize, capMs: options.capMs, onHandled: time.start })
    return { handled: result.handled, seconds: time.seconds(), capped: result.capped }
  }
})

/**
 * The ordering-keys burn-down: the messages dispatched with or without keys (`seedDispatched`), then consumed by
 * one worker with `concurrency` handlers.
 */
export const orderedBurnDown = (batchSize: number, concurrency: number): OrderedContender => ({
  id: "ours",
  label: "effect-outbox",
  settings: `\`Worker.run\` batchSize ${batchSize}, concurrency ${concurrency}, with and without keys; seeded with ` +
    "`Outbox.dispatchAll` in transactions of 1 000, each message's key derived by its class (`Message.orderingKey`)",
  run: async (url, options) => {
    await setup(url)
    await seedDispatched(url, options.messages, options.keys)
    await options.settle()
    const time = clock()
    const result = await consume(url, { batchSize, concurrency, capMs: options.capMs, onHandled: time.start })
    if (!result.capped && result.handled < options.messages) {
      throw new Error(`the worker stopped with ${options.messages - result.handled} messages left`)
    }
    return { handled: result.handled, seconds: time.seconds(), capped: result.capped }
  }
})

/**
 * Starts one of our workers with its defaults in a process of its own (bench/dispatch-worker.ts) and resolves once it
 * runs; `stop` ends it gracefully and returns the messages it handled.
 */
const startWorkerProcess = async (url: string) => {
  const child = spawn(process.execPath, [...tsNodeArgs(), path.join(root, "bench", "dispatch-worker.ts"), url], {
    cwd: root,
    stdio: ["pipe", "pipe", "inherit"]
  })
  let out = ""
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk))
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on("data", () => (out.includes("READY\n") ? resolve() : undefined))
    child.on("error", reject)
    void exited.then((code) => reject(new Error(`the dispatch worker exited with ${code} before it was ready`)))
  })
  try {
    await withDeadline(ready, 60_000, "the dispatch scenario's worker start")
  } catch (error) {
    child.kill("SIGKILL")
    throw error
  }
  return {
    stop: async (): Promise<number> => {
      child.stdin.end() // its signal to stop
      const code = await withDeadline(exited, 60_000, "the dispatch scenario's worker stop")
      const line = out.split("\n").find((l) => l.startsWith("{"))
      if (code !== 0 || line === undefined) throw new Error(`the dispatch worker exited with ${code}`)
      return (JSON.parse(line) as { handled: number }).handled
    }
  }
}

const dispatchOf = (keyed: boolean, workerRunning: boolean): DispatchContender => ({
  id: keyed ? "ours-keyed" : workerRunning ? "ours-worker" : "ours",
  label: keyed ? "effect-outbox, ordering key" : workerRunning ? "effect-outbox, worker running" : "effect-outbox",
  enqueueCall: keyed
    ? "`Outbox.dispatch(new BenchNoop({ n }), { orderingKey: \"account-\" + n })` inside `sql.withTransaction` " +
      "(a key per business row)"
    : workerRunning
    ? "the same as effect-outbox's, while one of our workers consumes the table, in a process of its own " +
      "(`Worker.run({ transports: [\"outbox\"] })`: defaults, batchSize 50, LISTEN/NOTIFY wake-up, no-op handler; " +
      "started before the producers, also during the runs without enqueue)"
    : "`Outbox.dispatch(new BenchNoop({ n }))` inside `sql.withTransaction`",
  keyed,
  run: async (url, options) => {
    await setup(url)
    if (!workerRunning) return produce(url, options, keyed)
    const worker = await startWorkerProcess(url)
    let tps: number
    try {
      tps = await produce(url, options, keyed)
    } catch (error) {
      await worker.stop().catch(() => undefined)
      throw error
    }
    const handled = await worker.stop()
    if (options.enqueue && handled === 0) throw new Error("the dispatch scenario's worker handled nothing")
    return tps
  }
})

/** Settles the database, then runs the producers: the business transaction with (or without) `Outbox.dispatch`. */
const produce = async (url: string, options: DispatchOptions, keyed: boolean): Promise<number> => {
  await options.settle()
  const runtime = ManagedRuntime.make(stack(url, { maxConnections: options.producers + 2 }))
  try {
    const transaction = (producer: number, i: number) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const id = businessRow(producer, i)
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe(businessUpdateSql, [id])
          if (options.enqueue) {
            yield* Outbox.dispatch(new BenchNoop({ n: id }), keyed ? { orderingKey: keyOfRow(id) } : undefined)
          }
        }))
      })
    await runtime.runPromise(Effect.void) // build the layer (pool, first connection) before the clock
    return await runProducers(options, (producer, i) => runtime.runPromise(quiet(transaction(producer, i))))
  } finally {
    await runtime.dispose()
  }
}

export const dispatch = dispatchOf(false, false)

/** The same with an ordering key per business row: the dispatch also takes the key's place (under its row lock). */
export const keyedDispatch = dispatchOf(true, false)

/** The same as `dispatch` while one of our workers (its defaults) consumes the table from a process of its own. */
export const dispatchWithWorker = dispatchOf(false, true)

/**
 * Runs a tiny real round trip through the library while recording every statement text that reaches
 * `pg`: the benchmark checks that the claim text the raw contender imports is among them, and the
 * seeding SQL is checked against the body and headers `Outbox.dispatch` writes.
 */
export const verify = async (
  url: string
): Promise<{ readonly statements: ReadonlyArray<string>; readonly shapeOk: boolean }> => {
  await setup(url)
  const seen = new Set<string>()
  const proto = pg.Client.prototype as unknown as { query: (...args: Array<unknown>) => unknown }
  const original = proto.query
  proto.query = function(this: unknown, ...args: Array<unknown>) {
    const first = args[0]
    const text = typeof first === "string" ? first : (first as { text?: unknown } | null)?.text
    if (typeof text === "string") seen.add(text)
    return original.apply(this, args)
  }
  let shapeOk = false
  try {
    await Effect.runPromise(
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        yield* outbox.dispatch(new BenchNoop({ n: 7 }))
        yield* outbox.dispatchAll([new BenchNoop({ n: 8 }), new BenchNoop({ n: 9 })])
      }).pipe(Effect.provide(stack(url, { maxConnections: 2 })), quiet)
    )
    shapeOk = await withClient(url, async (client) => {
      const { rows } = await client.query<{ ok: boolean }>(
        `SELECT bool_and(body = ${bodySql("(body::json->>'n')")} AND headers = ${headersSql}
                          AND available_at = created_at) AS ok
         FROM "${table}"`
      )
      return rows[0]?.ok === true
    })
    await consume(url, { batchSize: 50, capMs: 10_000 })
  } finally {
    proto.query = original
  }
  return { statements: Array.from(seen), shapeOk }
}
