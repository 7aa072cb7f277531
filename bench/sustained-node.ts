/**
 * A process of the sustained scenario (bench/sustained.ts): our worker, or the producers, each in a process of its own
 * so that neither takes the other's CPU from its event loop.
 *
 * - worker: `Worker.run({ transports: ["outbox"], batchSize })` (defaults otherwise: LISTEN/NOTIFY wake-up), a handler
 *   that notes when message n started; reports `{ starts: [n, at, …] }` every 100 ms.
 * - producers: `producers` loops, each on a pool of its own (one connection), each message committed as
 *   `sql.withTransaction(Outbox.dispatch(new BenchNoop({ n })))`; paced by a token bucket shared by the loops (`rate`
 *   per second, `producers` tokens deep; `Infinity`: unthrottled); reports `{ commits: [n, at, …] }` every 100 ms, `at`
 *   being when that producer's COMMIT response reached its `pg` client.
 *
 * All times on the machine's monotonic clock (`monotonicMs`), which every process shares. Requests over IPC:
 * `{ produce }` (producers: run a phase), `{ stop }` (stop, flush, answer `{ done }`, exit).
 * Usage: node --import tsx bench/sustained-node.ts <worker|producers> <database-url> <batchSize|producers>
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Redacted from "effect/Redacted"
import pg from "pg"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Outbox from "../src/services/Outbox.js"
import { BenchNoop, queue, sleep, table } from "./common.js"
import { monotonicMs } from "./latency-clock.js"
import { ourLayer, withWorker } from "./latency.js"

/** A phase of the producers: from `startAt` until `until` (monotonic ms), at `rate` messages per second. */
export interface ProducePhase {
  readonly startAt: number
  readonly until: number
  readonly rate: number
}

export type ToNode = { readonly produce: ProducePhase } | { readonly stop: true }

export type FromNode =
  | { readonly ready: true }
  | { readonly starts: ReadonlyArray<number> }
  | { readonly commits: ReadonlyArray<number> }
  | { readonly produced: { readonly committed: number; readonly errors: number; readonly firstError?: string } }
  | { readonly done: { readonly handled: number } }

const quiet = <A, E, R>(self: Effect.Effect<A, E, R>) => Logger.withMinimumLogLevel(self, LogLevel.Error)

const send = (m: FromNode) => process.send!(m)

/** Sends the last message, then leaves. */
const finish = (m: FromNode) =>
  process.send!(m, undefined, {}, () => {
    process.disconnect()
    process.exit(0)
  })

/** Pairs `[n, at]` flattened, sent every 100 ms. */
const batcher = (wrap: (pairs: ReadonlyArray<number>) => FromNode) => {
  let pending: Array<number> = []
  const flush = () => {
    if (pending.length === 0) return
    const out = pending
    pending = []
    send(wrap(out))
  }
  const timer = setInterval(flush, 100)
  return {
    add: (n: number, at: number) => {
      pending.push(n, at)
    },
    flush,
    stop: () => {
      clearInterval(timer)
      flush()
    }
  }
}

/**
 * When each producer's latest COMMIT response reached its `pg` client, by the connection's `application_name` (one
 * per producer, one transaction at a time each): exact even with the eight loops committing at once.
 */
const commitTimes = new Map<string, number>()
const installCommitHook = () => {
  const proto = pg.Client.prototype as unknown as { query: (...args: Array<unknown>) => unknown }
  const query = proto.query
  proto.query = function(this: { connectionParameters?: { application_name?: string } }, ...args: Array<unknown>) {
    const callback = args[2]
    if (args[0] === "COMMIT" && typeof callback === "function") {
      const name = this.connectionParameters?.application_name ?? ""
      return query.call(this, args[0], args[1], (error: unknown, result: unknown) => {
        commitTimes.set(name, monotonicMs())
        ;(callback as (e: unknown, r: unknown) => void)(error, result)
      })
    }
    return query.apply(this, args)
  }
}

const runWorker = async (url: string, batchSize: number) => {
  const starts = batcher((pairs) => ({ starts: pairs }))
  let handled = 0
  const layer = ourLayer(url, (n) =>
    Effect.sync(() => {
      starts.add(n, monotonicMs())
      handled++
    }))
  let stop: () => void = () => {}
  const stopped = new Promise<void>((resolve) => (stop = resolve))
  process.on("message", (m: ToNode) => ("stop" in m ? stop() : undefined))
  await withWorker(layer, { transports: [queue], batchSize }, async () => {
    await sleep(300) // it has looked once, found nothing and waits
    send({ ready: true })
    await stopped
  })
  starts.stop()
  finish({ done: { handled } })
}

const runProducers = async (url: string, producers: number) => {
  installCommitHook()
  const runtimes = Array.from({ length: producers }, (_, p) =>
    ManagedRuntime.make(
      Outbox.layer().pipe(
        Layer.provideMerge(PgTransport.layer({ table })),
        Layer.provideMerge(
          PgClient.layer({ url: Redacted.make(url), maxConnections: 1, applicationName: `sustained-producer-${p}` })
        )
      )
    ))
  for (const runtime of runtimes) await runtime.runPromise(Effect.void) // pools and first connections up
  const commit = (p: number, n: number) =>
    runtimes[p]!.runPromise(quiet(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.withTransaction(Outbox.dispatch(new BenchNoop({ n })))
    }))).then(() => commitTimes.get(`sustained-producer-${p}`) ?? Number.NaN)
  const commits = batcher((pairs) => ({ commits: pairs }))
  let n = 0

  const phase = async (ph: ProducePhase) => {
    let committed = 0
    let errors = 0
    let firstError: string | undefined
    const spacing = Number.isFinite(ph.rate) ? 1000 / ph.rate : 0
    const depth = producers * spacing
    let last = ph.startAt - spacing
    /** The token bucket: the next slot, no earlier than `depth` ms before now (no burst beyond the bucket). */
    const slot = () => {
      last = Math.max(last + spacing, monotonicMs() - depth)
      return last
    }
    const loop = async (p: number) => {
      for (;;) {
        const at = spacing === 0 ? Math.max(ph.startAt, monotonicMs()) : slot()
        if (at >= ph.until) return
        const wait = at - monotonicMs()
        if (wait > 0) await sleep(wait)
        const id = ++n
        try {
          commits.add(id, await commit(p, id))
          committed++
        } catch (error) {
          errors++
          firstError ??= String(error)
        }
      }
    }
    await Promise.all(runtimes.map((_, p) => loop(p)))
    commits.flush()
    send({ produced: { committed, errors, ...(firstError === undefined ? {} : { firstError }) } })
  }

  process.on("message", (m: ToNode) => {
    if ("produce" in m) void phase(m.produce)
    else {
      commits.stop()
      void Promise.all(runtimes.map((r) => r.dispose())).finally(() => finish({ done: { handled: 0 } }))
    }
  })
  send({ ready: true })
}

const [role, url, count] = process.argv.slice(2) as ["worker" | "producers", string, string]
await (role === "worker" ? runWorker(url, Number(count)) : runProducers(url, Number(count)))
