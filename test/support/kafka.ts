/**
 * Apache Kafka for the tests: a single-node KRaft broker (4.4.0) run from Maven Central's jars as a private broker
 * of the test run, or `KAFKA_BOOTSTRAP` when set.
 *
 * The jars are resolved once per machine by Maven (`ensureJars`) into a cache outside the temporary folder
 * (`~/.cache/effect-outbox/kafka-4.4.0/lib`, or under `XDG_CACHE_HOME`): `kafka_2.13` (the broker and
 * `StorageTool`), plus `slf4j-api` 2 and log4j's slf4j2 binding, without which the broker logs nothing; not
 * `kafka-tools`, which nothing here uses and which would double the classpath (Connect, Jetty, Jersey). They are
 * resolved into a folder of their own and renamed into place, so an interrupted resolve never leaves half a
 * classpath, and two runs resolving at once each rename a complete one (the second finds the first's).
 *
 * A private broker (`startKafka`) lives in its own temporary folder: configuration, data and log. Its storage is
 * formatted first (`StorageTool format --standalone`, with a SCRAM user for both mechanisms), then the broker runs
 * on free loopback ports with two client listeners, PLAINTEXT and SASL_PLAINTEXT (SCRAM-SHA-256 and -512), and a
 * controller listener. Topics are never created implicitly. It is ready when its log says "Kafka Server started"
 * and both client ports accept connections. `stop` sends SIGTERM (a clean shutdown that keeps the data), `kill`
 * SIGKILL (a crash: the next start recovers the logs), and `start` boots it again on the same ports and data. The
 * JVM, the formatting JVM and the folder are tracked (support/leftovers.ts): they go when the test process ends,
 * however it ends.
 */
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../src/programs/EmbeddedPostgres.js"
import {
  accepts,
  copyDependencies,
  ensureJavaAndMaven,
  jvmServer,
  logSince,
  onPath,
  pom,
  run,
  type RunningServer,
  sweepStaging
} from "./jvm.js"

/** The broker's version: the Maven artifacts' and the cache folder's. */
export const kafkaVersion = "4.4.0"

/** The SASL/SCRAM listener and the user that may log in there. */
export interface KafkaScram {
  /** `127.0.0.1:<port>` of the SASL_PLAINTEXT listener. */
  readonly bootstrap: string
  readonly username: string
  readonly password: string
}

/** A broker started by the tests. */
export interface RunningKafka extends RunningServer {
  /** `127.0.0.1:<port>` of the PLAINTEXT listener. */
  readonly bootstrap: string
  readonly scram: KafkaScram
}

/** Options of a private broker. */
export interface KafkaOptions {
  /** How long a start may take before it fails (default 180 s: a loaded two-core machine needs 10 to 35 s). */
  readonly timeoutMs?: number
  /** Properties added to (or replacing) the broker's `server.properties`. */
  readonly properties?: Readonly<Record<string, string | number | boolean>>
}

const brokerPom = pom("effect-outbox-kafka-broker", [
  ["org.apache.kafka", "kafka_2.13", kafkaVersion],
  // Kafka's pom brings slf4j-api 1.7 and no binding: without these two the broker logs nothing.
  ["org.slf4j", "slf4j-api", "2.0.17"],
  ["org.apache.logging.log4j", "log4j-slf4j2-impl", "2.25.5"]
])

/** The folder of the cached classpath: `<XDG_CACHE_HOME or ~/.cache>/effect-outbox/kafka-<version>`. */
export const jarsCacheDir = (): string => {
  const base = process.env.XDG_CACHE_HOME !== undefined && process.env.XDG_CACHE_HOME !== ""
    ? process.env.XDG_CACHE_HOME
    : path.join(os.homedir(), ".cache")
  return path.join(base, "effect-outbox", `kafka-${kafkaVersion}`)
}

/**
 * A random cluster id as Kafka writes them: 16 bytes in unpadded base64url. Like Kafka's own `Uuid.randomUuid`, it
 * never starts with "-": the storage tool would read such an id as an option (one start in 64 failed so).
 */
const clusterId = (): string => {
  for (;;) {
    const id = randomBytes(16).toString("base64url")
    if (!id.startsWith("-")) return id
  }
}

const brokerJar = `kafka_2.13-${kafkaVersion}.jar`

/**
 * The broker's classpath folder, resolved by Maven the first time (about 45 jars, 43 MB). Folders left by a resolve
 * that was interrupted (their process is gone) are removed.
 */
export const ensureJars = async (): Promise<string> => {
  const cache = jarsCacheDir()
  const lib = path.join(cache, "lib")
  if (fs.existsSync(path.join(lib, brokerJar))) return lib
  ensureJavaAndMaven()
  sweepStaging(cache)
  const staging = path.join(cache, `resolve-${process.pid}-${randomBytes(4).toString("hex")}`)
  try {
    await copyDependencies("mvn (kafka jars)", staging, brokerPom, "lib")
    if (!fs.existsSync(path.join(staging, "lib", brokerJar))) {
      throw new Error(`mvn resolved no ${brokerJar} into ${path.join(staging, "lib")}`)
    }
    try {
      fs.renameSync(path.join(staging, "lib"), lib)
    } catch (error) {
      // Another run renamed its complete classpath first: use that one.
      if (!fs.existsSync(path.join(lib, brokerJar))) throw error
    }
  } finally {
    fs.rmSync(staging, { recursive: true, force: true })
  }
  return lib
}

const log4j = `status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.controller.name = kafka.controller
logger.controller.level = WARN
logger.coordinator.name = org.apache.kafka.coordinator
logger.coordinator.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
`

const scramMechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"] as const

/** Starts a private broker on free loopback ports (see the module's comment) and waits until it is ready. */
export const startKafka = async (options: KafkaOptions = {}): Promise<RunningKafka> => {
  const lib = await ensureJars()
  if (!onPath("java")) ensureJavaAndMaven()
  const timeoutMs = options.timeoutMs ?? 180_000
  // Three distinct ports: the kernel may hand a port just closed back to the next bind.
  const ports = new Set<number>()
  while (ports.size < 3) ports.add(await freePort())
  const [port, scramPort, controllerPort] = [...ports] as [number, number, number]
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `effect-outbox-kafka-${port}-`))
  const label = `kafka ${port}`
  const config = path.join(dir, "server.properties")
  const log = path.join(dir, "server.log")
  const server = jvmServer({
    label,
    what: "the Kafka broker",
    dir,
    lib,
    log,
    log4j,
    heap: ["-Xms256m", "-Xmx512m"],
    main: ["kafka.Kafka", config],
    timeoutMs,
    ready: async (from) =>
      logSince(log, from).includes("Kafka Server started") && await accepts(port) && await accepts(scramPort)
  })
  const scram: KafkaScram = {
    bootstrap: `127.0.0.1:${scramPort}`,
    username: "outbox",
    password: randomBytes(12).toString("hex")
  }
  const jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
  const properties: Record<string, string | number | boolean> = {
    "process.roles": "broker,controller",
    "node.id": 1,
    "controller.quorum.bootstrap.servers": `127.0.0.1:${controllerPort}`,
    "listeners": `PLAINTEXT://127.0.0.1:${port},SASL_PLAINTEXT://127.0.0.1:${scramPort},` +
      `CONTROLLER://127.0.0.1:${controllerPort}`,
    "advertised.listeners": `PLAINTEXT://127.0.0.1:${port},SASL_PLAINTEXT://127.0.0.1:${scramPort}`,
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": scramMechanisms.join(","),
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
    "log.dirs": path.join(dir, "data"),
    "num.partitions": 3,
    "default.replication.factor": 1,
    "min.insync.replicas": 1,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 3,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
    "share.coordinator.state.topic.num.partitions": 3,
    // A group's first member does not wait 3 s for others; tests may use short sessions.
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    // A broker restarted after SIGKILL registers again once its previous session expired (9 s by default).
    "broker.session.timeout.ms": 4000,
    "broker.heartbeat.interval.ms": 1000,
    "auto.create.topics.enable": false,
    // Records stamped with a test's clock (possibly 1970) are never deleted by retention.
    "log.retention.ms": -1,
    "log.segment.bytes": 16 * 1024 * 1024,
    "num.network.threads": 2,
    "num.io.threads": 2,
    "num.recovery.threads.per.data.dir": 1,
    "background.threads": 2,
    ...options.properties
  }
  try {
    fs.writeFileSync(
      config,
      Object.entries(properties).map(([key, value]) => `${key}=${value}`).join("\n") + "\n"
    )
    const cluster = clusterId()
    await run(`${label} (format)`, "nice", [
      "-n",
      "10",
      "java",
      ...server.javaOptions(["-Xmx256m", "-XX:TieredStopAtLevel=1"]),
      "kafka.tools.StorageTool",
      "format",
      "--standalone",
      "--cluster-id",
      cluster,
      "--config",
      config,
      ...scramMechanisms.flatMap((mechanism) => [
        "--add-scram",
        `${mechanism}=[name=${scram.username},password=${scram.password}]`
      ])
    ], { cwd: dir, output: path.join(dir, "format.log") })
    await server.launch()
  } catch (error) {
    await server.destroy().catch(() => undefined)
    throw error
  }
  return {
    bootstrap: `127.0.0.1:${port}`,
    scram,
    dir,
    pid: server.pid,
    stop: () => server.halt("SIGTERM"),
    start: server.launch,
    kill: () => server.halt("SIGKILL"),
    destroy: server.destroy
  }
}

/** The broker of a test run. */
export interface EnsuredKafka {
  readonly bootstrap: string
  /** The SCRAM listener and user: the private broker's, or `KAFKA_SCRAM_*`'s; `undefined` when not configured. */
  readonly scram: KafkaScram | undefined
  /** Stops what was started here (nothing for `KAFKA_BOOTSTRAP`). */
  readonly stop: () => Promise<void>
}

const env = (name: string): string | undefined => {
  const value = process.env[name]
  return value === undefined || value === "" ? undefined : value
}

/**
 * `KAFKA_BOOTSTRAP` (a broker of yours; with `KAFKA_SCRAM_BOOTSTRAP`, `KAFKA_SCRAM_USERNAME` and
 * `KAFKA_SCRAM_PASSWORD` for its SCRAM listener) when set, else a private broker started now.
 */
export const ensureKafka = async (options: KafkaOptions = {}): Promise<EnsuredKafka> => {
  const bootstrap = env("KAFKA_BOOTSTRAP")
  if (bootstrap !== undefined) {
    const scramBootstrap = env("KAFKA_SCRAM_BOOTSTRAP")
    const username = env("KAFKA_SCRAM_USERNAME")
    const password = env("KAFKA_SCRAM_PASSWORD")
    return {
      bootstrap,
      scram: scramBootstrap !== undefined && username !== undefined && password !== undefined
        ? { bootstrap: scramBootstrap, username, password }
        : undefined,
      stop: async () => {}
    }
  }
  const broker = await startKafka(options)
  return { bootstrap: broker.bootstrap, scram: broker.scram, stop: broker.destroy }
}
