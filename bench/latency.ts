/**
 * The latency scenario: an idle queue, a worker already running and idle, and a producer that commits
 * one message at a time. Measured from the COMMIT's response reaching the producer's `pg` client
 * (`commitClock`) to the handler starting, on the machine's monotonic clock (`monotonicMs`). The producer runs in a process of its own (as an application
 * and its worker do in production: the worker process then only runs the worker), or in the worker's own
 * process (then the worker shares its CPU with the producer's). Also, for ours, delayed messages: from
 * their `available_at` to the handler start, both on the database clock.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Redacted from "effect/Redacted"
import { Logger as GraphileLogger, run } from "graphile-worker"
import { fork } from "node:child_process"
import * as path from "node:path"
import pg from "pg"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { BenchNoop, peerQueue, queue, root, sleep, table, tsNodeArgs, withDeadline } from "./common.js"
import * as Graphile from "./graphile.js"
import { commitClock, monotonicMs } from "./latency-clock.js"
import * as Ours from "./ours.js"

const quiet = <A, E, R>(self: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(self, LogLevel.Error)

export interface LatencyOptions {
  /** Messages measured. */
  readonly messages: number
  /** Messages sent first and not measured (the worker's code is still being optimized by the JIT). */
  readonly warmup: number
  /** Pause after a message was handled before the next is sent, so that the worker is idle again. */
  readonly gapMs: number
}

/** Handler starts by message number, with a promise per awaited number. */
export const starts = () => {
  const waiting = new Map<number, (t: number) => void>()
  return {
    /** Called when the handler of message `n` started (now, or at `t`: a time taken in another process). */
    started: (n: number, t: number = monotonicMs()) => {
      const resolve = waiting.get(n)
      if (resolve !== undefined) {
        waiting.delete(n)
        resolve(t)
      }
    },
    /** Registered before the message is committed. */
    expect: (n: number): Promise<number> =>
      withDeadline(new Promise<number>((resolve) => waiting.set(n, resolve)), 15_000, `handling of message ${n}`)
  }
}

/** Latencies in ms of one run: the warm-up's, and those measured after it. */
export interface LatencySamples {
  /** The warm-up messages, from the worker's start: its start-up tail (the JIT still compiling, a fresh database). */
  readonly startup: Array<number>
  /** The `messages` after the warm-up: the worker in its steady state. */
  readonly measured: Array<number>
}

/**
 * Sends `warmup + messages` one at a time: register, commit (returns the client-side commit time), wait for
 * the handler start, pause `gapMs`. Returns the latencies of the warm-up and of the `messages` after it.
 */
export const produce = async (
  options: LatencyOptions,
  waiter: ReturnType<typeof starts>,
  commit: (n: number) => Promise<number>
): Promise<LatencySamples> => {
  const samples: LatencySamples = { startup: [], measured: [] }
  for (let n = 1; n <= options.warmup + options.messages; n++) {
    ;(n > options.warmup ? samples.measured : samples.startup).push(await commitAndAwait(waiter, commit, n))
    await sleep(options.gapMs)
  }
  return samples
}

/** Commits message `n` and waits for its handler to start; returns the latency in ms. */
const commitAndAwait = async (waiter: ReturnType<typeof starts>, commit: (n: number) => Promise<number>, n: number) => {
  const handled = waiter.expect(n)
  const committed = await commit(n)
  return (await handled) - committed
}

/** Our stack with a handler that receives the message and its envelope. */
export const ourLayer = (
  url: string,
  onHandle: (n: number, transportId: string) => Effect.Effect<void>,
  transport: PgTransport.Options = { table }
) =>
  Layer.mergeAll(
    Outbox.layer(),
    Handlers.layer([Handlers.handler(BenchNoop, (message, envelope) => onHandle(message.n, envelope.transportId))]),
    ScheduleRetryStrategy.layerDefault
  ).pipe(
    Layer.provideMerge(PgTransport.layer(transport)),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 }))
  )

/**
 * Runs `Worker.run(options)` in the background of a runtime over `layer` while `body` runs, then
 * interrupts it (a graceful stop) and disposes the runtime.
 */
export const withWorker = async <R, E, A>(
  layer: Layer.Layer<R, E, never>,
  options: Worker.WorkerOptions,
  body: (runtime: ManagedRuntime.ManagedRuntime<R, E>) => Promise<A>
): Promise<A> => {
  const running = await startWorker(layer, options)
  try {
    return await body(running.runtime)
  } finally {
    await running.close()
  }
}

/** Starts `Worker.run(options)` in the background of a runtime over `layer`; `close` interrupts it and disposes the runtime. */
const startWorker = async <R, E>(layer: Layer.Layer<R, E, never>, options: Worker.WorkerOptions) => {
  const runtime = ManagedRuntime.make(layer)
  try {
    await runtime.runPromise(Effect.void) // build the layer (pool, first connection) before the worker starts
  } catch (error) {
    await runtime.dispose()
    throw error
  }
  const fiber = runtime.runFork(quiet(Worker.run(options) as unknown as Effect.Effect<unknown, unknown, R>))
  return {
    runtime,
    close: async () => {
      try {
        await runtime.runPromise(Fiber.interrupt(fiber))
      } finally {
        await runtime.dispose()
      }
    }
  }
}

/** When the latest COMMIT's response reached this process's `pg` client (the hook is installed on first use). */
const committedAt = () => commitClock()()

/** Commits `Outbox.dispatch(new BenchNoop({ n }))` in its own transaction; resolves with the time COMMIT returned. */
const dispatchOne = (n: number, delayMs?: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.withTransaction(
      Outbox.dispatch(new BenchNoop({ n }), delayMs === undefined ? undefined : { delay: Duration.millis(delayMs) })
    )
    return committedAt()
  })

/** The two contenders of the latency scenario. */
export type Kind = "ours" | "graphile"

/** Where the producer runs: a process of its own, or the worker's process. */
export type Placement = "own-process" | "worker-process"

/**
 * A contender's producer: the same Effect application for both, each message committed in its own
 * `sql.withTransaction` through @effect/sql-pg — ours enqueues with `Outbox.dispatch`, graphile-worker's with its
 * `add_job` SQL function on the transaction's connection (its transactional way). `commit(n)` resolves with the
 * time the COMMIT's response reached the `pg` client.
 */
export const producer = async (kind: Kind, url: string) => {
  commitClock()
  const client = PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })
  if (kind === "ours") {
    const runtime = ManagedRuntime.make(
      Outbox.layer().pipe(Layer.provideMerge(PgTransport.layer({ table })), Layer.provideMerge(client))
    )
    await runtime.runPromise(Effect.void)
    return {
      commit: (n: number) => runtime.runPromise(quiet(dispatchOne(n))),
      close: () => runtime.dispose()
    }
  }
  const runtime = ManagedRuntime.make(client)
  const sql = await runtime.runPromise(SqlClient.SqlClient)
  return {
    commit: (n: number) =>
      runtime.runPromise(quiet(sql.withTransaction(graphileAddJob(sql, n)).pipe(Effect.map(committedAt)))),
    close: () => runtime.dispose()
  }
}

/**
 * A contender's worker with its default settings, calling `started(n)` when the handler of message `n` starts:
 * ours `Worker.run({ transports: ["outbox"] })` (sleep 1 s; woken by LISTEN/NOTIFY), graphile-worker `run()` (LISTEN/NOTIFY
 * on `add_job`, 2 s poll interval). Resolves once the worker is running; `close` stops it.
 */
export const worker = async (kind: Kind, url: string, started: (n: number) => void) => {
  if (kind === "ours") return startWorker(ourLayer(url, (n) => Effect.sync(() => started(n))), { transports: [queue] })
  const runner = await run({
    connectionString: url,
    logger: graphileLogger,
    noHandleSignals: true,
    taskList: {
      [peerQueue]: (payload) => {
        started((payload as { n: number }).n)
      }
    }
  })
  return { close: () => runner.stop() }
}

/** What a latency node process does (bench/latency-node.ts): run the worker, the producer, or both. */
export type Role = "worker" | "producer" | "worker+producer"

/**
 * A child process running a contender's worker and/or producer (bench/latency-node.ts): `commit(n)` resolves with
 * the time the COMMIT returned there, `started(n)` is called with the time a handler started there — both on the
 * clock every process of the machine shares.
 */
const node = async (kind: Kind, url: string, role: Role, started: (n: number, at: number) => void) => {
  const child = fork(path.join(root, "bench", "latency-node.ts"), [kind, url, role], {
    cwd: root,
    execArgv: tsNodeArgs(),
    stdio: ["ignore", "inherit", "inherit", "ipc"]
  })
  const waiting = new Map<number, { resolve: (at: number) => void; reject: (e: Error) => void }>()
  let ready: () => void = () => {}
  let failed: (e: Error) => void = () => {}
  const readyPromise = new Promise<void>((resolve, reject) => {
    ready = resolve
    failed = reject
  })
  child.on("exit", (code) => failed(new Error(`the ${kind} ${role} process exited (${code})`)))
  child.on("message", (m: NodeMessage) => {
    if ("ready" in m) return ready()
    if ("started" in m) return started(m.started, m.at)
    const w = waiting.get(m.n)
    waiting.delete(m.n)
    if ("error" in m) w?.reject(new Error(`${kind} producer: ${m.error}`))
    else w?.resolve(m.committed)
  })
  await withDeadline(readyPromise, 60_000, `the ${kind} ${role} process`)
  return {
    commit: (n: number) =>
      new Promise<number>((resolve, reject) => {
        waiting.set(n, { resolve, reject })
        child.send({ n })
      }),
    close: async () => {
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
      child.disconnect()
      await withDeadline(exited, 15_000, `the ${kind} ${role} process's exit`).catch(() => child.kill("SIGKILL"))
    }
  }
}

/** Messages of a latency node to the benchmark process. */
export type NodeMessage =
  | { readonly ready: true }
  | { readonly started: number; readonly at: number }
  | { readonly n: number; readonly committed: number }
  | { readonly n: number; readonly error: string }

/**
 * The contenders measured side by side: each in processes of its own (its worker, with the producer in the same
 * process or in another), on a database of its own, all running at once; message `n` is committed for one contender,
 * its handler start awaited, then — after `gapMs` — for the other, the order swapped every message. A slow stretch of
 * the shared machine (another tenant, a checkpoint) then falls on both alike, and neither inherits the garbage or the
 * compiled code of the other or of the scenarios before. Returns each contender's latencies.
 */
export const sideBySide = async (
  contenders: ReadonlyArray<{ readonly kind: Kind; readonly url: string }>,
  options: LatencyOptions,
  placement: Placement
): Promise<Array<LatencySamples>> => {
  const running: Array<{ readonly close: () => Promise<void> }> = []
  try {
    const sides = []
    for (const { kind, url } of contenders) {
      await (kind === "ours" ? Ours.setup(url) : Graphile.setup(url))
      const waiter = starts()
      const workerNode = await node(
        kind,
        url,
        placement === "worker-process" ? "worker+producer" : "worker",
        waiter.started
      )
      running.push(workerNode)
      const producerNode = placement === "worker-process" ? workerNode : await node(kind, url, "producer", () => {})
      if (producerNode !== workerNode) running.push(producerNode)
      sides.push({ waiter, commit: producerNode.commit, samples: { startup: [], measured: [] } as LatencySamples })
    }
    for (let n = 1; n <= options.warmup + options.messages; n++) {
      for (let i = 0; i < sides.length; i++) {
        const side = sides[n % 2 === 0 ? i : sides.length - 1 - i]!
        ;(n > options.warmup ? side.samples.measured : side.samples.startup).push(
          await commitAndAwait(side.waiter, side.commit, n)
        )
        await sleep(options.gapMs)
      }
    }
    return sides.map((side) => side.samples)
  } finally {
    for (const r of running.reverse()) await r.close()
  }
}

/**
 * Ours, delayed messages: each dispatched with `{ delay }`, one at a time. The handler reads
 * `clock_timestamp() - available_at` of its own row (database clock) on a separate connection.
 * Returns those lags in ms.
 */
export const oursDelayed = async (
  url: string,
  options: { readonly messages: number; readonly delayMs: number }
): Promise<Array<number>> => {
  await Ours.setup(url)
  const probe = new pg.Client({ connectionString: url })
  probe.on("error", () => {})
  await probe.connect()
  try {
    const lags = new Map<number, number>()
    const waiter = starts()
    const onHandle = (n: number, transportId: string) =>
      Effect.promise(async () => {
        const { rows } = await probe.query<{ ms: number }>(
          `SELECT (extract(epoch FROM clock_timestamp() - available_at) * 1000)::float8 AS ms FROM "${table}" WHERE id = $1`,
          [transportId]
        )
        if (rows[0] !== undefined) lags.set(n, rows[0].ms)
        waiter.started(n)
      })
    await withWorker(ourLayer(url, onHandle), { transports: [queue] }, async (runtime) => {
      await sleep(300)
      await produce(
        { messages: options.messages, warmup: 0, gapMs: 5 },
        waiter,
        (n) => runtime.runPromise(quiet(dispatchOne(n, options.delayMs)))
      )
    })
    return Array.from(lags.values())
  } finally {
    await probe.end().catch(() => undefined)
  }
}

const graphileLogger = new GraphileLogger(() => (level, message) => {
  if (level === "error") console.error(`graphile-worker: ${message}`)
})

/** graphile-worker's enqueue from an Effect application: its `add_job` SQL function on the caller's connection. */
export const graphileAddJob = (sql: SqlClient.SqlClient, n: number) =>
  sql`SELECT graphile_worker.add_job(${peerQueue}, json_build_object('n', ${n}::int))`

/** The p-th percentile (nearest rank) of `values`. */
export const percentile = (values: ReadonlyArray<number>, p: number): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)))
  return sorted[rank - 1]!
}

export interface Percentiles {
  readonly count: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
}

export const percentiles = (values: ReadonlyArray<number>): Percentiles => ({
  count: values.length,
  p50: percentile(values, 50),
  p95: percentile(values, 95),
  p99: percentile(values, 99),
  max: values.length === 0 ? Number.NaN : Math.max(...values)
})
