/**
 * pg-boss (12) with the throughput settings its documentation gives: a batch per fetch (`batchSize`), fetching
 * again at once while fetches come back full (`burstWhenBatchFull`, new in 12: "there is clearly more work"), the
 * shortest polling interval it accepts (0.5 s) otherwise, several `work()` calls on the queue (each call adds a
 * polling worker: "each call to work() adds a new polling worker", maintainer, timgit/pg-boss#483), and
 * maintenance and cron scheduling off on this instance (`supervise: false`, `schedule: false`). Its LISTEN/NOTIFY
 * (`useListenNotify`, off by default) wakes idle workers sooner; it buys no throughput on a backlog and costs every
 * `send` a NOTIFY, so it stays off as its documentation leaves it.
 *
 * Ordering keys: its `key_strict_fifo` queue policy (`createQueue(name, { policy: "key_strict_fifo" })`, every job
 * with a `singletonKey`): a key's jobs run one at a time in creation order, a fetch hands out each free key's head.
 */
import pg from "pg"
import { type JobInsert, PgBoss } from "pg-boss"
import {
  type BurnDownContender,
  businessRow,
  businessUpdateSql,
  capped,
  clock,
  type DispatchContender,
  keyOf,
  keyOfRow,
  type OrderedContender,
  peerQueue,
  runProducers
} from "./common.js"

export const defaultWorkers = 4
export const batchSize = 500
export const pollingIntervalSeconds = 0.5

export const tunedSettings = (workers: number) =>
  `work() × ${workers}, batchSize ${batchSize}, burstWhenBatchFull, pollingIntervalSeconds ${pollingIntervalSeconds}, pool max ${
    Math.max(10, workers + 2)
  }, supervise off, schedule off`

/** Starts pg-boss on `url` with the benchmark queue (`keyed`: a `key_strict_fifo` queue). */
const start = async (url: string, max = 10, keyed = false): Promise<PgBoss> => {
  const boss = new PgBoss({ connectionString: url, supervise: false, schedule: false, max })
  boss.on("error", (error) => console.error(`pg-boss: ${error.message}`))
  await boss.start()
  await boss.createQueue(peerQueue, keyed ? { policy: "key_strict_fifo" } : {})
  return boss
}

/**
 * The job id of message `n`, in the order of n: a bulk `insert` gives its jobs one `created_on`, and
 * `key_strict_fifo` breaks that tie by id, so ids in the order of insertion keep a key's jobs in that order.
 */
const orderedId = (n: number) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`

/**
 * Pre-inserts jobs `from..to` with `insert` (its bulk API), 5 000 per call; with `keys`, job n with `singletonKey`
 * `k${n % keys}` and an id in the order of n.
 */
const seed = async (boss: PgBoss, from: number, to: number, keys?: number): Promise<void> => {
  for (let lo = from; lo <= to; lo += 5_000) {
    const hi = Math.min(to, lo + 4_999)
    const jobs: Array<JobInsert> = []
    for (let n = lo; n <= hi; n++) {
      jobs.push(keys === undefined ? { data: { n } } : { id: orderedId(n), data: { n }, singletonKey: keyOf(n, keys) })
    }
    await boss.insert(peerQueue, jobs)
  }
}

/** Seeds, settles, then runs `workers` work() calls of batches of `batch` until every job was handled (or the cap). */
const burnDownRun = async (
  url: string,
  options: { readonly messages: number; readonly capMs: number; readonly settle: () => Promise<void> },
  workers: number,
  batch: number,
  keys: number | undefined
) => {
  const boss = await start(url, Math.max(10, workers + 2), keys !== undefined)
  try {
    await seed(boss, 1, options.messages, keys)
    await options.settle()
    const time = clock()
    let handled = 0
    let finish = () => {}
    const done = new Promise<void>((resolve) => {
      finish = resolve
    })
    for (let w = 0; w < workers; w++) {
      await boss.work(
        peerQueue,
        { batchSize: batch, pollingIntervalSeconds, burstWhenBatchFull: true },
        async (jobs) => {
          time.start()
          handled += jobs.length
          if (handled >= options.messages) finish()
        }
      )
    }
    const wasCapped = await capped(done, options.capMs)
    await boss.stop({ graceful: true, close: true })
    return { handled, seconds: time.seconds(), capped: wasCapped }
  } catch (error) {
    await boss.stop({ graceful: false, close: true }).catch(() => undefined)
    throw error
  }
}

export const burnDown = (workers: number): BurnDownContender => ({
  id: "pgboss",
  label: "pg-boss, tuned",
  settings: tunedSettings(workers),
  run: (url, options) => burnDownRun(url, options, workers, batchSize, undefined)
})

/**
 * A batch no larger than the keys: a fetch hands out one job per key, so a larger batch never comes back full,
 * and a fetch that is not full waits for the polling interval instead of bursting.
 */
export const keyedBatchSize = (keys: number | undefined) => Math.min(batchSize, keys ?? batchSize)

/** The ordering-keys burn-down: a `key_strict_fifo` queue with keys, a standard queue without. */
export const orderedBurnDown = (workers: number): OrderedContender => ({
  id: "pgboss",
  label: "pg-boss",
  settings: `keys: a \`key_strict_fifo\` queue (\`createQueue\` policy), each job's \`singletonKey\` its key, ids in ` +
    `insertion order (its tie-break within one bulk insert); no keys: a standard queue; ${
      tunedSettings(workers).replace(`batchSize ${batchSize}`, `batchSize min(${batchSize}, keys)`)
    }`,
  run: (url, options) => burnDownRun(url, options, workers, keyedBatchSize(options.keys), options.keys)
})

const dispatchOf = (keyed: boolean): DispatchContender => ({
  id: keyed ? "pgboss-keyed" : "pgboss",
  label: keyed ? "pg-boss, key_strict_fifo" : "pg-boss",
  enqueueCall: keyed
    ? "`boss.send('bench', { n }, { db, singletonKey: 'account-' + n })` into a `key_strict_fifo` queue"
    : "`boss.send('bench', { n }, { db })`, `db.executeSql` running on the transaction's pg client",
  keyed,
  run: async (url, options) => {
    const boss = await start(url, 2, keyed)
    const pool = new pg.Pool({ connectionString: url, max: options.producers })
    pool.on("error", () => {}) // an idle client cut when the database is dropped
    try {
      await options.settle()
      return await runProducers(options, async (producer, i) => {
        const client = await pool.connect()
        try {
          const id = businessRow(producer, i)
          await client.query("BEGIN")
          await client.query(businessUpdateSql, [id])
          if (options.enqueue) {
            const db = { executeSql: (text: string, values: Array<unknown>) => client.query(text, values) }
            await boss.send(peerQueue, { n: id }, keyed ? { db, singletonKey: keyOfRow(id) } : { db })
          }
          await client.query("COMMIT")
        } finally {
          client.release()
        }
      })
    } finally {
      await pool.end()
      await boss.stop({ graceful: false, close: true }).catch(() => undefined)
    }
  }
})

export const dispatch = dispatchOf(false)

/** The same with a key per business row into a `key_strict_fifo` queue. */
export const keyedDispatch = dispatchOf(true)
