/**
 * pg-boss (12) with the throughput settings its documentation gives: a batch per fetch (`batchSize`), fetching
 * again at once while fetches come back full (`burstWhenBatchFull`, new in 12: "there is clearly more work"), the
 * shortest polling interval it accepts (0.5 s) otherwise, several `work()` calls on the queue (each call adds a
 * polling worker: "each call to work() adds a new polling worker", maintainer, timgit/pg-boss#483), and
 * maintenance and cron scheduling off on this instance (`supervise: false`, `schedule: false`). Its LISTEN/NOTIFY
 * (`useListenNotify`, off by default) wakes idle workers sooner; it buys no throughput on a backlog and costs every
 * `send` a NOTIFY, so it stays off as its documentation leaves it.
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

const start = async (url: string, max = 10): Promise<PgBoss> => {
  const boss = new PgBoss({ connectionString: url, supervise: false, schedule: false, max })
  boss.on("error", (error) => console.error(`pg-boss: ${error.message}`))
  await boss.start()
  await boss.createQueue(peerQueue)
  return boss
}

/** Pre-inserts jobs `from..to` with `insert` (its bulk API), 5 000 per call. */
const seed = async (boss: PgBoss, from: number, to: number): Promise<void> => {
  for (let lo = from; lo <= to; lo += 5_000) {
    const hi = Math.min(to, lo + 4_999)
    const jobs: Array<JobInsert> = []
    for (let n = lo; n <= hi; n++) jobs.push({ data: { n } })
    await boss.insert(peerQueue, jobs)
  }
}

export const burnDown = (workers: number): BurnDownContender => ({
  id: "pgboss",
  label: "pg-boss, tuned",
  settings: tunedSettings(workers),
  run: async (url, options) => {
    const boss = await start(url, Math.max(10, workers + 2))
    try {
      await seed(boss, 1, options.messages)
      await options.settle()
      const time = clock()
      let handled = 0
      let finish = () => {}
      const done = new Promise<void>((resolve) => {
        finish = resolve
      })
      for (let w = 0; w < workers; w++) {
        await boss.work(peerQueue, { batchSize, pollingIntervalSeconds, burstWhenBatchFull: true }, async (jobs) => {
          time.start()
          handled += jobs.length
          if (handled >= options.messages) finish()
        })
      }
      const wasCapped = await capped(done, options.capMs)
      await boss.stop({ graceful: true, close: true })
      return { handled, seconds: time.seconds(), capped: wasCapped }
    } catch (error) {
      await boss.stop({ graceful: false, close: true }).catch(() => undefined)
      throw error
    }
  }
})

export const dispatch: DispatchContender = {
  id: "pgboss",
  label: "pg-boss",
  enqueueCall: "`boss.send('bench', { n }, { db })`, `db.executeSql` running on the transaction's pg client",
  run: async (url, options) => {
    const boss = await start(url, 2)
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
            await boss.send(peerQueue, { n: id }, { db })
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
}
