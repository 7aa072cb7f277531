/**
 * `npm run chaos` in small: every scenario of the chaos program (chaos/scenarios.ts) with a couple of hundred
 * messages, two workers and a fault or two each — real worker processes, real SIGKILLs, real server restarts and
 * broker stops — and every check must pass, on PostgreSQL and on MariaDB. Some scenarios stop or restart their
 * server, so the scenarios run on PostgreSQL clusters, MariaDB servers and a RabbitMQ node of this file's own, never on the ones the other test files share: one
 * cluster for each scenario that restarts, stops or storms it, one for the others. That lets the scenarios run at the same
 * time (each on its own database), so the file takes about as long as its longest scenario, the broker's. Then the
 * checks' self-test: each corruption of a copy of a real result (an effect dropped, an effect of a rolled-back
 * message, a duplicate effect, an unbounded reason, a message left behind, a message whose handler never started
 * failed as `WorkerDiedError`, two messages of a key swapped, a key's records in another partition) must fail its check.
 * The hard SIGKILL storm (`sigkill-storm`) runs here in small: two workers killed three to five times, too few kills
 * to use up a retry budget of 5. `kafka-broker-kill` kills a Kafka broker of this file's own; `kafka-consumer-kill`,
 * which kills only consumers, runs on the test run's broker.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { evaluate, type Observation, selfTest, selfTestOk, syntheticObservation } from "../chaos/checks.js"
import { startMariadbServer } from "../chaos/dialects.js"
import { type ChaosServer, startServer } from "../chaos/postgres.js"
import { type Environment, fullSizes, type KafkaBroker, scenarios, type Sizes } from "../chaos/scenarios.js"
import { kafkaBootstrap } from "./support/kafka-transport.js"
import { type RunningKafka, startKafka } from "./support/kafka.js"
import { type RunningBroker, startBroker } from "./support/rabbitmq.js"

const sizes: Sizes = {
  ...fullSizes,
  messages: 200,
  seconds: 3,
  workers: 2,
  producers: 2,
  leaseMs: 2000,
  killEveryMs: [700, 1500],
  restartsPerMode: 1,
  terminateEveryMs: [200, 500],
  settleTimeoutMs: 1000,
  brokerStops: 1,
  brokerDownMs: 500,
  storm: {
    messages: 300,
    seconds: 3,
    workers: 2,
    leaseMs: 2000,
    batchSize: 20,
    maxRetries: 5,
    killEveryMs: [700, 1500],
    minKills: 3,
    // Fewer kills than a retry budget of 5 can count: none of its messages can be failed as WorkerDiedError.
    maxKills: 5,
    deadlineMs: 90_000
  },
  kafka: {
    messages: 300,
    seconds: 3,
    keys: 20,
    partitions: 3,
    forwarders: 1,
    brokerKills: 1,
    consumers: 2,
    sessionTimeoutMs: 3000,
    killEveryMs: [300, 800],
    minKills: 2,
    batchSize: 20,
    deadlineMs: 90_000
  },
  // A bound on the drain for a machine that also runs the other scenarios and test files: the storm kills only
  // workers that are up, so the queue drains; the bound only ends a run that would not.
  deadlineMs: 90_000
}

/**
 * The scenarios that stop or restart their server get one each, and so does the `pg_terminate_backend` storm:
 * scenarios beside it on a shared server failed to connect with 57P01 ("terminating connection due to
 * administrator command"), what its kills send. The others share one (PostgreSQL's or MariaDB's).
 */
const ownServer = new Set(["restart", "outage", "terminate", "mariadb-restart"])
const servers = new Map<string, ChaosServer>()
let broker: RunningBroker | undefined
let kafka: RunningKafka | undefined
beforeAll(async () => {
  const names = ["shared", "mariadb-shared", ...ownServer]
  const start = (name: string) => name.startsWith("mariadb") ? startMariadbServer() : startServer()
  const [started, node, kafkaBroker] = await Promise.all([
    Promise.all(names.map(start)),
    startBroker(),
    startKafka()
  ])
  names.forEach((name, i) => servers.set(name, started[i]!))
  broker = node
  kafka = kafkaBroker
}, 180_000)
afterAll(async () => {
  await Promise.all([...[...servers.values()].map((s) => s.destroy()), broker?.destroy(), kafka?.destroy()])
}, 60_000)

/** The test run's broker, which no scenario may kill. */
const sharedKafka = (): KafkaBroker => ({
  bootstrap: kafkaBootstrap(),
  kill: () => Promise.reject(new Error("the test run's Kafka broker is not to be killed")),
  start: () => Promise.reject(new Error("the test run's Kafka broker is not to be restarted"))
})

const environment = (scenario: string): Environment => ({
  server: servers.get(
    ownServer.has(scenario) ? scenario : scenario.startsWith("mariadb") ? "mariadb-shared" : "shared"
  )!,
  broker,
  kafka: scenario === "kafka-broker-kill" ? kafka : sharedKafka(),
  sizes,
  seed: 15,
  log: () => {}
})

/** The observations of the scenarios run so far, for the self-test. */
const observed: Array<Observation> = []

// The longest first: vitest runs at most five tests of a file at once.
const longestFirst = [...scenarios].sort((a, b) =>
  Number(b.needsBroker || b.needsKafka === true) - Number(a.needsBroker || a.needsKafka === true)
)

describe.concurrent("chaos scenarios, small", () => {
  for (const scenario of longestFirst) {
    // Concurrent tests assert with their own context's `expect`.
    it.live(scenario.title, ({ expect }) =>
      Effect.gen(function*() {
        const observation = yield* scenario.run(environment(scenario.name))
        observed.push(observation)
        const result = evaluate(observation)
        const failed = result.checks.filter((c) => !c.ok).map((c) => c.name)
        expect(failed, observation.notes.join("\n")).toEqual([])
        // The fault did happen (a kill, a restart, a storm round, an outage, a broker stop, the hostile rows).
        expect(observation.faults).toBeGreaterThanOrEqual(
          scenario.name === "sigkill" ? 2 : scenario.name === "sigkill-storm" ? sizes.storm.minKills : 1
        )
        expect(result.counts.committed).toBeGreaterThan(0)
        expect(result.counts.rolledBack).toBeGreaterThan(0)
      }), 180_000)
  }
})

describe("chaos checks", () => {
  it("the self-test: each corruption of a copy of a real result fails its check", () => {
    expect(observed.length).toBeGreaterThan(0)
    const cases = observed.flatMap(selfTest)
    expect(cases.filter((c) => c.outcome === "missed")).toEqual([])
    expect(selfTestOk(cases)).toBe(true)
  })

  it("the self-test on a synthetic result: every corruption caught, the result itself passes", () => {
    const observation = syntheticObservation()
    expect(evaluate(observation).ok).toBe(true)
    expect(selfTest(observation).map((c) => c.outcome)).toEqual(Array(8).fill("caught"))
  })
})
