/**
 * Ordering keys across real worker processes (issue 19): 4 worker processes × concurrency 8 (batches of 50, with
 * prefetch, a 6 s lease) handle 20 000 messages on 200 keys while 8 producers commit them concurrently — several
 * holding the same key at once, so the commit order is the order the key's row lock let them through, not the
 * order they began or dispatched — the handler fails one message in seven once or twice before it succeeds, and
 * five times during the production a worker is SIGKILLed in the middle of a handler (and replaced).
 *
 * What is checked is read back from the database at the end, never taken from the workers: the file's own
 * PostgreSQL runs with `track_commit_timestamp`, every producer transaction records its messages with its
 * transaction id (so a key's commit order is the order of `pg_xact_commit_timestamp`), and the handler records each
 * start and end in its own autocommitted statements (a start is never lost to a SIGKILL). Once the queue drained:
 * - at least once: every committed message has started, and its last run succeeded;
 * - commit order: per key, the messages in the order their runs started — consecutive runs of one message
 *   (retries, redeliveries) collapsed — are exactly the key's commit order: a retried or redelivered message
 *   precedes every later message of its key;
 * - one at a time: per key, each run starts after the previous run ended; after a run whose worker was killed (it
 *   never ended), the next run is the same message again, started after the kill;
 * - the retries happened as the handler asked (exactly `failsFirst` failed runs per message), the failure queue is
 *   empty.
 * The checks themselves are shown to catch a violation: each is run again on a copy of the observation with one
 * corrupted (two messages' starts swapped, a start moved before its predecessor's end, a last success dropped).
 * The production plan and the choice of victims come from a seed, printed with the results (`ORDERING_SEED` replays
 * them; the timing is the machine's).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { type ChildProcess, spawn } from "node:child_process"
import { type Random, random } from "../chaos/harness.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Outbox from "../src/services/Outbox.js"
import { KeyedStep, recordingTables } from "./fixtures/ordered-worker.js"
import { createDatabase, ownServer, pgLayer, query } from "./support/database.js"

const sizes = {
  messages: 20_000,
  keys: 200,
  producers: 8,
  /** The production is paced over at least this long. */
  productionSeconds: 12,
  workers: 4,
  concurrency: 8,
  batchSize: 50,
  leaseMs: 6_000,
  /** SIGKILLs during the production, each at least this long (ms, uniform in [min, max]) after the one before. */
  maxKills: 5,
  killEveryMs: [1_000, 2_000] as const,
  /** How long the queue may take to drain once the production is over. */
  drainDeadlineMs: 180_000
}

/** Step n fails its first runs: twice for one in 17, once for one in 12 of the others. */
const failsFirst = (n: number) => (n % 17 === 0 ? 2 : n % 12 === 0 ? 1 : 0)

const table = "ordered_messages"
const fixture = "test/fixtures/ordered-worker.ts"

// ---------------------------------------------------------------------------------------------------
// Production

/** One producer transaction: its steps, dispatched in this order, and how long it holds each key it took. */
interface PlannedTransaction {
  readonly steps: ReadonlyArray<KeyedStep>
  readonly holdMs: number
}

/**
 * Transactions of 1 to 5 messages, until `messages`: the keys, `messages / keys` of each, shuffled, taken in turn (a
 * key may come twice in one transaction). A transaction dispatches its keys in ascending order: each dispatch takes
 * its key's row lock until the commit, and one order for all keeps two producers from waiting on each other in a
 * cycle.
 */
const plan = (rng: Random): ReadonlyArray<PlannedTransaction> => {
  const keys = Array.from({ length: sizes.messages }, (_, i) => i % sizes.keys)
  for (let i = keys.length - 1; i > 0; i--) {
    const j = rng.between(0, i)
    ;[keys[i], keys[j]] = [keys[j]!, keys[i]!]
  }
  const transactions: Array<PlannedTransaction> = []
  let n = 0
  while (n < sizes.messages) {
    const size = Math.min(rng.between(1, 5), sizes.messages - n)
    const steps = keys.slice(n, n + size).sort((a, b) => a - b).map((k) => {
      n++
      return new KeyedStep({ key: `k${k}`, n, failsFirst: failsFirst(n) })
    })
    transactions.push({ steps, holdMs: rng.between(0, 3) })
  }
  return transactions
}

/**
 * Runs the planned transactions, `producers` at a time, paced over `productionSeconds`: each dispatches its steps
 * with their keys, waits `holdMs` after each (holding the key's lock, so that other producers of the key queue up
 * behind it), and records its messages in `produced` with its transaction id; counts the commits in `progress`.
 */
const produce = (transactions: ReadonlyArray<PlannedTransaction>, progress: { committed: number }) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const start = Date.now()
    const slotMs = (sizes.productionSeconds * 1000) / transactions.length
    yield* Effect.forEach(transactions, (transaction, i) =>
      Effect.gen(function*() {
        const wait = start + i * slotMs - Date.now()
        if (wait > 0) yield* Effect.sleep(wait)
        yield* sql.withTransaction(Effect.gen(function*() {
          const ids: Array<string> = []
          for (const step of transaction.steps) {
            ids.push(yield* Outbox.dispatch(step, { orderingKey: step.key }))
            if (transaction.holdMs > 0) yield* Effect.sleep(transaction.holdMs)
          }
          yield* sql`INSERT INTO produced (message_id, ordering_key, position, fails_first, xid)
            SELECT id, k, p, f, pg_current_xact_id()
            FROM unnest(${ids}::uuid[], ${transaction.steps.map((s) => s.key)}::text[],
              ${ids.map((_, p) => p)}::int[], ${transaction.steps.map((s) => s.failsFirst)}::int[]) AS t(id, k, p, f)`
        }))
        progress.committed++
      }), { concurrency: sizes.producers, discard: true })
  })

// ---------------------------------------------------------------------------------------------------
// The worker processes

interface WorkerProcess {
  readonly child: ChildProcess
  /** It printed READY (its layers are built). */
  up: boolean
  /** Its exit was asked for (a SIGKILL of the killer, or the final stop). */
  expected: boolean
  /** The end of its output, for the report of an exit nobody asked for. */
  tail: string
  readonly ready: Promise<void>
  readonly exited: Promise<void>
}

/**
 * Starts `sizes.workers` processes of the fixture. `killOne` SIGKILLs one (after recording the kill) and starts
 * another in its place; the scope's end kills them all.
 */
const workerFleet = (url: string) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const running = new Set<WorkerProcess>()
    const unexpectedExits: Array<string> = []
    let stopping = false
    let started = 0

    const startOne = (): WorkerProcess => {
      const child = spawn(
        process.execPath,
        [
          "--import",
          "tsx",
          fixture,
          url,
          table,
          String(sizes.leaseMs),
          String(sizes.concurrency),
          String(sizes.batchSize)
        ],
        { stdio: ["pipe", "pipe", "pipe"] }
      )
      started++
      let markReady = () => {}
      let markFailed = (_: Error) => {}
      const ready = new Promise<void>((resolve, reject) => {
        markReady = resolve
        markFailed = reject
      })
      ready.catch(() => {}) // a replacement nobody waits for
      const worker: WorkerProcess = {
        child,
        up: false,
        expected: false,
        tail: "",
        ready,
        exited: new Promise<void>((resolve) =>
          child.once("exit", (code, signal) => {
            running.delete(worker)
            if (!worker.expected && !stopping) {
              unexpectedExits.push(`worker ${child.pid} exited (${code ?? signal}): ${worker.tail.slice(-2000)}`)
            }
            markFailed(new Error(`worker ${child.pid} exited (${code ?? signal}) before READY: ${worker.tail}`))
            resolve()
          })
        )
      }
      const keepTail = (chunk: string) => {
        worker.tail = (worker.tail + chunk).slice(-10_000)
      }
      let partial = ""
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        keepTail(chunk)
        const lines = (partial + chunk).split("\n")
        partial = lines.pop()!
        if (lines.includes("READY")) {
          worker.up = true
          markReady()
        }
      })
      child.stderr!.setEncoding("utf8").on("data", keepTail)
      child.stdin!.on("error", () => {})
      running.add(worker)
      return worker
    }

    const stopAll = Effect.promise(async () => {
      stopping = true
      await Promise.all([...running].map((worker) => {
        worker.expected = true
        worker.child.kill("SIGKILL")
        return worker.exited
      }))
    })

    const first = yield* Effect.acquireRelease(
      Effect.sync(() => Array.from({ length: sizes.workers }, startOne)),
      () => stopAll
    )
    yield* Effect.promise(() => Promise.all(first.map((w) => w.ready))).pipe(
      Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error("the workers did not start in 60 s") })
    )

    /**
     * SIGKILLs a worker that is up and in the middle of a long handler (a start 20 ms ago with no end yet), picked
     * at random — its kill recorded first — and starts another; `false`: none is. Any worker that is up once
     * `anyAfter` passed.
     */
    const killOne = (rng: Random, anyAfter: number) =>
      Effect.gen(function*() {
        const handling = new Set(
          // In a long run (the fixture's 200 ms steps): still in it when the SIGKILL lands.
          (yield* sql<{ pid: number }>`SELECT DISTINCT pid FROM starts s
            WHERE s.id > (SELECT max(id) - 1000 FROM starts)
              AND s.started_at < clock_timestamp() - interval '20 milliseconds'
              AND NOT EXISTS (SELECT 1 FROM ends e WHERE e.start_id = s.id)`).map((r) => r.pid)
        )
        const up = [...running].filter((w) =>
          w.up && !w.expected && (handling.has(w.child.pid!) || Date.now() > anyAfter)
        )
        if (up.length === 0) return false
        const victim = up[rng.between(0, up.length - 1)]!
        victim.expected = true
        yield* sql`INSERT INTO kills (pid) VALUES (${victim.child.pid!})`
        victim.child.kill("SIGKILL")
        yield* Effect.promise(() => victim.exited)
        startOne()
        return true
      }).pipe(Effect.orDie, Effect.uninterruptible)

    return { killOne, stopAll, unexpectedExits, started: () => started }
  })

// ---------------------------------------------------------------------------------------------------
// The observation and its checks

interface ProducedMessage {
  readonly messageId: string
  readonly key: string
  /** Its place among its transaction's dispatches. */
  readonly position: number
  readonly failsFirst: number
  readonly xid: string
  /** Its transaction's start and commit (`pg_xact_commit_timestamp`), in µs since the epoch. */
  readonly begunUs: number
  readonly committedUs: number
}

interface Run {
  readonly id: number
  readonly messageId: string
  readonly key: string
  readonly pid: number
  readonly startedUs: number
  /** `undefined`: the run never ended (its worker was killed in it). */
  readonly end: { readonly ok: boolean; readonly endedUs: number } | undefined
}

interface Observation {
  readonly produced: ReadonlyArray<ProducedMessage>
  /** In the order they started. */
  readonly runs: ReadonlyArray<Run>
  /** When each killed worker's kill was recorded (just before its SIGKILL), in µs, by pid. */
  readonly kills: ReadonlyMap<number, number>
}

const us = (column: string) => `(extract(epoch FROM ${column}) * 1000000)::float8`

const observe = async (url: string): Promise<Observation> => {
  const produced = await query<{
    message_id: string
    ordering_key: string
    position: number
    fails_first: number
    xid: string
    begun_us: number
    committed_us: number | null
  }>(
    url,
    `SELECT message_id, ordering_key, position, fails_first, xid::text AS xid, ${us("begun_at")} AS begun_us,
       ${us("pg_xact_commit_timestamp(xid::xid)")} AS committed_us
     FROM produced`
  )
  const runs = await query<{
    id: string
    message_id: string
    ordering_key: string
    pid: number
    started_us: number
    ok: boolean | null
    ended_us: number | null
  }>(
    url,
    `SELECT s.id, s.message_id, s.ordering_key, s.pid, ${us("s.started_at")} AS started_us, e.ok,
       ${us("e.ended_at")} AS ended_us
     FROM starts s LEFT JOIN ends e ON e.start_id = s.id ORDER BY s.started_at, s.id`
  )
  const kills = await query<{ pid: number; at_us: number }>(url, `SELECT pid, ${us("at")} AS at_us FROM kills`)
  return {
    produced: produced.map((r) => {
      if (r.committed_us === null) throw new Error(`no commit timestamp for ${r.xid}: is track_commit_timestamp on?`)
      return {
        messageId: r.message_id,
        key: r.ordering_key,
        position: r.position,
        failsFirst: r.fails_first,
        xid: r.xid,
        begunUs: r.begun_us,
        committedUs: r.committed_us
      }
    }),
    runs: runs.map((r) => ({
      id: Number(r.id),
      messageId: r.message_id,
      key: r.ordering_key,
      pid: r.pid,
      startedUs: r.started_us,
      end: r.ok === null ? undefined : { ok: r.ok, endedUs: r.ended_us! }
    })),
    kills: new Map(kills.map((k) => [k.pid, k.at_us]))
  }
}

const groupBy = <A>(items: Iterable<A>, keyOf: (a: A) => string): Map<string, Array<A>> => {
  const groups = new Map<string, Array<A>>()
  for (const item of items) {
    const key = keyOf(item)
    const group = groups.get(key)
    if (group === undefined) groups.set(key, [item])
    else group.push(item)
  }
  return groups
}

/** What each check found wrong (empty: it held). */
interface Violations {
  readonly atLeastOnce: Array<string>
  readonly commitOrder: Array<string>
  readonly oneAtATime: Array<string>
  readonly retries: Array<string>
}

const violations = (o: Observation): Violations => {
  const found: Violations = { atLeastOnce: [], commitOrder: [], oneAtATime: [], retries: [] }
  const producedById = new Map(o.produced.map((m) => [m.messageId, m]))
  const runsByMessage = groupBy(o.runs, (r) => r.messageId)

  for (const m of o.produced) {
    const runs = runsByMessage.get(m.messageId)
    const last = runs?.[runs.length - 1]
    if (last === undefined) found.atLeastOnce.push(`${m.key} ${m.messageId}: never started`)
    else if (last.end?.ok !== true) {
      found.atLeastOnce.push(`${m.key} ${m.messageId}: its last run (${last.id}) did not succeed`)
    }
    const failed = runs?.filter((r) => r.end?.ok === false).length ?? 0
    if (failed !== m.failsFirst) {
      found.retries.push(`${m.key} ${m.messageId}: ${failed} failed runs, the handler asked for ${m.failsFirst}`)
    }
  }
  for (const id of runsByMessage.keys()) {
    if (!producedById.has(id)) found.atLeastOnce.push(`${id}: started, never committed`)
  }

  const producedByKey = groupBy(o.produced, (m) => m.key)
  for (const [key, runs] of groupBy(o.runs, (r) => r.key)) {
    // The messages in the order they started, consecutive runs of one message collapsed.
    const started = runs.map((r) => r.messageId).filter((id, i, all) => i === 0 || all[i - 1] !== id)
    // The key's commit order: by commit timestamp, then place in the transaction. Transactions that committed in
    // the same microsecond may go either way: they are taken in the order the key started them.
    const firstStart = new Map<string, number>()
    started.forEach((id, i) => {
      const xid = producedById.get(id)?.xid
      if (xid !== undefined && !firstStart.has(xid)) firstStart.set(xid, i)
    })
    const committed = [...(producedByKey.get(key) ?? [])].sort((a, b) =>
      a.committedUs - b.committedUs ||
      (firstStart.get(a.xid) ?? Infinity) - (firstStart.get(b.xid) ?? Infinity) ||
      a.xid.localeCompare(b.xid) ||
      a.position - b.position
    ).map((m) => m.messageId)
    const at = started.findIndex((id, i) => committed[i] !== id)
    if (at >= 0 || started.length !== committed.length) {
      const i = at >= 0 ? at : Math.min(started.length, committed.length)
      found.commitOrder.push(
        `${key}: start ${i + 1} of ${started.length} is ${started[i] ?? "missing"}, commit order has ` +
          `${committed[i] ?? "nothing"} there (${committed.length} committed)`
      )
    }

    for (let i = 1; i < runs.length; i++) {
      const previous = runs[i - 1]!
      const run = runs[i]!
      if (previous.end !== undefined) {
        if (!(run.startedUs > previous.end.endedUs)) {
          found.oneAtATime.push(`${key}: run ${run.id} started before run ${previous.id} ended`)
        }
        continue
      }
      const killedUs = o.kills.get(previous.pid)
      if (killedUs === undefined) {
        found.oneAtATime.push(`${key}: run ${previous.id} never ended, and its worker ${previous.pid} was not killed`)
      } else if (!(run.startedUs > killedUs)) {
        found.oneAtATime.push(`${key}: run ${run.id} started while run ${previous.id}'s worker was alive`)
      }
      if (run.messageId !== previous.messageId) {
        found.oneAtATime.push(
          `${key}: after run ${previous.id} was cut short by a kill, run ${run.id} is of another message`
        )
      }
    }
  }
  return found
}

/** Each list cut to its first 10 entries and its length (what an assertion should print). */
const summary = (v: Violations) =>
  Object.fromEntries(
    Object.entries(v).map(([name, list]) => [name, list.length === 0 ? [] : [`${list.length}:`, ...list.slice(0, 10)]])
  )

const none = { atLeastOnce: [], commitOrder: [], oneAtATime: [], retries: [] }

/** What the run went through: kills, runs cut short, redeliveries, failures, producers that held a key at once. */
const exercised = (o: Observation) => {
  const runsByMessage = groupBy(o.runs, (r) => r.messageId)
  let sameKeyConcurrent = 0
  let beganFirstCommittedLater = 0
  for (const messages of groupBy(o.produced, (m) => m.key).values()) {
    const transactions = [...groupBy(messages, (m) => m.xid).values()].map((ms) => ms[0]!).sort((a, b) =>
      a.committedUs - b.committedUs
    )
    for (let i = 1; i < transactions.length; i++) {
      if (transactions[i]!.begunUs < transactions[i - 1]!.committedUs) sameKeyConcurrent++
      if (transactions[i]!.begunUs < transactions[i - 1]!.begunUs) beganFirstCommittedLater++
    }
  }
  return {
    kills: o.kills.size,
    runsCutShort: o.runs.filter((r) => r.end === undefined).length,
    redelivered: [...runsByMessage.values()].filter((runs) => runs.slice(0, -1).some((r) => r.end === undefined))
      .length,
    failedRuns: o.runs.filter((r) => r.end?.ok === false).length,
    sameKeyConcurrent,
    beganFirstCommittedLater
  }
}

/** Copies of the observation with one violation each, and the check that must catch it. */
const corruptions: ReadonlyArray<{
  readonly name: string
  readonly catches: keyof Violations
  readonly apply: (o: Observation) => Observation
}> = [
  {
    name: "two messages of a key start the other way round",
    catches: "commitOrder",
    apply: (o) => {
      // Two consecutive successful runs of a key, of two messages: each takes the other's message.
      const [a, b] = [...groupBy(o.runs, (r) => r.key).values()].flatMap((runs) =>
        runs.slice(1).map((run, i) => [runs[i]!, run] as const)
      ).find(([a, b]) => a.end?.ok === true && b.end?.ok === true && a.messageId !== b.messageId)!
      return {
        ...o,
        runs: o.runs.map((r) =>
          r.id === a.id ? { ...r, messageId: b.messageId } : r.id === b.id ? { ...r, messageId: a.messageId } : r
        )
      }
    }
  },
  {
    name: "a run starts before its key's previous run ended",
    catches: "oneAtATime",
    apply: (o) => {
      const byKey = groupBy(o.runs, (r) => r.key)
      const [first, second] = [...byKey.values()].find((runs) => runs.length > 1 && runs[0]!.end !== undefined)!
      return {
        ...o,
        runs: o.runs.map((r) => (r.id === second!.id ? { ...r, startedUs: first!.end!.endedUs - 1 } : r))
      }
    }
  },
  {
    name: "a message's last success is missing",
    catches: "atLeastOnce",
    apply: (o) => {
      const last = o.runs[o.runs.length - 1]!
      return { ...o, runs: o.runs.map((r) => (r.id === last.id ? { ...r, end: undefined } : r)) }
    }
  }
]

// ---------------------------------------------------------------------------------------------------

describe("ordering keys across worker processes", () => {
  const server = ownServer()
  let url = ""
  beforeAll(async () => {
    // Commit timestamps are how the test knows the commit order; the setting takes a restart.
    await query(server().url, "ALTER SYSTEM SET track_commit_timestamp = on")
    await server().restart()
    url = await createDatabase("ordered_processes", server().url)
  }, 60_000)

  it.live(
    "4 processes × concurrency 8, 20 000 messages on 200 keys, retries and SIGKILLs: in commit order, one at a time",
    () =>
      Effect.gen(function*() {
        const seed = Number(process.env.ORDERING_SEED ?? Math.floor(Math.random() * 2 ** 31))
        const rng = random(seed)
        const sql = yield* SqlClient.SqlClient
        expect(
          (yield* sql<{ setting: string }>`SELECT current_setting('track_commit_timestamp') AS setting`)[0]!.setting
        ).toBe("on")
        for (const statement of recordingTables) yield* sql.unsafe(statement)
        const transactions = plan(rng)

        const fleet = yield* workerFleet(url)
        const progress = { committed: 0 }
        const production = yield* Effect.fork(produce(transactions, progress))
        // The kills are spread over the production, however fast it goes: kill i once i / (maxKills + 1) of the
        // transactions committed, and 1–2 s after the one before.
        const killer = yield* Effect.fork(Effect.gen(function*() {
          for (let kill = 1; kill <= sizes.maxKills; kill++) {
            yield* Effect.sleep(rng.between(...sizes.killEveryMs))
            while (progress.committed < (kill * transactions.length) / (sizes.maxKills + 1)) yield* Effect.sleep(50)
            const anyAfter = Date.now() + 10_000
            while (!(yield* fleet.killOne(rng, anyAfter))) yield* Effect.sleep(50)
          }
        }))
        yield* Fiber.join(production)
        yield* Fiber.join(killer)

        // Drained: the main queue is empty (a message in the failure queue would hold its key for ever: stop there).
        const deadline = Date.now() + sizes.drainDeadlineMs
        let left = { queued: -1, failed: 0 }
        while (Date.now() < deadline) {
          left = (yield* sql<{ queued: number; failed: number }>`
            SELECT count(*) FILTER (WHERE queue_name = 'outbox')::int AS queued,
                   count(*) FILTER (WHERE queue_name = 'failed')::int AS failed
            FROM ${sql(table)}`)[0]!
          if (left.queued === 0 || left.failed > 0) break
          yield* Effect.sleep("250 millis")
        }
        yield* fleet.stopAll
        expect(left, `seed ${seed}`).toEqual({ queued: 0, failed: 0 })
        expect(fleet.unexpectedExits, `seed ${seed}`).toEqual([])

        const observation = yield* Effect.promise(() => observe(url))
        const ran = exercised(observation)
        console.log(
          `seed ${seed}: ${observation.produced.length} messages in ${transactions.length} transactions, ` +
            `${observation.runs.length} runs, ${fleet.started()} worker processes; ${JSON.stringify(ran)}`
        )
        expect(observation.produced.length).toBe(sizes.messages)
        expect(new Set(observation.produced.map((m) => m.key)).size).toBe(sizes.keys)
        expect(summary(violations(observation)), `seed ${seed}`).toEqual(none)

        // The run went through what it is there for.
        expect(ran.kills).toBe(sizes.maxKills)
        expect(ran.runsCutShort, `seed ${seed}`).toBeGreaterThan(0)
        expect(ran.redelivered, `seed ${seed}`).toBeGreaterThan(0)
        expect(ran.failedRuns).toBe(observation.produced.reduce((n, m) => n + m.failsFirst, 0))
        expect(ran.sameKeyConcurrent, `seed ${seed}`).toBeGreaterThan(0)
        expect(ran.beganFirstCommittedLater, `seed ${seed}`).toBeGreaterThan(0)

        // And the checks catch what they are there for.
        for (const corruption of corruptions) {
          const caught = violations(corruption.apply(structuredClone(observation)))
          expect(caught[corruption.catches].length, corruption.name).toBeGreaterThan(0)
        }
      }).pipe(
        Effect.scoped,
        Effect.provide(
          Outbox.layer().pipe(
            Layer.provideMerge(PgTransport.layer({ table, autoSetup: true })),
            Layer.provideMerge(Layer.suspend(() => pgLayer(url, sizes.producers + 4)))
          )
        ),
        Logger.withMinimumLogLevel(LogLevel.Warning)
      ),
    420_000
  )
})
