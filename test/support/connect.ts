/**
 * Kafka Connect with Debezium for the tests: a standalone worker (Connect 4.3.2) with Debezium's PostgreSQL
 * connector (3.6.1.Final) as a plugin, run from Maven Central's jars as a private worker of the test run, or
 * `KAFKA_CONNECT_URL` when set. Connect 4.3.2, not the broker's 4.4.0: Debezium 3.6.1 is built on Kafka 4.3, and on
 * 4.4's runtime its task fails on a class Kafka moved (`org.apache.kafka.common.utils.Sanitizer`).
 *
 * The jars are resolved once per machine by Maven (`ensureConnectJars`) into a cache outside the temporary folder
 * (`~/.cache/effect-outbox/kafka-connect-4.3.2/debezium-3.6.1.Final`, or under `XDG_CACHE_HOME`): `lib` holds the
 * runtime (`connect-runtime`, `connect-json`, `slf4j-api` 2 and log4j's slf4j2 binding and core, without which
 * Connect logs nothing), `plugins/debezium-postgres` the connector. The plugin's folder loses the jars the runtime
 * provides: two `kafka-clients` or `connect-api` in one worker are two copies of one class, and the plugin's own
 * Jackson breaks the runtime's JSON converter at plugin discovery. Both are resolved into a folder of their own and
 * renamed into place together, so an interrupted resolve never leaves half a classpath, and two runs resolving at
 * once each rename a complete one (the second finds the first's).
 *
 * A private worker (`startConnect`) lives in its own temporary folder: worker properties, offsets and log. It runs
 * no connector at start; the tests create theirs through the REST API (`createConnector`) and delete them at the
 * end (`deleteConnector`). Its REST listener is on a free loopback port; it is ready when `GET /health` answers 200
 * (the herder has started), not when the port opens. `stop` sends SIGTERM, `kill` SIGKILL, and `start` boots it
 * again on the same port and offsets file: standalone Connect keeps its connectors only in memory, so a test that
 * restarts it creates its connector again. The JVM and the folder are tracked (support/leftovers.ts): they go when
 * the test process ends, however it ends.
 */
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../src/programs/EmbeddedPostgres.js"
import {
  copyDependencies,
  ensureJavaAndMaven,
  jvmServer,
  onPath,
  pom,
  type RunningServer,
  sweepStaging
} from "./jvm.js"
import { jarsCacheDir } from "./kafka.js"
import { sleep } from "./leftovers.js"

/** The Connect runtime's version (4.3.x: see the module's comment). */
export const connectVersion = "4.3.2"

/** Debezium's version: its PostgreSQL connector's. */
export const debeziumVersion = "3.6.1.Final"

/** A Connect worker started by the tests. */
export interface RunningConnect extends RunningServer {
  /** `http://127.0.0.1:<port>` of its REST API. */
  readonly url: string
}

/** Options of a private worker. */
export interface ConnectOptions {
  /** The Kafka bootstrap (`host:port`) the worker produces to. */
  readonly bootstrap: string
  /** How long a start may take before it fails (default 240 s: a loaded two-core machine needs 3 to 15 s). */
  readonly timeoutMs?: number
  /** Properties added to (or replacing) the worker's `worker.properties`. */
  readonly properties?: Readonly<Record<string, string | number | boolean>>
}

const runtimePom = pom("effect-outbox-kafka-connect", [
  ["org.apache.kafka", "connect-runtime", connectVersion],
  ["org.apache.kafka", "connect-json", connectVersion],
  // Connect's pom brings slf4j-api 1.7 and no binding: without these the worker logs nothing.
  ["org.slf4j", "slf4j-api", "2.0.17"],
  ["org.apache.logging.log4j", "log4j-slf4j2-impl", "2.25.5"],
  ["org.apache.logging.log4j", "log4j-core", "2.25.5"]
])

const pluginPom = pom("effect-outbox-debezium-postgres", [
  ["io.debezium", "debezium-connector-postgres", debeziumVersion]
])

/** The plugin's jars that the runtime provides (see the module's comment). */
const provided =
  /^(connect-api|kafka-clients|slf4j-api|lz4-java|snappy-java|zstd-jni|jackson-(core|databind|annotations))-/

const runtimeJar = `connect-runtime-${connectVersion}.jar`
const pluginJar = `debezium-connector-postgres-${debeziumVersion}.jar`

/** The cached classpaths: `<cache>/kafka-connect-<version>/debezium-<version>/{lib,plugins}`. */
export const connectCacheDir = (): string =>
  path.join(path.dirname(jarsCacheDir()), `kafka-connect-${connectVersion}`, `debezium-${debeziumVersion}`)

const complete = (dir: string): boolean =>
  fs.existsSync(path.join(dir, "lib", runtimeJar)) &&
  fs.existsSync(path.join(dir, "plugins", "debezium-postgres", pluginJar))

/**
 * The worker's classpath and plugin folders, resolved by Maven the first time. Folders left by a resolve that was
 * interrupted (their process is gone) are removed.
 */
export const ensureConnectJars = async (): Promise<{ readonly lib: string; readonly plugins: string }> => {
  const dir = connectCacheDir()
  const found = { lib: path.join(dir, "lib"), plugins: path.join(dir, "plugins") }
  if (complete(dir)) return found
  ensureJavaAndMaven()
  const parent = path.dirname(dir)
  sweepStaging(parent)
  const staging = path.join(parent, `resolve-${process.pid}-${randomBytes(4).toString("hex")}`)
  const out = path.join(staging, "out")
  const plugin = path.join(out, "plugins", "debezium-postgres")
  try {
    const resolve = (name: string, text: string, outputDirectory: string) =>
      copyDependencies(`mvn (${name} jars)`, path.join(staging, name), text, outputDirectory)
    await Promise.all([
      resolve("connect", runtimePom, path.join(out, "lib")),
      resolve("debezium", pluginPom, plugin)
    ])
    for (const jar of fs.readdirSync(plugin)) {
      if (provided.test(jar)) fs.rmSync(path.join(plugin, jar))
    }
    if (!complete(out)) throw new Error(`mvn resolved no ${runtimeJar} or no ${pluginJar} into ${out}`)
    try {
      fs.renameSync(out, dir)
    } catch (error) {
      // Another run renamed its complete folders first: use those.
      if (!complete(dir)) throw error
    }
  } finally {
    fs.rmSync(staging, { recursive: true, force: true })
  }
  return found
}

const log4j = `status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.config.name = org.apache.kafka.common.config
logger.config.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
`

/** Starts a private worker on a free loopback port (see the module's comment) and waits until it is ready. */
export const startConnect = async (options: ConnectOptions): Promise<RunningConnect> => {
  const { lib, plugins } = await ensureConnectJars()
  if (!onPath("java")) ensureJavaAndMaven()
  const timeoutMs = options.timeoutMs ?? 240_000
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `effect-outbox-connect-${port}-`))
  const label = `connect ${port}`
  const config = path.join(dir, "worker.properties")
  const server = jvmServer({
    label,
    what: "Kafka Connect",
    dir,
    lib,
    log: path.join(dir, "connect.log"),
    log4j,
    heap: ["-Xms128m", "-Xmx512m"],
    main: ["org.apache.kafka.connect.cli.ConnectStandalone", config],
    timeoutMs,
    ready: () => healthy(url)
  })
  const properties: Record<string, string | number | boolean> = {
    "bootstrap.servers": options.bootstrap,
    "listeners": url,
    "plugin.path": plugins,
    // Every plugin here ships ServiceLoader manifests: no reflective scan of the classpath (seconds of a core).
    "plugin.discovery": "service_load",
    "offset.storage.file.filename": path.join(dir, "offsets.dat"),
    // Debezium's position is written here: flushed often, so a clean stop or a kill re-sends little.
    "offset.flush.interval.ms": 1000,
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    // The broker creates no topic implicitly: connectors create theirs (`topic.creation.default.*`).
    "topic.creation.enable": true,
    "producer.enable.idempotence": true,
    "producer.acks": "all",
    "producer.linger.ms": 5,
    ...options.properties
  }
  try {
    fs.writeFileSync(config, Object.entries(properties).map(([key, value]) => `${key}=${value}`).join("\n") + "\n")
    await server.launch()
  } catch (error) {
    await server.destroy().catch(() => undefined)
    throw error
  }
  return {
    url,
    dir,
    pid: server.pid,
    stop: () => server.halt("SIGTERM"),
    start: server.launch,
    kill: () => server.halt("SIGKILL"),
    destroy: server.destroy
  }
}

/** Whether the worker at `url` says it is healthy (`GET /health`: 200 once its herder has started). */
const healthy = async (url: string): Promise<boolean> => {
  try {
    const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) })
    await response.body?.cancel()
    return response.status === 200
  } catch {
    return false
  }
}

/** The Connect worker of a test run. */
export interface EnsuredConnect {
  /** Its REST API's base URL. */
  readonly url: string
  /** Stops what was started here (nothing for `KAFKA_CONNECT_URL`). */
  readonly stop: () => Promise<void>
}

/**
 * `KAFKA_CONNECT_URL` (a worker of yours, with Debezium's PostgreSQL connector 3.6.1 as a plugin, producing to the
 * tests' broker) when set, else a private worker started now.
 */
export const ensureConnect = async (options: ConnectOptions): Promise<EnsuredConnect> => {
  const fromEnv = process.env.KAFKA_CONNECT_URL
  if (fromEnv !== undefined && fromEnv !== "") return { url: fromEnv.replace(/\/+$/, ""), stop: async () => {} }
  const worker = await startConnect(options)
  return { url: worker.url, stop: worker.destroy }
}

/** A REST call to a worker; rejects with the worker's message on an unexpected status. */
const rest = async (
  method: string,
  url: string,
  expected: ReadonlyArray<number>,
  body?: unknown
): Promise<unknown> => {
  const response = await fetch(url, {
    method,
    headers: { "content-type": "application/json", accept: "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(60_000)
  })
  const text = await response.text()
  if (!expected.includes(response.status)) throw new Error(`${method} ${url}: ${response.status} ${text}`)
  return text === "" ? undefined : JSON.parse(text)
}

/** Creates (or reconfigures) the connector `name` (`PUT /connectors/<name>/config`). */
export const createConnector = async (
  url: string,
  name: string,
  config: Readonly<Record<string, string | number | boolean>>
): Promise<void> => {
  await rest("PUT", `${url}/connectors/${encodeURIComponent(name)}/config`, [200, 201], {
    ...Object.fromEntries(Object.entries(config).map(([key, value]) => [key, String(value)])),
    name
  })
}

/** Deletes the connector `name`; one that does not exist is no error. */
export const deleteConnector = async (url: string, name: string): Promise<void> => {
  await rest("DELETE", `${url}/connectors/${encodeURIComponent(name)}`, [200, 204, 404])
}

interface ConnectorStatus {
  readonly connector: { readonly state: string; readonly trace?: string }
  readonly tasks: ReadonlyArray<{ readonly id: number; readonly state: string; readonly trace?: string }>
}

/**
 * Resolves once the connector `name` and all its tasks are RUNNING; rejects with the failed one's stack trace when
 * one is FAILED, or after `timeoutMs` (default 120 s) with the last status.
 */
export const awaitConnectorRunning = async (url: string, name: string, timeoutMs = 120_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  let last = "no status"
  while (Date.now() < deadline) {
    const status = await rest("GET", `${url}/connectors/${encodeURIComponent(name)}/status`, [200, 404])
      .catch((error: unknown) => ({ error: String(error) }))
    last = JSON.stringify(status)
    if (status !== undefined && "connector" in (status as object)) {
      const { connector, tasks } = status as ConnectorStatus
      const failed = connector.state === "FAILED" ? connector : tasks.find((task) => task.state === "FAILED")
      if (failed !== undefined) {
        throw new Error(`connector ${name} failed: ${failed.trace ?? JSON.stringify(status)}`)
      }
      if (connector.state === "RUNNING" && tasks.length > 0 && tasks.every((task) => task.state === "RUNNING")) return
    }
    await sleep(250)
  }
  throw new Error(`connector ${name} was not RUNNING within ${timeoutMs} ms: ${last}`)
}
