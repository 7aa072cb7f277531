/**
 * graphile-worker: its defaults, and the fast settings of its own performance test
 * (perfTest/graphile.config.js: 24 concurrent jobs, pool 25, local queue of 500 with a 10 ms refetch
 * delay, batched completes and fails).
 *
 * Ordering keys: its named queues (`queue_name` of `add_job`/`add_jobs`): the jobs of one queue run one at a time
 * (the queue is locked while one of its jobs runs), in `run_at` order.
 */
import { Logger, run, runMigrations, type TaskList } from "graphile-worker"
import pg from "pg"
import { withClient } from "./cluster.js"
import {
  type BurnDownContender,
  businessRow,
  businessUpdateSql,
  capped,
  clock,
  type DispatchContender,
  keyOfRow,
  type OrderedContender,
  peerQueue,
  runProducers
} from "./common.js"

const logger = new Logger(() => (level, message) => {
  if (level === "error") console.error(`graphile-worker: ${message}`)
})

export const fastPreset = {
  concurrentJobs: 24,
  maxPoolSize: 25,
  localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0
} as const

export const fastSettings =
  "concurrentJobs 24, maxPoolSize 25, localQueue 500 (refetchDelay 10 ms), completeJobBatchDelay 0, failJobBatchDelay 0"

export const setup = (url: string): Promise<void> => runMigrations({ connectionString: url, logger })

/**
 * Pre-inserts jobs `from..to` with `add_jobs` (what graphile's own perf test uses), 50 000 per call; with `keys`,
 * job n in the named queue `k${n % keys}` with a `run_at` in the order of n (a bulk insert otherwise gives its jobs
 * one `run_at`, and a queue's jobs run in `run_at` order), all of them due.
 */
export const seed = (url: string, from: number, to: number, keys?: number): Promise<void> =>
  withClient(url, async (client) => {
    const queueName = keys === undefined ? "NULL" : `'k' || (g % ${keys})` // keyOf
    const runAt = keys === undefined ? "NULL" : `now() - (${to} - g + 1) * interval '1 microsecond'`
    for (let lo = from; lo <= to; lo += 50_000) {
      const hi = Math.min(to, lo + 49_999)
      await client.query(
        `SELECT graphile_worker.add_jobs(array(
           SELECT ROW($3::text, json_build_object('n', g), ${queueName}, ${runAt}, NULL, NULL, NULL, NULL)
             ::graphile_worker.job_spec
           FROM generate_series($1::int, $2::int) AS g))`,
        [lo, hi, peerQueue]
      )
    }
  })

/**
 * Runs the worker until `total` jobs were handled (or the cap), then stops it gracefully (which writes
 * the pending batched completions). `onHandled` runs in the task.
 */
export const consume = async (
  url: string,
  options: {
    readonly fast: boolean
    /** Overrides its poll interval (default 2 s). */
    readonly pollInterval?: number
    readonly total: number
    readonly capMs: number
    readonly onHandled?: (handled: number) => void
  }
): Promise<{ readonly handled: number; readonly capped: boolean }> => {
  let handled = 0
  let finish = () => {}
  const done = new Promise<void>((resolve) => {
    finish = resolve
  })
  const taskList: TaskList = {
    [peerQueue]: () => {
      handled++
      options.onHandled?.(handled)
      if (handled >= options.total) finish()
    }
  }
  const runner = await run({
    connectionString: url,
    logger,
    noHandleSignals: true,
    taskList,
    preset: {
      worker: {
        ...(options.fast ? fastPreset : {}),
        ...(options.pollInterval === undefined ? {} : { pollInterval: options.pollInterval })
      }
    }
  })
  const wasCapped = await capped(done, options.capMs)
  await runner.stop()
  return { handled, capped: wasCapped }
}

export const burnDown = (fast: boolean): BurnDownContender => ({
  id: fast ? "graphile-fast" : "graphile-default",
  label: fast ? "graphile-worker, fast settings" : "graphile-worker, defaults",
  settings: fast ? fastSettings : "defaults (concurrentJobs 1, no local queue, unbatched completes)",
  run: async (url, options) => {
    await setup(url)
    await seed(url, 1, options.messages)
    await options.settle()
    const time = clock()
    const result = await consume(url, { fast, total: options.messages, capMs: options.capMs, onHandled: time.start })
    return { handled: result.handled, seconds: time.seconds(), capped: result.capped }
  }
})

/**
 * The poll interval of the ordering-keys burn-down (default 2 s): a fetch hands out one job per named queue, so with
 * fewer free queues than its local queue's size it comes back short, and the next one waits for the poll interval
 * (10 queues at the default: 5 jobs/s). 10 ms, its refetch delay (the least it accepts).
 */
export const namedQueuesPollInterval = 10

/** The ordering-keys burn-down: a named queue per key with keys, no queue without; fast settings. */
export const orderedBurnDown: OrderedContender = {
  id: "graphile",
  label: "graphile-worker",
  settings:
    `keys: a named queue per key (\`queue_name\` of \`add_jobs\`), \`run_at\` in insertion order; no keys: no ` +
    `queue; ${fastSettings}, pollInterval ${namedQueuesPollInterval} ms`,
  run: async (url, options) => {
    await setup(url)
    await seed(url, 1, options.messages, options.keys)
    await options.settle()
    const time = clock()
    const result = await consume(url, {
      fast: true,
      pollInterval: namedQueuesPollInterval,
      total: options.messages,
      capMs: options.capMs,
      onHandled: time.start
    })
    return { handled: result.handled, seconds: time.seconds(), capped: result.capped }
  }
}

const dispatchOf = (keyed: boolean): DispatchContender => ({
  id: keyed ? "graphile-keyed" : "graphile",
  label: keyed ? "graphile-worker, named queue" : "graphile-worker",
  enqueueCall: keyed
    ? "`SELECT graphile_worker.add_job('bench', json_build_object('n', $1), 'account-' || $1)` (its `queue_name`)"
    : "`SELECT graphile_worker.add_job('bench', json_build_object('n', $1))` in the same pg transaction",
  keyed,
  run: async (url, options) => {
    await setup(url)
    await options.settle()
    const pool = new pg.Pool({ connectionString: url, max: options.producers })
    pool.on("error", () => {}) // an idle client cut when the database is dropped
    try {
      return await runProducers(options, async (producer, i) => {
        const client = await pool.connect()
        try {
          const id = businessRow(producer, i)
          await client.query("BEGIN")
          await client.query(businessUpdateSql, [id])
          if (options.enqueue) {
            if (keyed) {
              await client.query("SELECT graphile_worker.add_job($1, json_build_object('n', $2::int), $3::text)", [
                peerQueue,
                id,
                keyOfRow(id)
              ])
            } else {
              await client.query("SELECT graphile_worker.add_job($1, json_build_object('n', $2::int))", [peerQueue, id])
            }
          }
          await client.query("COMMIT")
        } finally {
          client.release()
        }
      })
    } finally {
      await pool.end()
    }
  }
})

export const dispatch = dispatchOf(false)

/** The same with a named queue per business row. */
export const keyedDispatch = dispatchOf(true)
