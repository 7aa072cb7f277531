/**
 * `npm run bench:install`, the first step of `npm run bench`, `bench:smoke` and `bench:runtimes`: installs the
 * benchmark's peers (graphile-worker, pg-boss) in bench/node_modules exactly as bench/package-lock.json pins them
 * (`npm ci`), unless that is what is installed already, and the Kafka client (test/kafka-client/install.ts). They
 * live apart from the project's install because their current releases need Node.js ≥ 22.18, while the library
 * supports 20.19.
 *
 * The peers' own copy of `pg` is removed: they, and the benchmark's hooks on `pg.Client.prototype` (the commit and
 * latency clocks), must use the project's `pg`, the one @effect/sql-pg runs on — with two copies the hooks see none
 * of our commits. Node finds the project's by looking up from bench/node_modules.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { ensureKafkaClient } from "../test/kafka-client/install.js"
import { ensureInstalled } from "../test/support/npm-ci.js"

const dir = path.dirname(fileURLToPath(import.meta.url))

ensureInstalled(dir, "the benchmark's peers in bench/node_modules")
ensureKafkaClient()
fs.rmSync(path.join(dir, "node_modules", "pg"), { recursive: true, force: true })
