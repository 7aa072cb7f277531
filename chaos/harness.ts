/**
 * The pieces every scenario is built from: a fresh database, the fleet of worker processes (killed, restarted,
 * counted), the producers (business row and `Outbox.dispatch` in one transaction, a share rolled back on purpose),
 * the wait for the queue to drain, and the observation read back from the database at the end.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Amqp from "amqplib"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import pg from "pg"
import { root, tsNodeArgs } from "../bench/common.js"
import { IdempotencyStore } from "../src/services/IdempotencyStore.js"
import * as Outbox from "../src/services/Outbox.js"
import { TransportAdmin } from "../src/services/TransportAdmin.js"
import type { HostileRow, Observation } from "./checks.js"
import { dialectOf, mariadbBusinessTables, mysqlQuery } from "./dialects.js"
import {
  ChaosPaid,
  failedQueue,
  keyOf,
  monitorApplicationName,
  postgresBusinessTables,
  producerApplicationName,
  queue,
  type Role,
  table,
  type WorkerConfig
} from "./model.js"
import { database, idempotencyStore, transport } from "./stack.js"

// ---------------------------------------------------------------------------------------------------
// Randomness and small helpers

/** A seeded pseudo-random generator (mulberry32), so that a run's fault schedule can be replayed with `--seed`. */
export interface Random {
  /** Uniform in [0, 1). */
  readonly next: () => number
  /** Uniform integer in [min, max]. */
  readonly between: (min: number, max: number) => number
}

export const random = (seed: number): Random => {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return { next, between: (min, max) => min + Math.floor(next() * (max - min + 1)) }
}

/** Runs statements on a short-lived connection named as the chaos program's probe (spared by the faults). */
export const withClient = async <A>(url: string, f: (client: pg.Client) => Promise<A>): Promise<A> => {
  const client = new pg.Client({ connectionString: url, application_name: monitorApplicationName })
  client.on("error", () => {}) // the server going away under a probe fails its query instead
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end().catch(() => undefined)
  }
}

/** One query on a short-lived connection, in the SQL of the URL's dialect (MariaDB: `?` placeholders). */
export const query = <R extends Record<string, unknown>>(url: string, text: string, params: Array<unknown> = []) =>
  Effect.tryPromise(() =>
    dialectOf(url) === "mariadb"
      ? mysqlQuery<R>(url, text, params)
      : withClient(url, async (c) => (await c.query<R>(text, params)).rows)
  )

let databases = 0

/** Creates a fresh database for a scenario and returns its URL. */
export const createDatabase = (adminUrl: string, scenario: string) =>
  Effect.gen(function*() {
    const name = `chaos_${scenario.replace(/[^a-z0-9]/gi, "_").toLowerCase()}_${process.pid}_${++databases}`
    yield* query(
      adminUrl,
      dialectOf(adminUrl) === "mariadb" ? `CREATE DATABASE \`${name}\`` : `CREATE DATABASE "${name}"`
    )
    const url = new URL(adminUrl)
    url.pathname = `/${name}`
    return url.toString()
  })

/** Creates the business tables, the transport's table (and the broker's exchange and queue) and the store's. */
export const prepare = (url: string, config: Pick<WorkerConfig, "leaseMs" | "amqp" | "kafka">) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tables = dialectOf(url) === "mariadb" ? mariadbBusinessTables : postgresBusinessTables
    for (const statement of tables) yield* sql.unsafe(statement)
    yield* (yield* TransportAdmin).setup
    yield* (yield* IdempotencyStore).setup
  }).pipe(
    Effect.provide(
      Layer.mergeAll(transport({ ...config, url }), idempotencyStore(url)).pipe(
        Layer.provideMerge(database(url, monitorApplicationName, 2))
      )
    )
  )

// ---------------------------------------------------------------------------------------------------
// The fleet of worker processes

/** The worker processes of a scenario. */
export interface Fleet {
  /** SIGKILLs one worker that is up and starts it again; `false` when none was up. */
  readonly killOne: (rng: Random) => Effect.Effect<boolean>
  /**
   * SIGKILLs one worker of `role` that is up, other than the one of slot `except`, and starts it again; returns
   * its slot, `undefined` when none was up.
   */
  readonly kill: (
    rng: Random,
    options: { readonly role?: Role; readonly except?: number }
  ) => Effect.Effect<number | undefined>
  /** Until the current process of slot `index` is up (printed READY). */
  readonly up: (index: number) => Effect.Effect<void>
  /** Until every worker has built its layers (connected to the database). */
  readonly ready: Effect.Effect<void, Error>
  /**
   * Workers started (first ones and replacements), SIGKILLs sent, exits nobody asked for; and from the workers' logs:
   * loop restarts after a storage failure, retries after a handler failure, acks or releases given up after
   * `settleTimeout`.
   */
  readonly stats: {
    started: number
    kills: number
    unexpectedExits: number
    storageFailures: number
    retries: number
    settleGaveUp: number
  }
  /** The last output lines of workers that exited on their own (for the details). */
  readonly deaths: Array<string>
}

/** `CHAOS_WORKER_LOGS=<dir>`: each worker process's output is also written to a file there. */
const logDir = process.env.CHAOS_WORKER_LOGS === undefined || process.env.CHAOS_WORKER_LOGS === ""
  ? undefined
  : process.env.CHAOS_WORKER_LOGS

/** What the workers log that the details count: the words of each log line, and its name. */
const logged = {
  storageFailures: "storage failure, restarting the loop",
  retries: "outbox worker: retry #",
  settleGaveUp: "come back after their lease"
} as const

interface Slot {
  readonly config: WorkerConfig
  proc?: ChildProcess | undefined
  exited?: Promise<void> | undefined
  /** The next exit of this slot's process was asked for (a SIGKILL or the final stop). */
  expected: boolean
  /** Resolves once a process of the slot has built its layers (printed READY). */
  readonly ready: Promise<void>
  readonly markReady: () => void
  /** The slot's current process has printed READY (a process still starting is not killed: see `killOne`). */
  up: boolean
  /** Resolves once the slot's current process has printed READY. */
  upNow: Promise<void>
  markUp: () => void
}

/**
 * Starts one worker process per configuration; a worker that exits on its own is counted and replaced. The scope's
 * end stops them all (SIGTERM, then SIGKILL after 5 s).
 */
export const fleet = (configs: ReadonlyArray<WorkerConfig>) =>
  Effect.gen(function*() {
    const stats = { started: 0, kills: 0, unexpectedExits: 0, storageFailures: 0, retries: 0, settleGaveUp: 0 }
    const deaths: Array<string> = []
    let stopping = false
    const slots: Array<Slot> = configs.map((config) => {
      let markReady = () => {}
      const ready = new Promise<void>((resolve) => (markReady = resolve))
      return { config, expected: false, ready, markReady, up: false, upNow: ready, markUp: markReady }
    })

    const startSlot = (slot: Slot) => {
      const child = spawn(
        process.execPath,
        [...tsNodeArgs(), path.join(root, "chaos", "worker.ts"), JSON.stringify(slot.config)],
        { cwd: root, stdio: ["pipe", "pipe", "pipe"] }
      )
      stats.started++
      slot.up = false
      slot.upNow = new Promise<void>((resolve) => (slot.markUp = resolve))
      let tail = ""
      const lines = () => {
        let partial = ""
        return (chunk: string) => {
          tail = (tail + chunk).slice(-20_000)
          const parts = (partial + chunk).split("\n")
          partial = parts.pop()!
          for (const line of parts) {
            if (line === "READY") {
              slot.up = true
              slot.markReady()
              slot.markUp()
            }
            for (const [name, words] of Object.entries(logged)) {
              if (line.includes(words)) stats[name as keyof typeof logged]++
            }
          }
        }
      }
      child.stdout!.setEncoding("utf8").on("data", lines())
      child.stderr!.setEncoding("utf8").on("data", lines())
      if (logDir !== undefined) {
        const file = fs.createWriteStream(path.join(logDir, `${slot.config.role}-${child.pid}.log`))
        child.stdout!.pipe(file, { end: false })
        child.stderr!.pipe(file, { end: false })
        child.once("exit", () => file.end())
      }
      child.stdin!.on("error", () => {})
      slot.proc = child
      slot.expected = false
      slot.exited = new Promise<void>((resolve) =>
        child.once("exit", (code, signal) => {
          if (!slot.expected && !stopping) {
            stats.unexpectedExits++
            const lines = tail.split("\n").filter((line) => line.trim() !== "" && !/^\s+at /.test(line))
            deaths.push(
              `${slot.config.role} pid ${child.pid} exited (${code ?? signal}): ${lines.join("\n").slice(-1500)}`
            )
            setTimeout(() => {
              if (!stopping) startSlot(slot)
            }, 500)
          }
          resolve()
        })
      )
    }

    const stopAll = Effect.promise(async () => {
      stopping = true
      await Promise.all(slots.map(async (slot) => {
        const child = slot.proc
        if (child === undefined || child.exitCode !== null || child.signalCode !== null) return
        slot.expected = true
        child.kill("SIGTERM")
        const timer = setTimeout(() => child.kill("SIGKILL"), 5_000)
        await slot.exited
        clearTimeout(timer)
      }))
    })

    yield* Effect.acquireRelease(Effect.sync(() => slots.forEach(startSlot)), () => stopAll)

    // Only workers that are up are killed: on a busy machine a restarted worker can take longer to start than the
    // pause between kills, and a storm that kills workers before they start tests nothing but the machine's speed.
    const kill: Fleet["kill"] = (rng, options) =>
      Effect.promise(async () => {
        const live = slots.filter((s, i) =>
          s.up && s.proc !== undefined && s.proc.exitCode === null && s.proc.signalCode === null &&
          (options.role === undefined || s.config.role === options.role) && i !== options.except
        )
        if (live.length === 0 || stopping) return undefined
        const slot = live[rng.between(0, live.length - 1)]!
        slot.expected = true
        slot.proc!.kill("SIGKILL")
        stats.kills++
        await slot.exited
        if (!stopping) startSlot(slot)
        return slots.indexOf(slot)
      }).pipe(Effect.uninterruptible)

    const killOne = (rng: Random) => Effect.map(kill(rng, {}), (slot) => slot !== undefined)

    const up = (index: number) => Effect.promise(() => slots[index]!.upNow)

    const ready = Effect.promise(() => Promise.all(slots.map((s) => s.ready))).pipe(
      Effect.asVoid,
      Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error("the workers did not start in 60 s") })
    )

    return { killOne, kill, up, ready, stats, deaths } satisfies Fleet
  })

// ---------------------------------------------------------------------------------------------------
// Producers

class RolledBackOnPurpose extends Schema.TaggedError<RolledBackOnPurpose>()("RolledBackOnPurpose", {}) {}
class AlreadyCommitted extends Schema.TaggedError<AlreadyCommitted>()("AlreadyCommitted", {}) {}

/** Whether business transaction `n` is rolled back on purpose (deterministic: the same ones every run). */
const rollsBack = (n: number, share: number) => ((n * 7919) % 1000) / 1000 < share

/** What the producers did, as they saw it. */
export interface Production {
  /** Every message id dispatched, in any transaction (committed or not). */
  readonly dispatched: Array<string>
  /** Transactions rolled back on purpose. */
  onPurpose: number
  /** Attempts that failed for a fault (the connection killed, the server down) and were tried again. */
  aborted: number
  /** Message ids of attempts that failed for a fault, in case their COMMIT went through before the error. */
  readonly inDoubt: Array<string>
  /** Business transactions given up after their attempts ran out. */
  givenUp: number
}

export interface ProduceOptions {
  readonly messages: number
  /** Spread the transactions evenly over this long. */
  readonly seconds: number
  readonly producers: number
  readonly rollbackShare: number
  /** Called after each committed transaction (the hostile scenario interleaves its rows that way). */
  readonly onCommit?: (n: number) => Effect.Effect<void>
  /** Give message `n` the ordering key `keyOf(n, keys)`, recording its key's commit order (PostgreSQL only). */
  readonly keys?: number
}

/**
 * Runs business transactions 1…messages, `producers` at a time, paced over `seconds`: each inserts its order row and
 * dispatches `ChaosPaid` in one transaction; a share is rolled back on purpose after the dispatch. A transaction that
 * fails for a fault is tried again (a new message each time) until it commits, is rolled back on purpose, or finds
 * its order row already there (its COMMIT had gone through).
 */
export const produce = (url: string, leaseMs: number, options: ProduceOptions) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const production: Production = { dispatched: [], onPurpose: 0, aborted: 0, inDoubt: [], givenUp: 0 }
    const start = Date.now()
    const slotMs = (options.seconds * 1000) / options.messages
    const attempt = (n: number) =>
      Effect.suspend(() => {
        let id: string | undefined
        return sql.withTransaction(Effect.gen(function*() {
          if (options.keys !== undefined) {
            // The key's row stays locked until this transaction ends: a key's transactions commit in `seq` order.
            const key = keyOf(n, options.keys)
            const [row] = yield* sql<{ seq: number }>`INSERT INTO chaos_keys (ordering_key, seq) VALUES (${key}, 1)
              ON CONFLICT (ordering_key) DO UPDATE SET seq = chaos_keys.seq + 1 RETURNING seq`
            id = yield* Outbox.dispatch(new ChaosPaid({ n }), { orderingKey: key })
            production.dispatched.push(id)
            const keyed = yield* sql`INSERT INTO chaos_orders (n, message_id, ordering_key, seq)
              VALUES (${n}, ${id}, ${key}, ${row!.seq}) ON CONFLICT (n) DO NOTHING RETURNING n`
            if (keyed.length === 0) return yield* new AlreadyCommitted()
            if (rollsBack(n, options.rollbackShare)) return yield* new RolledBackOnPurpose()
            return "committed" as const
          }
          id = yield* Outbox.dispatch(new ChaosPaid({ n }))
          production.dispatched.push(id)
          const inserted = yield* sql.onDialectOrElse({
            mysql: () =>
              Effect.map(
                sql`INSERT IGNORE INTO chaos_orders (n, message_id) VALUES (${n}, ${id})`.raw,
                (result) => (result as { affectedRows: number }).affectedRows
              ),
            orElse: () =>
              Effect.map(
                sql`INSERT INTO chaos_orders (n, message_id) VALUES (${n}, ${id}) ON CONFLICT (n) DO NOTHING RETURNING n`,
                (rows) => rows.length
              )
          })
          // An earlier attempt's COMMIT went through although it reported an error: this one must not commit.
          if (inserted === 0) return yield* new AlreadyCommitted()
          if (rollsBack(n, options.rollbackShare)) return yield* new RolledBackOnPurpose()
          return "committed" as const
        })).pipe(
          // @effect/sql turns a failed COMMIT or ROLLBACK (the connection killed under it) into a defect.
          Effect.catchAllDefect((defect) => Effect.fail(defect)),
          Effect.timeout("15 seconds"),
          Effect.catchTags({
            RolledBackOnPurpose: () => Effect.succeed("rolled-back" as const),
            AlreadyCommitted: () => Effect.succeed("committed-before" as const)
          }),
          Effect.tapError(() =>
            Effect.sync(() => {
              production.aborted++
              if (id !== undefined) production.inDoubt.push(id)
            })
          )
        )
      })
    const transaction = (n: number) =>
      Effect.gen(function*() {
        const wait = start + (n - 1) * slotMs - Date.now()
        if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
        return yield* attempt(n).pipe(
          Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.intersect(Schedule.recurs(300))))
        )
      })
    yield* Effect.forEach(
      Array.from({ length: options.messages }, (_, i) => i + 1),
      (n) =>
        transaction(n).pipe(
          Effect.flatMap((outcome) =>
            outcome === "rolled-back"
              ? Effect.sync(() => production.onPurpose++)
              : outcome === "committed" && options.onCommit !== undefined
              ? options.onCommit(n)
              : Effect.void
          ),
          Effect.catchAll(() => Effect.sync(() => production.givenUp++))
        ),
      { concurrency: options.producers, discard: true }
    )
    return production
  }).pipe(
    Effect.provide(
      Outbox.layer().pipe(
        Layer.provideMerge(transport({ url, leaseMs })),
        Layer.provideMerge(database(url, producerApplicationName, options.producers + 1))
      )
    )
  )

// ---------------------------------------------------------------------------------------------------
// Draining and observing

/**
 * Rows left in the main queue, parked rows (`available_at = 'infinity'`, never due) apart; MariaDB's times have no
 * infinity, so none is parked there.
 */
const remainingSql = (url: string) =>
  dialectOf(url) === "mariadb"
    ? `SELECT COUNT(*) AS remaining, 0 AS parked FROM ${table} WHERE queue_name = '${queue}'`
    : `SELECT count(*) FILTER (WHERE available_at <> 'infinity')::int AS remaining,
  count(*) FILTER (WHERE available_at = 'infinity')::int AS parked
  FROM ${table} WHERE queue_name = '${queue}'`

/** The messages ready or unacknowledged in a broker queue, or `undefined` while the broker cannot answer. */
export const brokerQueueDepth = (amqpUrl: string, amqpQueue: string) =>
  Effect.promise(async () => {
    try {
      const connection = await Amqp.connect(amqpUrl, { timeout: 1000 })
      connection.on("error", () => {})
      try {
        const channel = await connection.createChannel()
        channel.on("error", () => {})
        return (await channel.checkQueue(amqpQueue)).messageCount
      } finally {
        await connection.close().catch(() => undefined)
      }
    } catch {
      return undefined
    }
  })

/**
 * Polls until `drained` holds (a probe that fails, the server being down, counts as not yet), or until `deadline`
 * (epoch ms). Returns when it held, or `undefined`.
 */
export const waitUntil = (drained: Effect.Effect<boolean, unknown>, deadline: number) =>
  Effect.gen(function*() {
    while (Date.now() < deadline) {
      if (yield* drained.pipe(Effect.orElseSucceed(() => false))) return Date.now()
      yield* Effect.sleep("200 millis")
    }
    return undefined
  })

/** The main queue holds nothing but parked rows. */
export const queueEmpty = (url: string) =>
  Effect.map(query<{ remaining: number }>(url, remainingSql(url)), (rows) => Number(rows[0]!.remaining) === 0)

/** Every committed message has its effect (for the broker's far side, whose in-flight messages no table shows). */
export const allEffectsWritten = (url: string) =>
  Effect.map(
    query<{ missing: number }>(
      url,
      `SELECT COUNT(*) AS missing FROM chaos_orders o
       WHERE NOT EXISTS (SELECT 1 FROM chaos_effects e WHERE e.message_id = o.message_id)`
    ),
    (rows) => Number(rows[0]!.missing) === 0
  )

/** The failure reason's length in stored headers: error message plus cause; `undefined` when none is recorded. */
const reasonLength = (headers: string): number | undefined => {
  try {
    const details = (JSON.parse(headers) as { errorDetails?: { message?: unknown; cause?: unknown } }).errorDetails
    if (details === undefined || typeof details.message !== "string") return undefined
    return details.message.length + (typeof details.cause === "string" ? details.cause.length : 0)
  } catch {
    return undefined
  }
}

/** The tag of the error a failed message's headers record, if any. */
const errorTag = (headers: string): string | undefined => {
  try {
    const tag = (JSON.parse(headers) as { errorDetails?: { tag?: unknown } }).errorDetails?.tag
    return typeof tag === "string" ? tag : undefined
  } catch {
    return undefined
  }
}

/** A hostile row as inserted: its label, message id and whether the product parks it on purpose. */
export interface InsertedHostile {
  readonly label: string
  readonly messageId: string
  readonly parked: boolean
}

/** Reads the end state of a scenario's database into an observation. */
export const observe = (
  url: string,
  run: {
    readonly scenario: string
    readonly production: Production
    readonly hostile: ReadonlyArray<InsertedHostile>
    readonly faults: number
    readonly minFaults?: number | undefined
    readonly workerExits: number
    readonly drainMs: number | undefined
    readonly notes: ReadonlyArray<string>
  }
): Effect.Effect<Observation, unknown> =>
  Effect.gen(function*() {
    const mariadb = dialectOf(url) === "mariadb"
    const asText = mariadb ? "message_id" : "message_id::text"
    const ids = (from: string) =>
      Effect.map(query<{ id: string }>(url, `SELECT ${asText} AS id FROM ${from}`), (rows) => rows.map((r) => r.id))
    const committed = yield* ids("chaos_orders")
    const committedSet = new Set(committed)
    const effects = yield* ids("chaos_effects")
    const [counted] = yield* query<{ total: number; messages: number }>(
      url,
      `SELECT COUNT(*) AS total, COUNT(DISTINCT message_id) AS messages FROM chaos_deliveries`
    )
    const deliveries = { total: Number(counted!.total), messages: Number(counted!.messages) }
    // Whether a handler ever started for it: the handler's first statement writes a row of `chaos_deliveries`.
    const failedRows = yield* query<{ id: string; headers: string; started: number | boolean }>(
      url,
      `SELECT ${asText} AS id, headers,
         EXISTS (SELECT 1 FROM chaos_deliveries d WHERE d.message_id = f.message_id) AS started
       FROM ${table} f WHERE queue_name = '${failedQueue}'`
    )
    const failed = failedRows.map((r) => ({
      messageId: r.id,
      reasonLength: reasonLength(r.headers),
      tag: errorTag(r.headers),
      started: Boolean(Number(r.started))
    }))
    const [left] = yield* query<{ remaining: number; parked: number }>(url, remainingSql(url))
    // Hostile rows are PostgreSQL's scenario only.
    const queues = new Map(
      run.hostile.length === 0 ? [] : (yield* query<{ id: string; queue_name: string }>(
        url,
        `SELECT message_id::text AS id, queue_name FROM ${table} WHERE message_id = ANY($1::uuid[])`,
        [run.hostile.map((h) => h.messageId)]
      )).map((r) => [r.id, r.queue_name])
    )
    const effectSet = new Set(effects)
    const reasons = new Map(failed.map((f) => [f.messageId, f.reasonLength]))
    const hostile = run.hostile.map((h): HostileRow => {
      const q = queues.get(h.messageId)
      const fate = q === failedQueue
        ? "failed"
        : q !== undefined
        ? "queued"
        : effectSet.has(h.messageId)
        ? "handled"
        : "gone"
      return { ...h, fate, reasonLength: fate === "failed" ? reasons.get(h.messageId) : undefined }
    })
    const died = failed.filter((f) => f.tag === "WorkerDiedError")
    const inDoubtCommitted = run.production.inDoubt.filter((id) => committedSet.has(id)).length
    return {
      scenario: run.scenario,
      committed,
      rolledBack: run.production.dispatched.filter((id) => !committedSet.has(id)),
      rolledBackOnPurpose: run.production.onPurpose,
      effects,
      deliveries,
      failed,
      remaining: Number(left!.remaining),
      parked: Number(left!.parked),
      hostile,
      faults: run.faults,
      ...(run.minFaults === undefined ? {} : { minFaults: run.minFaults }),
      workerExits: run.workerExits,
      drainMs: run.drainMs,
      notes: [
        ...run.notes,
        `producers: ${run.production.onPurpose} rolled back on purpose, ${run.production.aborted} attempts aborted by ` +
        `faults and retried (${inDoubtCommitted} of them had committed), ${run.production.givenUp} given up`,
        `handler invocations: ${deliveries.total} for ${deliveries.messages} messages`,
        ...(died.length === 0 ? [] : [
          `failure queue: ${died.length} messages as WorkerDiedError, ${
            died.filter((f) => !f.started).length
          } of them never reached by a handler`
        ])
      ]
    }
  })
