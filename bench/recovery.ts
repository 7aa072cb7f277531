/**
 * The recovery scenario: a worker child process claims messages and hangs in its handler; it is
 * killed with SIGKILL; an idle rival worker in this process (`sleep` 60 s, so that only the lease
 * deadline — its `nextDue` wake-up — can make it look again) must redeliver them. Measured: SIGKILL to
 * the rival's first handler start.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { spawn } from "node:child_process"
import * as path from "node:path"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Handlers from "../src/services/Handlers.js"
import { BenchNoop, queue, root, sleep, table, tsNodeArgs, withDeadline } from "./common.js"
import { withWorker } from "./latency.js"
import * as Ours from "./ours.js"

export interface RecoveryOptions {
  /** The lease (`redeliverTimeout`) of both workers, in ms. */
  readonly leaseMs: number
  /** Messages pre-inserted; the doomed worker claims them all in one batch. */
  readonly messages: number
}

export interface RecoveryMeasurement {
  /** SIGKILL to the rival's first handler start, in ms. */
  readonly ms: number
  /** Messages the rival handled (all of them, or the round failed). */
  readonly redelivered: number
}

/** Spawns the doomed worker and resolves once its handler has started (it then holds its claim). */
const startDoomed = (url: string, leaseMs: number) => {
  const child = spawn(process.execPath, [
    ...tsNodeArgs(),
    path.join(root, "bench", "recovery-worker.ts"),
    url,
    String(leaseMs)
  ], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stderr = ""
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()))
  const started = new Promise<void>((resolve, reject) => {
    let out = ""
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk
      if (out.includes("STARTED ")) resolve()
    })
    child.on("error", reject)
    void exited.then(() => reject(new Error(`recovery worker exited before its handler started: ${stderr}`)))
  })
  return { child, started, exited }
}

/** One round on a fresh, set-up database. */
export const round = async (url: string, options: RecoveryOptions): Promise<RecoveryMeasurement> => {
  await Ours.setup(url)
  await Ours.seed(url, 1, options.messages)
  const doomed = startDoomed(url, options.leaseMs)
  try {
    await withDeadline(doomed.started, 60_000, "the recovery worker's first handler call")
    const seen = { first: undefined as number | undefined, redelivered: 0 }
    let all = () => {}
    const done = new Promise<void>((resolve) => (all = resolve))
    const layer = Layer.mergeAll(
      Handlers.layer([Handlers.handler(BenchNoop, () =>
        Effect.sync(() => {
          if (seen.first === undefined) seen.first = performance.now()
          if (++seen.redelivered >= options.messages) all()
        }))]),
      ScheduleRetryStrategy.layerDefault
    ).pipe(
      Layer.provideMerge(
        PgTransport.layer({ table, transports: { [queue]: { redeliverTimeout: Duration.millis(options.leaseMs) } } })
      ),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 }))
    )
    return await withWorker(layer, { transports: [queue], batchSize: 50, sleep: "60 seconds" }, async () => {
      await sleep(500) // the rival has looked, found everything leased, and sleeps until the lease runs out
      if (seen.first !== undefined) throw new Error("the rival handled a message before the kill")
      doomed.child.kill("SIGKILL")
      const killedAt = performance.now()
      await doomed.exited
      await withDeadline(done, options.leaseMs * 5 + 10_000, "redelivery after SIGKILL")
      return { ms: seen.first! - killedAt, redelivered: seen.redelivered }
    })
  } finally {
    if (doomed.child.exitCode === null && doomed.child.signalCode === null) doomed.child.kill("SIGKILL")
  }
}
