/**
 * The chaos scenarios. Each runs on a fresh database: worker processes consume while producers dispatch, a fault is
 * injected, the queue must drain, and the end state is read back as an `Observation` (see `checks.ts`).
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type { RunningBroker } from "../test/support/rabbitmq.js"
import type { KeyOrder, Observation } from "./checks.js"
import type { DialectName } from "./dialects.js"
import {
  allEffectsWritten,
  brokerQueueDepth,
  createDatabase,
  type Fleet,
  fleet,
  type InsertedHostile,
  observe,
  prepare,
  produce,
  query,
  queueEmpty,
  type Random,
  random,
  waitUntil
} from "./harness.js"
import * as Hostile from "./hostile.js"
import { groupReport, groupState, readTopic, type TopicRecord } from "./kafka.js"
import { type KafkaConfig, monitorApplicationName, type Role, type WorkerConfig } from "./model.js"
import type { ChaosServer } from "./postgres.js"

/** The sizes and timings of a run (`npm run chaos -- --help` names the options). */
export interface Sizes {
  /** Business transactions per scenario. */
  readonly messages: number
  /** Production is spread over this many seconds (the faults land while it runs). */
  readonly seconds: number
  readonly workers: number
  readonly producers: number
  readonly rollbackShare: number
  readonly batchSize: number
  readonly concurrency: number
  /** How long each consumer's effect works inside its transaction, in ms (the outage scenario's four times as long). */
  readonly workMs: number
  /** The lease (`redeliverTimeout`) of the workers, in ms. */
  readonly leaseMs: number
  /** SIGKILL storm: the pause before each kill, in ms, uniform in [min, max]. */
  readonly killEveryMs: readonly [number, number]
  /** Server restarts: this many in each mode (fast, immediate), spread over the production. */
  readonly restartsPerMode: number
  /** `pg_terminate_backend` storm: the pause between two rounds, in ms. */
  readonly terminateEveryMs: readonly [number, number]
  /** Outage: the workers' `settleTimeout`, in ms; the server stays down twice as long. */
  readonly settleTimeoutMs: number
  /** Broker stops (SIGTERM, down for `brokerDownMs`, started again) spread over the production. */
  readonly brokerStops: number
  readonly brokerDownMs: number
  /** How long after the production the queue may take to drain before the scenario gives up, in ms. */
  readonly deadlineMs: number
  /** The `sigkill-storm` scenario's own sizes (its other sizes are the run's). */
  readonly storm: StormSizes
  /** The Kafka scenarios' own sizes (their other sizes are the run's). */
  readonly kafka: KafkaSizes
}

/**
 * The Kafka scenarios: `messages` transactions over `seconds`, each message with one of `keys` ordering keys, into a
 * topic of `partitions` partitions. `kafka-broker-kill`: `forwarders` forwarder processes while the broker is
 * SIGKILLed and started again `brokerKills` times. `kafka-consumer-kill`: one forwarder and `consumers` consumer
 * processes of one group (session timeout `sessionTimeoutMs`), killed in pairs — one, then another while the group
 * rebalances to let the first one's replacement in — every `killEveryMs`, while the production runs and until
 * `minKills` kills; then the queue must drain within `deadlineMs`.
 */
export interface KafkaSizes {
  readonly messages: number
  readonly seconds: number
  readonly keys: number
  readonly partitions: number
  readonly forwarders: number
  readonly brokerKills: number
  readonly consumers: number
  readonly sessionTimeoutMs: number
  readonly killEveryMs: readonly [number, number]
  readonly minKills: number
  readonly batchSize: number
  readonly deadlineMs: number
}

/**
 * The SIGKILL storm of `sigkill-storm`: `workers` workers (lease `leaseMs`, batch `batchSize`, a retry budget of
 * `maxRetries`) killed every `killEveryMs` while `messages` transactions are produced over `seconds`, at least
 * `minKills` times; then the queue must drain within `deadlineMs`.
 */
export interface StormSizes {
  readonly messages: number
  readonly seconds: number
  readonly workers: number
  readonly leaseMs: number
  readonly batchSize: number
  readonly maxRetries: number
  readonly killEveryMs: readonly [number, number]
  readonly minKills: number
  /** At most this many kills, production over or not (the small storm of the tests stays below the retry budget). */
  readonly maxKills?: number
  readonly deadlineMs: number
}

/** The sizes of `npm run chaos` (about 5 minutes on 2 cores). */
export const fullSizes: Sizes = {
  messages: 3000,
  seconds: 15,
  workers: 3,
  producers: 4,
  rollbackShare: 0.1,
  batchSize: 20,
  concurrency: 4,
  workMs: 10,
  leaseMs: 3000,
  killEveryMs: [1000, 2500],
  restartsPerMode: 2,
  terminateEveryMs: [200, 800],
  settleTimeoutMs: 2000,
  brokerStops: 2,
  brokerDownMs: 2000,
  deadlineMs: 60_000,
  // As hard as the storm an outside run found innocent messages failed in: 4 workers SIGKILLed 51 times over
  // 18 000 committed messages, lease 2.5 s, batch 50, 5 retries. Here 23 000 transactions (20 700 committed).
  storm: {
    messages: 23_000,
    seconds: 60,
    workers: 4,
    leaseMs: 2500,
    batchSize: 50,
    maxRetries: 5,
    killEveryMs: [500, 1500],
    minKills: 50,
    deadlineMs: 180_000
  },
  // 23 000 transactions: 20 700 committed keyed messages.
  kafka: {
    messages: 23_000,
    seconds: 60,
    keys: 200,
    partitions: 6,
    forwarders: 2,
    brokerKills: 2,
    consumers: 3,
    sessionTimeoutMs: 6000,
    killEveryMs: [1000, 3000],
    minKills: 6,
    batchSize: 50,
    deadlineMs: 180_000
  }
}

/** A Kafka broker a scenario may kill and start again (the run's own). */
export interface KafkaBroker {
  /** `host:port` of its PLAINTEXT listener. */
  readonly bootstrap: string
  /** SIGKILLs it; resolves when the process is gone. */
  readonly kill: () => Promise<void>
  /** Starts it again on the same ports and data; resolves when it is ready. */
  readonly start: () => Promise<void>
}

/** What a scenario runs against. */
export interface Environment {
  readonly server: ChaosServer
  /** The run's own RabbitMQ node (the broker scenario stops and starts it). */
  readonly broker?: RunningBroker | undefined
  /** The run's own Kafka broker (`kafka-broker-kill` kills and starts it). */
  readonly kafka?: KafkaBroker | undefined
  readonly sizes: Sizes
  readonly seed: number
  readonly log: (line: string) => void
}

/**
 * A scenario: its name (for `--scenarios`), a line saying what it does, the server it runs on (`Environment.server`
 * is that one), whether it needs the broker.
 */
export interface Scenario {
  readonly name: string
  readonly title: string
  readonly server: DialectName
  readonly needsBroker: boolean
  /** It needs a Kafka broker (`Environment.kafka`). */
  readonly needsKafka?: boolean
  readonly run: (env: Environment) => Effect.Effect<Observation, unknown>
}

/** What a scenario's fault gets to work with. */
interface FaultContext {
  readonly env: Environment
  readonly url: string
  readonly fleet: Fleet
  readonly rng: Random
  /** Facts for the details list. */
  readonly notes: Array<string>
  /** Counts one fault injected. */
  readonly injected: () => void
  /** Resolves when the production is over. */
  readonly produced: Effect.Effect<void>
  /** Epoch ms of the production's start. */
  readonly started: number
  /** The Kafka transport of the scenario's workers, when it has one. */
  readonly kafka: KafkaConfig | undefined
}

interface ScenarioSpec {
  readonly name: string
  /** The scenario's sizes, when not the run's. */
  readonly sizes?: (sizes: Sizes) => Sizes
  /** The workers' retry budget, when not the default policy's (`model.ts`). */
  readonly maxRetries?: (sizes: Sizes) => number
  /** The faults the scenario injects at least: it goes on until then, drained or not (a check says it did). */
  readonly minFaults?: (sizes: Sizes) => number
  readonly workers: (sizes: Sizes) => ReadonlyArray<Role>
  readonly broker?: boolean
  readonly settleTimeoutMs?: (sizes: Sizes) => number
  /** The consumers' work per message (default `sizes.workMs`). */
  readonly workMs?: (sizes: Sizes) => number
  /** Runs beside the production; interrupted once the queue drained. */
  readonly fault: (ctx: FaultContext) => Effect.Effect<void, unknown>
  readonly hostile?: boolean
  /**
   * A Kafka scenario: messages get ordering keys and the workers a Kafka transport `kafka`. `forward`: the topic is
   * the far end (its records are the effects, its duplicates the duplicate deliveries); `consume`: consumers handle
   * it, and their effects must follow its order.
   */
  readonly kafka?: "forward" | "consume"
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

/** Sleeps until `at` (epoch ms). */
const sleepUntil = (at: number) => Effect.suspend(() => Effect.sleep(Math.max(0, at - Date.now())))

/** The moments (epoch ms) that split the production into `count + 1` equal parts. */
const spread = (ctx: FaultContext, count: number) =>
  Array.from({ length: count }, (_, i) => ctx.started + ((i + 1) * ctx.env.sizes.seconds * 1000) / (count + 1))

/** Times an effect, in ms. */
const timed = <A, E>(self: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const t0 = Date.now()
    yield* self
    return Date.now() - t0
  })

/** The skeleton every scenario shares. */
const scenario = (spec: ScenarioSpec) => (runEnv: Environment): Effect.Effect<Observation, unknown> =>
  Effect.gen(function*() {
    const sizes = spec.sizes?.(runEnv.sizes) ?? runEnv.sizes
    const env: Environment = { ...runEnv, sizes }
    const minFaults = spec.minFaults?.(sizes)
    const maxRetries = spec.maxRetries?.(sizes)
    // Each scenario's own stream of the seed, whatever ran before it.
    const rng = random([...spec.name].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619), env.seed))
    if (spec.broker === true && env.broker === undefined) {
      return yield* Effect.dieMessage(`the ${spec.name} scenario needs a RabbitMQ node`)
    }
    if (spec.kafka !== undefined && env.kafka === undefined) {
      return yield* Effect.dieMessage(`the ${spec.name} scenario needs a Kafka broker`)
    }
    const t0 = Date.now()
    const url = yield* createDatabase(env.server.adminUrl, spec.name)
    const amqp = spec.broker === true && env.broker !== undefined
      ? {
        url: env.broker.url,
        exchange: `chaos-${spec.name}-${process.pid}`,
        queue: `chaos.${spec.name}.${process.pid}`
      }
      : undefined
    const kafka: KafkaConfig | undefined = spec.kafka !== undefined && env.kafka !== undefined
      ? {
        bootstrap: env.kafka.bootstrap,
        topic: `chaos-${spec.name}-${process.pid}-${t0}`,
        partitions: sizes.kafka.partitions,
        groupId: `chaos-${spec.name}-${process.pid}-${t0}`,
        sessionTimeoutMs: sizes.kafka.sessionTimeoutMs
      }
      : undefined
    const base = {
      url,
      leaseMs: sizes.leaseMs,
      ...(amqp === undefined ? {} : { amqp }),
      ...(kafka === undefined ? {} : { kafka })
    }
    yield* prepare(url, base)
    const settle = spec.settleTimeoutMs?.(sizes)
    const configs = spec.workers(sizes).map((role): WorkerConfig => ({
      ...base,
      role,
      batchSize: sizes.batchSize,
      concurrency: sizes.concurrency,
      workMs: spec.workMs?.(sizes) ?? sizes.workMs,
      ...(settle === undefined ? {} : { settleTimeoutMs: settle }),
      ...(maxRetries === undefined ? {} : { maxRetries })
    }))
    const notes: Array<string> = []
    const hostile: Array<InsertedHostile> = []
    const specs = spec.hostile === true ? Hostile.specs() : []
    // Hostile rows go in among the valid ones: one after every `every`-th committed transaction.
    const every = Math.max(1, Math.floor((sizes.messages * (1 - sizes.rollbackShare)) / (specs.length + 1)))
    let commits = 0
    const onCommit = () =>
      Effect.suspend(() =>
        ++commits % every === 0 && hostile.length < specs.length
          ? Effect.map(Hostile.insert(url, specs[hostile.length]!), (row) => void hostile.push(row))
          : Effect.void
      ).pipe(Effect.orDie)

    let started = 0
    let faults = 0
    const injected = () => void faults++
    const { drainedAt, phases, production, workerExits } = yield* Effect.gen(function*() {
      const prepared = Date.now()
      const workers = yield* fleet(configs)
      yield* workers.ready
      started = Date.now()
      env.log(`chaos ${spec.name}: ${configs.length} workers up, producing`)
      const producers = yield* Effect.fork(
        produce(url, sizes.leaseMs, {
          messages: sizes.messages,
          seconds: sizes.seconds,
          producers: sizes.producers,
          rollbackShare: sizes.rollbackShare,
          ...(specs.length > 0 ? { onCommit } : {}),
          ...(kafka === undefined ? {} : { keys: sizes.kafka.keys })
        })
      )
      const produced = Effect.asVoid(Fiber.await(producers))
      const fault = yield* Effect.fork(
        spec.fault({ env, url, fleet: workers, rng, notes, injected, produced, started, kafka })
      )
      const production = yield* Fiber.join(producers)
      const producedAt = Date.now()
      env.log(`chaos ${spec.name}: produced, waiting for the queue to drain`)
      // Rows the production did not get to interleave go in now.
      for (const rest of specs.slice(hostile.length)) hostile.push(yield* Hostile.insert(url, rest))
      const drained = Effect.zipWith(
        queueEmpty(url),
        spec.kafka === "consume"
          ? allEffectsWritten(url)
          : amqp === undefined
          ? Effect.succeed(true)
          : Effect.zipWith(
            brokerQueueDepth(amqp.url, amqp.queue),
            allEffectsWritten(url),
            (depth, written) => depth === 0 && written
          ),
        (a, b) => a && b
      )
      // A storm that asks for a number of faults goes on until it has injected them, drained or not.
      const drainedAndDone = minFaults === undefined
        ? drained
        : Effect.map(drained, (empty) => empty && faults >= minFaults)
      const drainedAt = yield* waitUntil(drainedAndDone, Date.now() + sizes.deadlineMs)
      // The fault stops here; one under way (a server being started again) finishes first.
      const faultExit = yield* Fiber.interrupt(fault)
      if (Exit.isFailure(faultExit) && !Cause.isInterruptedOnly(faultExit.cause)) {
        notes.push(`the fault injection failed: ${Cause.pretty(faultExit.cause)}`)
      }
      const { stats } = workers
      notes.push(
        `workers: ${stats.started} processes started, ${stats.kills} SIGKILLed, ${stats.unexpectedExits} exited on ` +
          `their own`,
        `worker logs: ${stats.storageFailures} loop restarts after a storage failure, ${stats.retries} retries after ` +
          `a handler failure, ${stats.settleGaveUp} acks or releases given up after settleTimeout`,
        ...workers.deaths
      )
      if (drainedAt === undefined) notes.push(`not drained ${seconds(sizes.deadlineMs)} after the production`)
      if (drainedAt === undefined && spec.kafka === "consume" && kafka !== undefined) {
        notes.push(yield* Effect.promise(() => groupReport(kafka.bootstrap, kafka.groupId, kafka.topic)))
      }
      const phases = [
        `database ${seconds(prepared - t0)}`,
        `workers up ${seconds(started - prepared)}`,
        `production ${seconds(producedAt - started)}`,
        `drain ${drainedAt === undefined ? "never" : seconds(drainedAt - producedAt)}`
      ]
      return { drainedAt, production, workerExits: workers.stats.unexpectedExits, phases }
    }).pipe(Effect.scoped) // the workers are stopped before the database is read back
    const stopped = Date.now()
    const observed = yield* observe(url, {
      scenario: spec.name,
      production,
      hostile,
      faults: faults + hostile.length,
      minFaults,
      workerExits,
      drainMs: drainedAt === undefined ? undefined : drainedAt - started,
      notes
    })
    const observation = kafka === undefined || spec.kafka === undefined
      ? observed
      : yield* withKafkaOrder(url, kafka, spec.kafka, observed)
    const timing = `time: ${
      [
        ...phases,
        `workers stopped ${seconds(stopped - (drainedAt ?? stopped))}`,
        `read back ${seconds(Date.now() - stopped)}`
      ].join(", ")
    }`
    return { ...observation, notes: [...observation.notes, timing] }
  })

const consumers = (sizes: Sizes) => Array.from({ length: sizes.workers }, () => "consumer" as const)

/** Each key's message ids in the order of `records`, each at its first occurrence. */
const firstOccurrences = (records: ReadonlyArray<{ readonly key: string; readonly id: string }>) => {
  const seen = new Set<string>()
  const byKey: Record<string, Array<string>> = {}
  for (const { id, key } of records) {
    if (seen.has(id)) continue
    seen.add(id)
    ;(byKey[key] ??= []).push(id)
  }
  return byKey
}

/**
 * Adds the topic's per-key order to an observation. `forward`: the expected order is each key's commit order in
 * PostgreSQL (`chaos_orders.seq`), the actual one the topic's (offset order, an id at its first record); the topic's
 * distinct ids become the effects and its records the deliveries. `consume`: the expected order is the topic's, the
 * actual one that of the consumer's effects (their insertion order, `chaos_effects.id`).
 */
const withKafkaOrder = (url: string, kafka: KafkaConfig, mode: "forward" | "consume", observation: Observation) =>
  Effect.gen(function*() {
    const records: ReadonlyArray<TopicRecord> = yield* Effect.tryPromise(() => readTopic(kafka.bootstrap, kafka.topic))
    const placed: Record<string, Array<number>> = {}
    for (const { key, partition } of records) {
      const list = (placed[key] ??= [])
      if (!list.includes(partition)) list.push(partition)
    }
    const inKafka = firstOccurrences(records)
    const distinct = new Set(records.map((r) => r.id))
    const base = { partitions: kafka.partitions, placed, records: records.length, distinct: distinct.size }
    if (mode === "forward") {
      const committed = yield* query<{ id: string; key: string }>(
        url,
        `SELECT message_id::text AS id, ordering_key AS key FROM chaos_orders ORDER BY ordering_key, seq`
      )
      const order: KeyOrder = {
        expectedIs: "commit order in PostgreSQL",
        actualIs: "offset order in Kafka",
        expected: firstOccurrences(committed),
        actual: inKafka,
        ...base
      }
      return {
        ...observation,
        // The consumer's invocation count means nothing here: no consumer runs.
        notes: observation.notes.filter((note) => !note.startsWith("handler invocations:")),
        effects: [...distinct],
        deliveries: { total: records.length, messages: distinct.size },
        order
      }
    }
    const effects = yield* query<{ id: string; key: string }>(
      url,
      `SELECT e.message_id::text AS id, o.ordering_key AS key FROM chaos_effects e
       JOIN chaos_orders o ON o.message_id = e.message_id ORDER BY e.id`
    )
    const order: KeyOrder = {
      expectedIs: "offset order in Kafka",
      actualIs: "the consumer's effects",
      expected: inKafka,
      actual: firstOccurrences(effects),
      ...base
    }
    return { ...observation, order }
  })

/** The sizes of the Kafka scenarios: the run's, with theirs. */
const kafkaSizes = (sizes: Sizes): Sizes => ({
  ...sizes,
  messages: sizes.kafka.messages,
  seconds: sizes.kafka.seconds,
  batchSize: sizes.kafka.batchSize,
  deadlineMs: sizes.kafka.deadlineMs
})

/** The broker SIGKILLed and started again `brokerKills` times, spread over the production. */
const brokerKills = (ctx: FaultContext) =>
  Effect.gen(function*() {
    const broker = ctx.env.kafka!
    for (const at of spread(ctx, ctx.env.sizes.kafka.brokerKills)) {
      yield* sleepUntil(at)
      const killedAt = Date.now()
      const ms = yield* timed(Effect.promise(async () => {
        await broker.kill()
        await broker.start()
      })).pipe(Effect.uninterruptible)
      ctx.injected()
      ctx.notes.push(
        `broker SIGKILLed ${seconds(killedAt - ctx.started)} into the production and started again: down ${seconds(ms)}`
      )
    }
  })

/** Whether a group state (as the broker spells it: `PreparingRebalance`, `PREPARINGREBALANCE`…) is a rebalance. */
const rebalancing = (state: string) => /^(preparing|completing)rebalance$/i.test(state)

/**
 * Consumers killed in pairs while the production runs, and on until `minKills` kills: one is SIGKILLed and started
 * again; once its replacement is up (it joins the group at its first claim), a second one is SIGKILLed as soon as the
 * group is seen rebalancing (up to 10 s), and started again. The queue then drains without kills.
 */
const consumerKills = (ctx: FaultContext) =>
  Effect.gen(function*() {
    const { kafka } = ctx.env.sizes
    const group = ctx.kafka!
    let produced = false
    yield* Effect.fork(Effect.zipRight(ctx.produced, Effect.sync(() => void (produced = true))))
    const t0 = Date.now()
    let kills = 0
    let duringRebalance = 0
    const states = new Map<string, number>()
    while (!produced || kills < kafka.minKills) {
      yield* Effect.sleep(ctx.rng.between(...kafka.killEveryMs))
      const first = yield* ctx.fleet.kill(ctx.rng, { role: "kafka-consumer" })
      if (first === undefined) continue
      kills++
      ctx.injected()
      yield* ctx.fleet.up(first)
      const deadline = Date.now() + 10_000
      let state = "unknown"
      while (Date.now() < deadline) {
        state = yield* Effect.promise(() => groupState(group.bootstrap, group.groupId))
        if (rebalancing(state)) break
        yield* Effect.sleep("50 millis")
      }
      const second = yield* ctx.fleet.kill(ctx.rng, { role: "kafka-consumer", except: first })
      if (second === undefined) continue
      kills++
      ctx.injected()
      states.set(state, (states.get(state) ?? 0) + 1)
      if (rebalancing(state)) duringRebalance++
    }
    ctx.notes.push(
      `consumers: ${kills} SIGKILLs in ${seconds(Date.now() - t0)}; ${duringRebalance} second kills of a pair while ` +
        `the group rebalanced (group state at those kills: ${
          [...states].map(([state, n]) => `${state} ${n}`).join(", ")
        })`
    )
  })

/** Kills every backend of the scenario's database but the chaos program's own probes; returns how many. */
const terminateBackends = (url: string) =>
  query<{ application_name: string }>(
    url,
    `SELECT application_name FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
       AND application_name <> $1 AND pg_terminate_backend(pid)`,
    [monitorApplicationName]
  )

/**
 * Workers killed at random (SIGKILL) and started again while the production runs; the queue then drains without
 * kills. Kills until the drain would test how fast workers outlive a machine's load, not what they keep or lose.
 */
const killStorm = (ctx: FaultContext) =>
  Effect.gen(function*() {
    let produced = false
    yield* Effect.fork(Effect.zipRight(ctx.produced, Effect.sync(() => void (produced = true))))
    while (!produced) {
      yield* Effect.sleep(ctx.rng.between(...ctx.env.sizes.killEveryMs))
      if (yield* ctx.fleet.killOne(ctx.rng)) ctx.injected()
    }
  })

/** The server restarted in each mode (`fast`: a clean shutdown; `immediate`: a crash), spread over the production. */
const serverRestarts = (ctx: FaultContext) =>
  Effect.gen(function*() {
    const modes = Array.from({ length: ctx.env.sizes.restartsPerMode * 2 }, (_, i) =>
      i % 2 === 0 ? "fast" as const : "immediate" as const)
    const at = spread(ctx, modes.length)
    for (const [i, mode] of modes.entries()) {
      yield* sleepUntil(at[i]!)
      const ms = yield* timed(Effect.promise(() =>
        ctx.env.server.restart(mode)
      )).pipe(Effect.uninterruptible)
      ctx.injected()
      ctx.notes.push(`restart -m ${mode}: server back after ${seconds(ms)}`)
    }
  })

/** The sizes of the SIGKILL storm: the run's, with the storm's own. */
const stormSizes = (sizes: Sizes): Sizes => ({
  ...sizes,
  messages: sizes.storm.messages,
  seconds: sizes.storm.seconds,
  workers: sizes.storm.workers,
  leaseMs: sizes.storm.leaseMs,
  batchSize: sizes.storm.batchSize,
  killEveryMs: sizes.storm.killEveryMs,
  deadlineMs: sizes.storm.deadlineMs
})

/**
 * Workers killed at random (SIGKILL) and started again while the production runs, and on until `minKills` kills; the
 * queue then drains without kills (a storm that outlasts the production only kills workers while they catch up).
 */
const hardStorm = (ctx: FaultContext) =>
  Effect.gen(function*() {
    const { storm } = ctx.env.sizes
    ctx.notes.push(
      `storm: ${storm.workers} workers, lease ${seconds(storm.leaseMs)}, batch ${storm.batchSize}, ` +
        `${storm.maxRetries} retries, a kill every ${storm.killEveryMs[0]}–${storm.killEveryMs[1]} ms, ` +
        `${storm.messages} transactions over ${storm.seconds} s, at least ${storm.minKills} kills`
    )
    let produced = false
    yield* Effect.fork(Effect.zipRight(ctx.produced, Effect.sync(() => void (produced = true))))
    const t0 = Date.now()
    let kills = 0
    while ((!produced || kills < storm.minKills) && kills < (storm.maxKills ?? Infinity)) {
      yield* Effect.sleep(ctx.rng.between(...storm.killEveryMs))
      if (yield* ctx.fleet.killOne(ctx.rng)) {
        kills++
        ctx.injected()
      }
    }
    ctx.notes.push(`storm: ${kills} kills in ${seconds(Date.now() - t0)}`)
  })

/** The scenarios, in the order they run. */
export const scenarios: ReadonlyArray<Scenario> = [
  {
    name: "sigkill",
    title: "SIGKILL storm: workers killed at random and restarted while the production runs",
    server: "postgres",
    needsBroker: false,
    run: scenario({ name: "sigkill", workers: consumers, fault: killStorm })
  },
  {
    name: "sigkill-storm",
    title: "SIGKILL storm, hard: 4 workers (lease 2.5 s, batch 50, 5 retries) killed ≥ 50 times over ≥ 20 000 " +
      "messages; no message whose handler never started may end in the failure queue",
    server: "postgres",
    needsBroker: false,
    run: scenario({
      name: "sigkill-storm",
      sizes: stormSizes,
      maxRetries: (sizes) => sizes.storm.maxRetries,
      minFaults: (sizes) => sizes.storm.minKills,
      workers: consumers,
      fault: hardStorm
    })
  },
  {
    name: "restart",
    title: "Server restarts: pg_ctl restart -m fast and -m immediate while workers and producers run",
    server: "postgres",
    needsBroker: false,
    run: scenario({ name: "restart", workers: consumers, fault: serverRestarts })
  },
  {
    name: "terminate",
    title: "pg_terminate_backend storm: every backend of the workers and producers killed, again and again",
    server: "postgres",
    needsBroker: false,
    run: scenario({
      name: "terminate",
      workers: consumers,
      fault: (ctx) =>
        Effect.gen(function*() {
          let rounds = 0
          let killed = 0
          let sessions = 0
          const storm = Effect.forever(Effect.gen(function*() {
            yield* Effect.sleep(ctx.rng.between(...ctx.env.sizes.terminateEveryMs))
            const rows = yield* terminateBackends(ctx.url).pipe(Effect.orElseSucceed(() => []))
            rounds++
            if (rows.length > 0) ctx.injected()
            killed += rows.length
            sessions += rows.filter((r) => r.application_name === "effect-outbox worker").length
          }))
          yield* Effect.raceFirst(storm, ctx.produced).pipe(
            Effect.ensuring(Effect.sync(() =>
              ctx.notes.push(
                `${rounds} rounds of pg_terminate_backend: ${killed} backends killed (${sessions} worker claim sessions)`
              )
            ))
          )
        })
    })
  },
  {
    name: "outage",
    title: "Outage longer than the write retry: the server stopped for twice the workers' settleTimeout",
    server: "postgres",
    needsBroker: false,
    run: scenario({
      name: "outage",
      workers: consumers,
      settleTimeoutMs: (sizes) => sizes.settleTimeoutMs,
      // Every worker is mid-batch when the server stops: its outcome writes are the ones that must give up.
      workMs: (sizes) => sizes.workMs * 4,
      fault: (ctx) =>
        Effect.gen(function*() {
          const down = ctx.env.sizes.settleTimeoutMs * 2
          yield* sleepUntil(spread(ctx, 2)[0]!)
          const ms = yield* timed(Effect.promise(async () => {
            await ctx.env.server.stop("fast")
            await new Promise((resolve) => setTimeout(resolve, down))
            await ctx.env.server.start()
          })).pipe(Effect.uninterruptible)
          ctx.injected()
          ctx.notes.push(
            `server stopped (-m fast) for ${seconds(down)}, back after ${seconds(ms)}; settleTimeout ` +
              `${seconds(ctx.env.sizes.settleTimeoutMs)}, lease ${seconds(ctx.env.sizes.leaseMs)}`
          )
        })
    })
  },
  {
    name: "broker",
    title: "Broker stopped mid-forwarding: outbox → Forwarder → RabbitMQ → idempotent consumer",
    server: "postgres",
    needsBroker: true,
    run: scenario({
      name: "broker",
      broker: true,
      workers: (sizes) => [
        ...Array.from({ length: Math.max(1, sizes.workers - 1) }, () => "forwarder" as const),
        "broker-consumer" as const
      ],
      fault: (ctx) =>
        Effect.gen(function*() {
          const broker = ctx.env.broker!
          for (const at of spread(ctx, ctx.env.sizes.brokerStops)) {
            yield* sleepUntil(at)
            const ms = yield* timed(Effect.promise(async () => {
              await broker.stop()
              await new Promise((resolve) => setTimeout(resolve, ctx.env.sizes.brokerDownMs))
              await broker.start()
            })).pipe(Effect.uninterruptible)
            ctx.injected()
            ctx.notes.push(`broker stopped (SIGTERM) and started again: down ${seconds(ms)}`)
          }
        })
    })
  },
  {
    name: "kafka-broker-kill",
    title: "Kafka broker SIGKILLed mid-forwarding: ≥ 20 000 keyed messages, outbox → Forwarder → Kafka; per-key " +
      "order in Kafka equal to commit order, Java's partitions",
    server: "postgres",
    needsBroker: false,
    needsKafka: true,
    run: scenario({
      name: "kafka-broker-kill",
      kafka: "forward",
      sizes: kafkaSizes,
      minFaults: (sizes) => sizes.kafka.brokerKills,
      workers: (sizes) => Array.from({ length: sizes.kafka.forwarders }, () => "kafka-forwarder" as const),
      fault: brokerKills
    })
  },
  {
    name: "kafka-consumer-kill",
    title: "Kafka consumers SIGKILLed during rebalances: ≥ 20 000 keyed records, one group of idempotent consumers; " +
      "effects exactly once, in each key's order in Kafka",
    server: "postgres",
    needsBroker: false,
    needsKafka: true,
    run: scenario({
      name: "kafka-consumer-kill",
      kafka: "consume",
      sizes: kafkaSizes,
      minFaults: (sizes) => sizes.kafka.minKills,
      workers: (sizes) => [
        "kafka-forwarder" as const,
        ...Array.from({ length: sizes.kafka.consumers }, () => "kafka-consumer" as const)
      ],
      fault: consumerKills
    })
  },
  {
    name: "hostile",
    title: "Hostile rows among valid ones: deep JSON, NUL, lone surrogates, 5 MB fields, infinities, overflows",
    server: "postgres",
    needsBroker: false,
    run: scenario({
      name: "hostile",
      workers: (sizes) => consumers({ ...sizes, workers: Math.min(2, sizes.workers) }),
      hostile: true,
      fault: () => Effect.void
    })
  },
  {
    name: "mariadb-sigkill",
    title: "SIGKILL storm on MariaDB: the MySQL transport's workers killed at random and restarted",
    server: "mariadb",
    needsBroker: false,
    run: scenario({ name: "mariadb-sigkill", workers: consumers, fault: killStorm })
  },
  {
    name: "mariadb-restart",
    title: "MariaDB restarts: mariadbd stopped (SIGTERM) and killed (SIGKILL), started again, while all runs",
    server: "mariadb",
    needsBroker: false,
    run: scenario({ name: "mariadb-restart", workers: consumers, fault: serverRestarts })
  }
]
