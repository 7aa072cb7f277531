/**
 * What every contender shares: the message, the measurement shapes and small timing helpers.
 */
import * as Schema from "effect/Schema"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The benchmark's message: one integer, a no-op handler. */
export class BenchNoop extends Schema.TaggedClass<BenchNoop>()("BenchNoop", { n: Schema.Int }) {}

/** Our table and queue (the transport's defaults). */
export const table = "messenger_messages"
export const queue = "outbox"

/** The graphile-worker task identifier and the pg-boss queue name. */
export const peerQueue = "bench"

/** One timed burn-down. `seconds` runs from the first handler call to the last completion written. */
export interface BurnDownMeasurement {
  readonly handled: number
  readonly seconds: number
  /** The round hit its time cap before every message was handled. */
  readonly capped: boolean
}

export interface BurnDownOptions {
  /** Messages pre-inserted before the clock starts. */
  readonly messages: number
  /** Time cap of the round, in milliseconds (the rate is then handled ÷ elapsed). */
  readonly capMs: number
  /** Called between seeding and the timed part (VACUUM ANALYZE, CHECKPOINT). */
  readonly settle: () => Promise<void>
}

export interface BurnDownContender {
  readonly id: string
  readonly label: string
  readonly settings: string
  /** Sets up its schema on the fresh database, seeds, settles, then runs the timed burn-down. */
  readonly run: (url: string, options: BurnDownOptions) => Promise<BurnDownMeasurement>
}

/** A burn-down of the ordering-keys scenario: the same messages, spread over `keys` ordering keys, or none. */
export interface OrderedOptions extends BurnDownOptions {
  /** Distinct keys, message n on key `k${n % keys}` (every key gets messages ÷ keys); undefined: no keys. */
  readonly keys: number | undefined
}

export interface OrderedContender {
  readonly id: string
  readonly label: string
  /** How it runs, and how it keeps a key's messages in order. */
  readonly settings: string
  /** Sets up its schema on the fresh database, seeds (keyed or not), settles, then runs the timed burn-down. */
  readonly run: (url: string, options: OrderedOptions) => Promise<BurnDownMeasurement>
}

/** The ordering key of message `n` over `keys` keys (round-robin). */
export const keyOf = (n: number, keys: number) => `k${n % keys}`

export interface DispatchOptions {
  readonly producers: number
  readonly warmupMs: number
  readonly measureMs: number
  /** false: the business transaction alone (the baseline). */
  readonly enqueue: boolean
  readonly settle: () => Promise<void>
}

export interface DispatchContender {
  readonly id: string
  readonly label: string
  readonly enqueueCall: string
  /** Every message is dispatched with an ordering key (the business row's, `keyOfRow`). */
  readonly keyed: boolean
  /** Sets up its schema, then runs the producers; returns transactions per second. */
  readonly run: (url: string, options: DispatchOptions) => Promise<number>
}

/** The business table of the dispatch scenario: each producer updates its own rows (no lock waits). */
export const rowsPerProducer = 1000
export const businessTableSql = (producers: number) => [
  `CREATE TABLE bench_accounts (id integer PRIMARY KEY, balance bigint NOT NULL DEFAULT 0,
     updated_at timestamptz NOT NULL DEFAULT now())`,
  `INSERT INTO bench_accounts (id) SELECT generate_series(1, ${producers * rowsPerProducer})`
]
export const businessUpdateSql = "UPDATE bench_accounts SET balance = balance + 1, updated_at = now() WHERE id = $1"
export const businessRow = (producer: number, i: number) => producer * rowsPerProducer + (i % rowsPerProducer) + 1
/** The ordering key of the keyed dispatch contenders: one per business row (the aggregate the transaction updates). */
export const keyOfRow = (id: number) => `account-${id}`

/**
 * A first-handler-call / completion clock: `start()` is called by every handler invocation (only the
 * first one counts), `seconds()` reads the elapsed time at the end.
 */
export const clock = () => {
  let started: number | undefined
  return {
    start: () => {
      if (started === undefined) started = performance.now()
    },
    seconds: () => (started === undefined ? 0 : (performance.now() - started) / 1000)
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Resolves true when `done` did not settle within `ms`. */
export const capped = (done: Promise<unknown>, ms: number): Promise<boolean> => {
  let timer: NodeJS.Timeout | undefined
  return Promise.race([
    done.then(() => false),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), ms)
    })
  ]).finally(() => clearTimeout(timer))
}

/**
 * Runs `producers` loops for warm-up + measurement; each loop runs `transaction` back to back.
 * Returns transactions per second committed during the measurement window.
 */
export const runProducers = async (
  options: Pick<DispatchOptions, "producers" | "warmupMs" | "measureMs">,
  transaction: (producer: number, i: number) => Promise<void>
): Promise<number> => {
  const t0 = performance.now()
  const from = t0 + options.warmupMs
  const until = from + options.measureMs
  let counted = 0
  const loop = async (producer: number) => {
    for (let i = 0; performance.now() < until; i++) {
      await transaction(producer, i)
      const now = performance.now()
      if (now >= from && now < until) counted++
    }
  }
  await Promise.all(Array.from({ length: options.producers }, (_, p) => loop(p)))
  return counted / (options.measureMs / 1000)
}

/**
 * Rejects when `promise` has not settled within `ms`, so that a contender that hangs (a library that
 * never stops, a lost connection) fails the run with its name instead of stalling it.
 */
export const withDeadline = <A>(promise: Promise<A>, ms: number, label: string): Promise<A> => {
  let timer: NodeJS.Timeout | undefined
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${label} did not finish within ${Math.round(ms / 1000)} s`)), ms)
    })
  ]).finally(() => clearTimeout(timer))
}

/** The repository root. */
export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/** The arguments that make a child node process run TypeScript the way this one does (tsx). */
export const tsNodeArgs = (): Array<string> =>
  process.execArgv.some((a) => a.includes("tsx")) ? [...process.execArgv] : ["--import", "tsx"]

/**
 * The peers' current releases need a current Node.js (graphile-worker 0.18: ≥ 22.18; pg-boss 12: ≥ 22.12): on an
 * older one the run stops at once, saying where to get one, instead of failing inside a contender.
 */
export const requireCurrentNode = (): void => {
  const [major, minor] = process.versions.node.split(".").map(Number) as [number, number]
  if (major > 22 || (major === 22 && minor >= 18)) return
  console.error(
    `The benchmark needs Node.js ≥ 22.18 (graphile-worker 0.18, pg-boss 12); this is ${process.version}. ` +
      `Node 24 from npm: npm ci --prefix .ci/matrix, then PATH="$PWD/.ci/matrix/node_modules/node-24/bin:$PATH" npm run bench`
  )
  process.exit(2)
}
