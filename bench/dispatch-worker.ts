/**
 * The worker of the dispatch scenario's "worker running" contender, in a process of its own (spawned by bench/ours.ts):
 * ours with its defaults (`Worker.run({ transports: ["outbox"] })`: batchSize 50, sleep 1 s, woken by LISTEN/NOTIFY),
 * a no-op handler, the latency scenario's worker (`Latency.worker`). Prints `READY` once it runs; when its stdin
 * ends it stops gracefully and prints `{"handled":N}` (not on SIGTERM: a dependency's exit hook exits at once on it).
 * Usage: node --import tsx bench/dispatch-worker.ts <database-url>
 */
import { sleep } from "./common.js"
import { worker } from "./latency.js"

const [url] = process.argv.slice(2)
if (url === undefined) {
  console.error("usage: dispatch-worker.ts <database-url>")
  process.exit(2)
}
let handled = 0
const running = await worker("ours", url, () => {
  handled++
})
process.stdin.on("end", () => {
  void running.close().finally(() => {
    process.stdout.write(`${JSON.stringify({ handled })}\n`)
    process.exit(0)
  })
})
process.stdin.resume()
await sleep(300) // it has looked once, found nothing and waits on its LISTEN connection
process.stdout.write("READY\n")
