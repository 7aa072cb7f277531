/**
 * The worker process of the memory scenario (spawned by bench/main.ts, so that its RSS is the worker's
 * alone). Consumes the pre-inserted messages and prints one JSON line per sample on stdout:
 * `{"handled":N,"rss":bytes,"heapUsed":bytes,…}` (every figure of `process.memoryUsage()`), then `{"done":true,"handled":N,"seconds":s}`. Run with
 * `--expose-gc`, each sample is taken right after a full garbage collection.
 *
 * Usage: memory-worker.ts <ours|graphile-fast> <database url> <total> <sample at, …>
 */
import * as v8 from "node:v8"
import * as Graphile from "./graphile.js"
import * as Ours from "./ours.js"

const [contender, url, totalText, samplesText] = process.argv.slice(2)
if (contender === undefined || url === undefined || totalText === undefined || samplesText === undefined) {
  console.error("usage: memory-worker.ts <ours|graphile-fast> <url> <total> <n1,n2,…>")
  process.exit(2)
}
const total = Number(totalText)
const samples = new Set(samplesText.split(",").map(Number))

const emit = (line: object) => process.stdout.write(`${JSON.stringify(line)}\n`)
/** Started with --expose-gc: each sample follows a full collection, so it shows what is retained. */
const gc = (globalThis as { gc?: () => void }).gc
let handled = 0
const onHandled = () => {
  handled++
  if (samples.has(handled)) {
    gc?.()
    const usage = process.memoryUsage()
    emit({
      handled,
      rss: usage.rss,
      heapUsed: usage.heapUsed,
      heapTotal: usage.heapTotal,
      external: usage.external,
      arrayBuffers: usage.arrayBuffers,
      spaces: Object.fromEntries(v8.getHeapSpaceStatistics().map((space) => [space.space_name, space.space_size]))
    })
  }
}

const started = performance.now()
const capMs = 30 * 60 * 1000
const result = contender === "ours"
  ? await Ours.consume(url, { batchSize: 500, capMs, onHandled })
  : contender === "graphile-fast"
  ? await Graphile.consume(url, { fast: true, total, capMs, onHandled })
  : undefined
if (result === undefined) {
  console.error(`unknown contender ${contender}`)
  process.exit(2)
}
emit({ done: true, handled, seconds: (performance.now() - started) / 1000 })
process.exit(0)
