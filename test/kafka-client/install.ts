/**
 * The Kafka client KafkaTransport is type-checked, built, tested and benchmarked with (`@platformatic/kafka`, pinned
 * by this folder's lock file). It is installed here, not by the project's `npm install`: two of its dependencies
 * declare Node.js ≥ 22.19 (the client itself declares 20.19.4 and runs there; every Kafka test runs on Node 20),
 * and the project's own install stays clean on the Node.js it supports. Users install the client themselves (an
 * optional peer).
 *
 * The project reaches it through a link, `node_modules/@platformatic/kafka` → this folder's copy, so that `tsc`,
 * `tsx`, vitest, child processes and the compiled library resolve it as any package; Node.js follows the link and
 * finds the client's own dependencies here. npm removes the link when it reinstalls the project; `npm test`,
 * `check`, `build`, `kafka:jars`, `bench:install` and vitest's configuration put it back.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { ensureInstalled } from "../support/npm-ci.js"

/** This folder. */
export const kafkaClientDir = path.dirname(fileURLToPath(import.meta.url))

const name = ["@platformatic", "kafka"] as const

/** Installs the client unless it is installed already, and links it into the project's `node_modules`. */
export const ensureKafkaClient = (): void => {
  ensureInstalled(kafkaClientDir, "the Kafka client for the tests", true)
  const scope = path.join(kafkaClientDir, "..", "..", "node_modules", name[0])
  const link = path.join(scope, name[1])
  const target = path.relative(scope, path.join(kafkaClientDir, "node_modules", ...name))
  let current: string | undefined
  try {
    current = fs.readlinkSync(link)
  } catch {
    current = undefined
  }
  if (current === target) return
  fs.mkdirSync(scope, { recursive: true })
  fs.rmSync(link, { recursive: true, force: true })
  fs.symlinkSync(target, link, "dir")
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  ensureKafkaClient()
}
