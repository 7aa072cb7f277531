/**
 * The checks of a chaos scenario, computed from what was observed in the database at the end (never from the
 * producers' or workers' own counts), the table they are printed in, and the self-test that shows each check
 * catches the loss it is there for: a copy of a real observation is corrupted (an effect dropped, an effect of a
 * rolled-back message added, an effect duplicated, an unbounded reason, a message left behind, a message whose
 * handler never started failed as if it had killed its workers; on Kafka, two messages of a key swapped, a key's
 * records in another partition) and the check must then fail.
 */
import { table as markdownTable } from "../bench/stats.js"
import { partitionOf } from "../src/layers/kafka/KafkaTransport.js"

/** The longest failure reason (error message and cause, in characters) the checks accept. */
export const maxReasonLength = 10_000

/** What became of one hostile row. */
export type Fate =
  /** Its handler ran (an effect exists for it) and the row is gone. */
  | "handled"
  /** It is in the failure queue. */
  | "failed"
  /** It is still in the main queue. */
  | "queued"
  /** The row is gone without an effect: silently dropped. */
  | "gone"

/** One hostile row at the end of the run. */
export interface HostileRow {
  readonly label: string
  readonly messageId: string
  readonly fate: Fate
  /** The failure reason's length, when the row is in the failure queue with one. */
  readonly reasonLength?: number | undefined
  /** A row the product deliberately leaves in the queue (`available_at = 'infinity'`: never due). */
  readonly parked: boolean
}

/** A row of the failure queue at the end of the run. */
export interface FailedRow {
  readonly messageId: string
  readonly reasonLength: number | undefined
  readonly tag?: string | undefined
  readonly started?: boolean | undefined
}

/** What a scenario observed, read back from the database at its end. */
export interface Observation {
  readonly scenario: string
  /** Message ids whose business transaction committed (their `chaos_orders` row exists). */
  readonly committed: ReadonlyArray<string>
  /** Message ids dispatched in transactions that did not commit (rolled back on purpose, or aborted by a fault). */
  readonly rolledBack: ReadonlyArray<string>
  /** Of those, rolled back on purpose. */
  readonly rolledBackOnPurpose: number
  /** The message id of every effect row (one entry per row). */
  readonly effects: ReadonlyArray<string>
  /** Handler invocations (rows of `chaos_deliveries`) and the distinct messages they were for. */
  readonly deliveries: { readonly total: number; readonly messages: number }
  /**
   * The rows of the failure queue: message id, reason length (`undefined`: no reason recorded), the error's tag
   * (`WorkerDiedError`: deliveries without an outcome used up its retries) and whether a handler ever started for it
   * (a row of `chaos_deliveries`, the handler's first statement).
   */
  readonly failed: ReadonlyArray<FailedRow>
  /** Rows left in the main queue at the end, parked rows apart. */
  readonly remaining: number
  /** Parked rows (`available_at = 'infinity'`) left in the main queue. */
  readonly parked: number
  /** The hostile rows of the scenario (none but in `hostile`). */
  readonly hostile: ReadonlyArray<HostileRow>
  /** Faults injected: SIGKILLs, restarts, rounds of terminations, outages, broker stops, hostile rows. */
  readonly faults: number
  /** The faults the scenario must inject at least (the SIGKILL storm's kills), when it asks for a number. */
  readonly minFaults?: number | undefined
  /** Worker processes that exited without being told to (killed by us does not count). */
  readonly workerExits: number
  /** Milliseconds from the scenario's first dispatch until the queue was drained; `undefined`: it never was. */
  readonly drainMs: number | undefined
  /** Faults injected and other facts of the run, for the details list. */
  readonly notes: ReadonlyArray<string>
  /** The Kafka scenarios' per-key order and partitions. */
  readonly order?: KeyOrder | undefined
}

/**
 * Per-key order on Kafka: the message ids of each key in the order they must have (`expected`: the key's commit order
 * in PostgreSQL, or its order in Kafka) and in the order observed (`actual`: in Kafka, or of the consumer's effects),
 * each id at its first occurrence; and the partitions each key's records were found in.
 */
export interface KeyOrder {
  /** What `expected` is, for the details ("commit order in PostgreSQL"). */
  readonly expectedIs: string
  /** What `actual` is ("offset order in Kafka"). */
  readonly actualIs: string
  readonly expected: Readonly<Record<string, ReadonlyArray<string>>>
  readonly actual: Readonly<Record<string, ReadonlyArray<string>>>
  /** The topic's partitions. */
  readonly partitions: number
  /** The partitions each key's records are in. */
  readonly placed: Readonly<Record<string, ReadonlyArray<number>>>
  /** Records in the topic, and the distinct message ids among them. */
  readonly records: number
  readonly distinct: number
}

/** The counts of the table. */
export interface Counts {
  readonly committed: number
  readonly rolledBack: number
  /** Effect rows of committed messages. */
  readonly effects: number
  /** Committed messages without an effect. */
  readonly lost: number
  /** Effect rows of messages that were never committed (rolled back, or unknown), hostile rows apart. */
  readonly rolledBackEffects: number
  /** Committed messages with more than one effect row, counted once per extra row. */
  readonly duplicateEffects: number
  /** Handler invocations beyond one per message. */
  readonly duplicateDeliveries: number
  /** Rows in the failure queue with a reason. */
  readonly failedWithReason: number
  readonly failed: number
  /** The longest reason in the failure queue, in characters. */
  readonly maxReason: number
  /** Rows in the failure queue as `WorkerDiedError`. */
  readonly failedDied: number
  /** Of those, messages whose handler never started, hostile rows apart: innocent messages failed as poison. */
  readonly failedNeverStarted: number
  /** Kafka: keys, keys whose observed order is not the expected one, keys not (only) in Java's partition. */
  readonly keys?: number
  readonly keysOutOfOrder?: number
  readonly keysMisplaced?: number
}

/** One check and whether it held. */
export interface Check {
  readonly name: CheckName
  readonly ok: boolean
}

export type CheckName =
  | "no loss"
  | "no rolled-back effect"
  | "exactly once"
  | "bounded reasons"
  | "drained"
  | "workers survived"
  | "hostile rows resolved"
  | "no innocent failure"
  | "faults injected"
  | "per-key order"
  | "Java partitions"

/** Keys whose observed ids, among those both orders hold, are not in the expected order. */
const keysOutOfOrder = (order: KeyOrder): number => {
  let wrong = 0
  for (const [key, expected] of Object.entries(order.expected)) {
    const actual = order.actual[key] ?? []
    const inActual = new Set(actual)
    const inExpected = new Set(expected)
    const a = actual.filter((id) => inExpected.has(id))
    const e = expected.filter((id) => inActual.has(id))
    if (a.length !== e.length || a.some((id, i) => id !== e[i])) wrong++
  }
  return wrong
}

/** Keys whose records are not all in the partition Java's partitioner picks. */
const keysMisplaced = (order: KeyOrder): number =>
  Object.entries(order.placed).filter(([key, partitions]) =>
    partitions.length !== 1 || partitions[0] !== partitionOf(key, order.partitions)
  ).length

/** A scenario's counts and checks. */
export interface Result {
  readonly observation: Observation
  readonly counts: Counts
  readonly checks: ReadonlyArray<Check>
  readonly ok: boolean
}

/** Counts and checks of an observation. */
export const evaluate = (observation: Observation): Result => {
  const committed = new Set(observation.committed)
  const hostile = new Set(observation.hostile.map((h) => h.messageId))
  const effectsPer = new Map<string, number>()
  for (const id of observation.effects) effectsPer.set(id, (effectsPer.get(id) ?? 0) + 1)
  let effects = 0
  let rolledBackEffects = 0
  let duplicateEffects = 0
  for (const [id, n] of effectsPer) {
    if (committed.has(id)) {
      effects += n
      duplicateEffects += n - 1
    } else if (!hostile.has(id)) rolledBackEffects += n
  }
  const lost = observation.committed.filter((id) => !effectsPer.has(id)).length
  const reasons = observation.failed.map((f) => f.reasonLength)
  const died = observation.failed.filter((f) => f.tag === "WorkerDiedError")
  const counts: Counts = {
    committed: committed.size,
    rolledBack: observation.rolledBack.length,
    effects,
    lost,
    rolledBackEffects,
    duplicateEffects,
    duplicateDeliveries: observation.deliveries.total - observation.deliveries.messages,
    failedWithReason: reasons.filter((r) => r !== undefined && r > 0).length,
    failed: observation.failed.length,
    maxReason: Math.max(0, ...reasons.map((r) => r ?? 0)),
    failedDied: died.length,
    // Hostile rows are failed on purpose (`crash_count = 2147483647` as WorkerDiedError): not innocent.
    failedNeverStarted: died.filter((f) => f.started !== true && !hostile.has(f.messageId)).length,
    ...(observation.order === undefined ? {} : {
      keys: Object.keys(observation.order.expected).length,
      keysOutOfOrder: keysOutOfOrder(observation.order),
      keysMisplaced: keysMisplaced(observation.order)
    })
  }
  const checks: Array<Check> = [
    { name: "no loss", ok: lost === 0 },
    { name: "no rolled-back effect", ok: rolledBackEffects === 0 },
    { name: "exactly once", ok: effects === committed.size && duplicateEffects === 0 },
    { name: "bounded reasons", ok: reasons.every((r) => r !== undefined && r > 0 && r <= maxReasonLength) },
    { name: "drained", ok: observation.drainMs !== undefined && observation.remaining === 0 },
    { name: "workers survived", ok: observation.workerExits === 0 },
    // A message that was only claimed (or prefetched) by workers that died before reaching it crashed nothing.
    { name: "no innocent failure", ok: counts.failedNeverStarted === 0 }
  ]
  if (observation.minFaults !== undefined) {
    checks.push({ name: "faults injected", ok: observation.faults >= observation.minFaults })
  }
  if (observation.order !== undefined) {
    checks.push(
      { name: "per-key order", ok: counts.keysOutOfOrder === 0 },
      { name: "Java partitions", ok: counts.keysMisplaced === 0 }
    )
  }
  if (observation.hostile.length > 0) {
    checks.push({
      name: "hostile rows resolved",
      ok: observation.hostile.every((h) =>
        h.fate === "handled" || (h.fate === "failed" && h.reasonLength !== undefined) ||
        (h.parked && h.fate === "queued")
      )
    })
  }
  return { observation, counts, checks, ok: checks.every((c) => c.ok) }
}

/** One corruption of the self-test: what it does to a copy of an observation and the check that must catch it. */
export interface Corruption {
  readonly name: string
  readonly catches: CheckName
  /** The corrupted copy, or `undefined` when the observation gives it nothing to work on. */
  readonly apply: (o: Observation) => Observation | undefined
}

export const corruptions: ReadonlyArray<Corruption> = [
  {
    name: "drop an effect",
    catches: "no loss",
    apply: (o) => {
      const victim = o.committed.find((id) => o.effects.includes(id))
      return victim === undefined ? undefined : { ...o, effects: o.effects.filter((id) => id !== victim) }
    }
  },
  {
    name: "add an effect of a rolled-back message",
    catches: "no rolled-back effect",
    apply: (o) =>
      o.rolledBack.length === 0 ? undefined : { ...o, effects: [...o.effects, o.rolledBack[o.rolledBack.length - 1]!] }
  },
  {
    name: "duplicate an effect",
    catches: "exactly once",
    apply: (o) => {
      const id = o.effects.find((e) => o.committed.includes(e))
      return id === undefined ? undefined : { ...o, effects: [...o.effects, id] }
    }
  },
  {
    name: "an unbounded failure reason",
    catches: "bounded reasons",
    apply: (o) => ({
      ...o,
      failed: [...o.failed, { messageId: "00000000-0000-7000-8000-000000000000", reasonLength: maxReasonLength + 1 }]
    })
  },
  {
    name: "a message left in the queue",
    catches: "drained",
    apply: (o) => ({ ...o, remaining: o.remaining + 1 })
  },
  {
    name: "fail a message whose handler never started as WorkerDiedError",
    catches: "no innocent failure",
    apply: (o) => ({
      ...o,
      failed: [...o.failed, {
        messageId: "00000000-0000-7000-8000-000000000001",
        reasonLength: 100,
        tag: "WorkerDiedError",
        started: false
      }]
    })
  },
  {
    name: "swap two messages of a key",
    catches: "per-key order",
    apply: (o) => {
      if (o.order === undefined) return undefined
      const found = Object.entries(o.order.actual).find(([, ids]) => ids.length >= 2)
      if (found === undefined) return undefined
      const [key, ids] = found
      const swapped = [ids[1]!, ids[0]!, ...ids.slice(2)]
      return { ...o, order: { ...o.order, actual: { ...o.order.actual, [key]: swapped } } }
    }
  },
  {
    name: "a key's records in another partition",
    catches: "Java partitions",
    apply: (o) => {
      if (o.order === undefined || o.order.partitions < 2) return undefined
      const key = Object.keys(o.order.placed)[0]
      if (key === undefined) return undefined
      const other = (partitionOf(key, o.order.partitions) + 1) % o.order.partitions
      return { ...o, order: { ...o.order, placed: { ...o.order.placed, [key]: [other] } } }
    }
  }
]

/** How one corruption fared on one observation. */
export interface SelfTestCase {
  readonly scenario: string
  readonly corruption: string
  readonly check: CheckName
  /** `caught`: the check passed on the observation and fails on the corrupted copy. */
  readonly outcome: "caught" | "missed" | "not applicable" | "check already fails"
}

/** Runs every corruption on a copy of the observation. */
export const selfTest = (observation: Observation): ReadonlyArray<SelfTestCase> => {
  const before = evaluate(observation)
  return corruptions.map((c): SelfTestCase => {
    const base = { scenario: observation.scenario, corruption: c.name, check: c.catches }
    const check = before.checks.find((k) => k.name === c.catches)
    // The Kafka checks exist only for the Kafka scenarios' results.
    if (check === undefined) return { ...base, outcome: "not applicable" }
    if (!check.ok) return { ...base, outcome: "check already fails" }
    const corrupted = c.apply(structuredClone(observation))
    if (corrupted === undefined) return { ...base, outcome: "not applicable" }
    const after = evaluate(corrupted)
    return { ...base, outcome: after.checks.find((k) => k.name === c.catches)!.ok ? "missed" : "caught" }
  })
}

/** A small consistent observation (no database involved), for `--self-test` on its own. */
export const syntheticObservation = (): Observation => {
  const id = (i: number) => `00000000-0000-7000-8000-${i.toString(16).padStart(12, "0")}`
  const committed = Array.from({ length: 9 }, (_, i) => id(i + 1))
  return {
    scenario: "synthetic",
    committed,
    rolledBack: [id(100)],
    rolledBackOnPurpose: 1,
    effects: [...committed],
    deliveries: { total: 11, messages: 9 },
    failed: [],
    remaining: 0,
    parked: 0,
    hostile: [],
    faults: 1,
    workerExits: 0,
    drainMs: 1000,
    notes: [],
    order: {
      expectedIs: "commit order",
      actualIs: "offset order",
      expected: { a: [id(1), id(3), id(5)], b: [id(2), id(4)] },
      actual: { a: [id(1), id(3), id(5)], b: [id(2), id(4)] },
      partitions: 3,
      placed: { a: [partitionOf("a", 3)], b: [partitionOf("b", 3)] },
      records: 5,
      distinct: 5
    }
  }
}

const seconds = (ms: number | undefined) => (ms === undefined ? "never" : (ms / 1000).toFixed(1))

/** The results table (Markdown, padded so it reads the same on a terminal). */
export const resultsTable = (results: ReadonlyArray<Result>): string =>
  markdownTable(
    [
      "scenario",
      "committed",
      "rolled back",
      "effects",
      "lost",
      "rolled-back effects",
      "duplicate deliveries",
      "failed (with reason)",
      "died (never started)",
      "max reason",
      "drained in s",
      "checks"
    ],
    results.map(({ checks, counts, observation }) => [
      observation.scenario,
      String(counts.committed),
      String(counts.rolledBack),
      String(counts.effects),
      String(counts.lost),
      String(counts.rolledBackEffects),
      String(counts.duplicateDeliveries),
      `${counts.failed} (${counts.failedWithReason})`,
      `${counts.failedDied} (${counts.failedNeverStarted})`,
      String(counts.maxReason),
      seconds(observation.drainMs),
      checks.every((c) => c.ok) ? "pass" : `FAIL: ${checks.filter((c) => !c.ok).map((c) => c.name).join(", ")}`
    ]),
    ["l", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "l"]
  )

/** The Kafka scenarios' table: records, duplicates, keys out of order, keys outside Java's partition. */
export const orderTable = (results: ReadonlyArray<Result>): string =>
  markdownTable(
    [
      "scenario",
      "records in Kafka",
      "distinct ids",
      "duplicate records",
      "keys",
      "partitions",
      "keys out of order",
      "keys off Java's partition"
    ],
    results.flatMap(({ counts, observation: { order, scenario } }) =>
      order === undefined ? [] : [[
        scenario,
        String(order.records),
        String(order.distinct),
        String(order.records - order.distinct),
        String(counts.keys ?? 0),
        String(order.partitions),
        String(counts.keysOutOfOrder ?? 0),
        String(counts.keysMisplaced ?? 0)
      ]]
    ),
    ["l", "r", "r", "r", "r", "r", "r", "r"]
  )

/** The hostile rows' fates. */
export const hostileTable = (rows: ReadonlyArray<HostileRow>): string =>
  markdownTable(
    ["hostile row", "fate", "reason chars"],
    rows.map((r) => [
      r.parked ? `${r.label} (parked: never due)` : r.label,
      r.fate,
      r.reasonLength === undefined ? "" : String(r.reasonLength)
    ]),
    ["l", "l", "r"]
  )

/** The self-test's cases. */
export const selfTestTable = (cases: ReadonlyArray<SelfTestCase>): string =>
  markdownTable(
    ["scenario", "corruption of a copy", "check that must fail", "outcome"],
    cases.map((c) => [c.scenario, c.corruption, c.check, c.outcome])
  )

/**
 * Whether the self-test passed: no corruption went unnoticed, and each was caught on at least one result (the Kafka
 * corruptions apply only to the Kafka scenarios' results: without one they are not applicable anywhere).
 */
export const selfTestOk = (cases: ReadonlyArray<SelfTestCase>): boolean =>
  cases.every((c) => c.outcome !== "missed") &&
  corruptions.every((k) => {
    const own = cases.filter((c) => c.corruption === k.name)
    return own.some((c) => c.outcome === "caught") ||
      (k.catches === "per-key order" || k.catches === "Java partitions") &&
        own.every((c) => c.outcome === "not applicable")
  })
