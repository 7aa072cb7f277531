/**
 * A process of the latency scenario (see `sideBySide` in latency.ts): a contender's worker, its producer, or both
 * (the producer in the worker's process, as an application that runs its own worker). Requests from the benchmark
 * process over IPC: `{ n }` commits message `n` (answered with the time the COMMIT's response reached the `pg`
 * client); each handler start is reported as `{ started: n, at }`; all times on the machine's monotonic clock,
 * which every process shares. Ready once the worker runs and has gone idle; stops it when disconnected.
 * Usage: node --import tsx bench/latency-node.ts <ours|graphile> <database-url> <worker|producer|worker+producer>
 */
import { sleep } from "./common.js"
import { monotonicMs } from "./latency-clock.js"
import { type Kind, type NodeMessage, producer, type Role, worker } from "./latency.js"

const [kind, url, role] = process.argv.slice(2) as [Kind, string, Role]
const send = (m: NodeMessage) => process.send!(m)

const running = role === "producer"
  ? undefined
  : await worker(kind, url, (n) => send({ started: n, at: monotonicMs() }))
const app = role === "worker" ? undefined : await producer(kind, url)
process.on("message", (request: { readonly n: number }) => {
  void app!.commit(request.n).then(
    (committed) => send({ n: request.n, committed }),
    (error: unknown) => send({ n: request.n, error: String(error) })
  )
})
process.on("disconnect", () => {
  void Promise.all([running?.close(), app?.close()]).finally(() => process.exit(0))
})
await sleep(300)
send({ ready: true })
