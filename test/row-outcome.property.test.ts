/**
 * Properties of the way from a stored row to an outcome, against the real PostgreSQL: rows inserted by raw SQL
 * into a transport table the product set up — arbitrary body and headers text (test/support/rowText.ts) and
 * arbitrary column values (`available_at` at `-infinity`, in the past or now; `delivered_at` NULL, `-infinity`,
 * long ago or `infinity`; `delivery_count` 0, 1, 2147483646, 2147483647 or anything; `created_at` at both ends of
 * its range) — among valid neighbours of a registered class. A worker runs until the queue is empty (a time limit
 * and a timeout only as safety nets) with a retry strategy that gives up or retries fast. Then:
 *
 * - the run ends cleanly: no failure, no defect, no storage failure, stopped because the queue was empty;
 * - every valid neighbour is handled;
 * - every row ends handled (deleted, its handler ran), retried (in the queue, due later, a redelivery recorded) or
 *   in the failure queue with a bounded reason (`headers.errorDetails`) — none stays claimed;
 * - a parked row (`available_at = 'infinity'`, never due by design) stays untouched and blocks nobody;
 * - what the worker reports (events, logs) is bounded (a property of its own, so that it does not hide the others).
 *
 * Each run of a property is one worker run on a truncated table: a modest number of runs, random seeds (printed
 * with the shrunk counterexample on failure).
 */
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Option from "effect/Option"
import fc from "fast-check"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Headers from "../src/domain/Headers.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../src/layers/ScheduleRetryStrategy.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { pgLayer, testDatabase } from "./support/database.js"
import { uniqueTable } from "./support/harness.js"
import {
  bodyText,
  bounds,
  headersText,
  hugeString,
  OrderPaid,
  overBounds,
  preview,
  storable,
  textBound,
  validBody
} from "./support/rowText.js"

const db = testDatabase("row_outcome")

let runtime: ManagedRuntime.ManagedRuntime<PgClient.PgClient | SqlClient.SqlClient, never>
beforeAll(() => {
  runtime = ManagedRuntime.make(Layer.orDie(pgLayer(db.url, 10)))
})
afterAll(async () => {
  await runtime?.dispose()
})

// --- the rows ----------------------------------------------------------------------------------------------------

/** How a row is meant to end: a neighbour is handled, a row ends somehow, a parked row is never touched. */
type Kind = "neighbour" | "row" | "parked"

interface StoredRow {
  readonly kind: Kind
  readonly messageId: string
  readonly body: string
  readonly headers: string
  /** A timestamp as text (`infinity`, `now`, …) or `ago:<ms>` (that long before now, on the database clock). */
  readonly createdAt: string
  readonly availableAt: string
  readonly deliveredAt: string | null
  readonly deliveryCount: number
}

const ago = (min: number, max: number) => fc.integer({ min, max }).map((ms) => `ago:${ms}`)
const tenYears = 10 * 365 * 24 * 3_600_000

const createdAt = fc.constantFrom(
  "now",
  "-infinity",
  "infinity",
  "4713-01-01 00:00:00+00 BC",
  "294276-12-31 23:59:59+00",
  "1970-01-01 00:00:00+00"
)
/** Due now: `-infinity`, long ago, or now. */
const due = fc.oneof(fc.constantFrom("-infinity", "now"), ago(0, tenYears))
/** Not held by anybody: never claimed, or a lease long over (the lease is 30 seconds). */
const notHeld = fc.oneof(fc.constant(null), fc.constant("-infinity"), ago(60_000, tenYears))
const deliveryCount = fc.oneof(
  fc.constantFrom(0, 1, 2, 2_147_483_646, 2_147_483_647),
  fc.integer({ min: 0, max: 2_147_483_647 })
)

/** A row as fast-check shows it in a counterexample: its texts by their preview. */
const shownRow = (row: StoredRow): StoredRow =>
  Object.defineProperty(row, fc.toStringMethod, { value: () => `{${describeRow(row)}}` })

const neighbour: fc.Arbitrary<StoredRow> = fc.integer({ min: 0, max: 1_000_000 }).map((orderId) =>
  shownRow({
    kind: "neighbour",
    messageId: randomUUID(),
    body: validBody(orderId, 1),
    headers: "{\"type\":\"OrderPaid\"}",
    createdAt: "now",
    availableAt: "now",
    deliveredAt: null,
    deliveryCount: 0
  })
)

/** Texts of at most 100 000 characters: the megabytes come in `hugeRow`, one at most per case. */
const small = (arb: fc.Arbitrary<string>) => arb.filter((text) => text.length <= 100_000).map(storable)

const arbitraryRow = (
  kind: Kind,
  deliveredAt: fc.Arbitrary<string | null>,
  availableAt: fc.Arbitrary<string>,
  texts: { readonly body: fc.Arbitrary<string>; readonly headers: fc.Arbitrary<string> } = {
    body: small(bodyText),
    headers: small(headersText)
  }
) =>
  fc.record({
    body: texts.body,
    headers: texts.headers,
    createdAt,
    availableAt,
    deliveredAt,
    deliveryCount
  }).map((row): StoredRow => shownRow({ kind, messageId: randomUUID(), ...row }))

/** A row of megabytes: a huge string as the body, a field of the body, the type, a custom header, or not JSON. */
const hugeRow = arbitraryRow("row", notHeld, due, {
  body: fc.oneof(
    hugeString.map((s) => JSON.stringify(s)),
    hugeString.map((s) => `{"_tag":"OrderPaid","orderId":1,"amount":1,"extra":${JSON.stringify(s)}}`),
    hugeString.map((s) => `{"_tag":"OrderPaid","orderId":${JSON.stringify(s)},"amount":1}`),
    hugeString,
    fc.constant(validBody(1, 1))
  ).map(storable),
  headers: fc.oneof(
    hugeString.map((s) => JSON.stringify({ type: s })),
    hugeString.map((s) => JSON.stringify({ type: "OrderPaid", custom: { a: s } })),
    hugeString.map((s) => JSON.stringify({ type: "OrderPaid", custom: { a: 1, b: s } })),
    hugeString,
    fc.constant("{\"type\":\"OrderPaid\"}")
  ).map(storable)
})

/** A valid OrderPaid its handler refuses (a negative amount): retried or failed, by the strategy. */
const refused = arbitraryRow("row", notHeld, due, {
  body: fc.integer({ min: 1, max: 1_000_000 }).map((id) => validBody(id, -1)),
  headers: fc.oneof(
    fc.constant("{\"type\":\"OrderPaid\"}"),
    small(headersText).filter((text) => text.includes("OrderPaid"))
  ).map(storable)
})

/** Rows that must end: due, not held. */
const row = arbitraryRow("row", notHeld, due)
/** Rows leased until `infinity`: a lease that never runs out must not hold a row forever. */
const leasedForever = arbitraryRow("row", fc.constant("infinity"), due)
/** Rows never due by design: `available_at = 'infinity'`, held or not. */
const parked = arbitraryRow(
  "parked",
  fc.oneof(notHeld, fc.constant("infinity")),
  fc.constant("infinity")
)

/** What the worker runs with: a retry strategy that gives up or retries fast (a batch size, a concurrency). */
const policies = [
  { name: "gives up", retries: false, policy: { maxRetries: 0 } },
  {
    name: "retries twice within milliseconds",
    retries: true,
    policy: { maxRetries: 2, delay: "1 millis", maxDelay: "1 millis" }
  },
  { name: "retries in an hour", retries: true, policy: { maxRetries: 100, delay: "1 hour", maxDelay: "1 hour" } }
] as const

interface Case {
  readonly rows: ReadonlyArray<StoredRow>
  readonly policy: (typeof policies)[number]
  readonly batchSize: number
  readonly concurrency: number
}

const caseOf = (
  rowArb: fc.Arbitrary<StoredRow>,
  { hugeShare = 0.25, maxLength = 10 }: { readonly maxLength?: number; readonly hugeShare?: number } = {}
): fc.Arbitrary<Case> =>
  fc.record({
    rows: fc.array(
      fc.oneof({ weight: 2, arbitrary: neighbour }, { weight: 4, arbitrary: rowArb }, {
        weight: 1,
        arbitrary: refused
      }),
      { minLength: 1, maxLength }
    ),
    // a share of the cases (one in four by default) holds a row of megabytes
    huge: fc.oneof(
      { weight: Math.round(100 * (1 - hugeShare)), arbitrary: fc.constant(undefined) },
      { weight: Math.round(100 * hugeShare), arbitrary: fc.tuple(hugeRow, fc.nat()) }
    ),
    policy: fc.constantFrom(...policies),
    batchSize: fc.constantFrom(1, 3, 50),
    concurrency: fc.constantFrom(1, 4)
  }).map(({ batchSize, concurrency, huge, policy, rows }) => ({
    rows: huge === undefined
      ? rows
      : [...rows.slice(0, huge[1] % (rows.length + 1)), huge[0], ...rows.slice(huge[1] % (rows.length + 1))],
    policy,
    batchSize,
    concurrency
  }))

// --- one worker run ----------------------------------------------------------------------------------------------

interface Snapshot {
  readonly id: string
  readonly queue_name: string
  readonly body: string
  readonly headers: string
  readonly created_at: string
  readonly available_at: string
  readonly delivered_at: string | null
  readonly delivery_count: number
  /** `available_at` at or after the start of the worker run. */
  readonly later: boolean
}

interface Ran {
  readonly before: ReadonlyMap<string, Snapshot>
  readonly after: ReadonlyMap<string, Snapshot>
  readonly result: Exit.Exit<Option.Option<Worker.WorkerSummary | { readonly storageFailure: string }>, unknown>
  readonly handled: ReadonlySet<string>
  readonly events: ReadonlyArray<Worker.WorkerEvent>
  readonly logs: ReadonlyArray<string>
}

/** A timestamp column from the text of `StoredRow`, on the database clock. */
const timestamp = (column: string) =>
  `CASE WHEN ${column} IS NULL THEN NULL
     WHEN ${column} LIKE 'ago:%' THEN now() - substr(${column}, 5)::float8 * interval '1 millisecond'
     ELSE ${column}::timestamptz END`

/** A handler that records what it handled and refuses a negative amount with a 30 000-character message. */
const handler = (handled: Set<string>) =>
  Handlers.handler(OrderPaid, (paid, envelope) =>
    paid.amount < 0
      ? Effect.fail(new Error(`refused: ${"x".repeat(30_000)}`))
      : Effect.sync(() => void handled.add(envelope.messageId)), { name: "record" })

const runCase = (table: string, kase: Case) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const t = sql(table)
    const snapshot = (since: string) =>
      sql<Snapshot>`SELECT message_id::text AS id, queue_name, body, headers, created_at::text,
          available_at::text, delivered_at::text, delivery_count, available_at >= ${since}::timestamptz AS later
        FROM ${t}`.pipe(Effect.map((rows) => new Map(rows.map((r) => [r.id, r]))))

    yield* sql`TRUNCATE ${t}`
    const { rows } = kase
    yield* sql.unsafe(
      `INSERT INTO ${JSON.stringify(table)}
         (message_id, body, headers, queue_name, created_at, available_at, delivered_at, delivery_count)
       SELECT m, b, h, 'outbox', ${timestamp("c")}, ${timestamp("a")}, ${timestamp("d")}, n
       FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[])
         WITH ORDINALITY AS x(m, b, h, c, a, d, n, o)
       ORDER BY o`,
      [
        rows.map((r) => r.messageId),
        rows.map((r) => r.body),
        rows.map((r) => r.headers),
        rows.map((r) => r.createdAt),
        rows.map((r) => r.availableAt),
        rows.map((r) => r.deliveredAt),
        rows.map((r) => r.deliveryCount)
      ]
    )
    const [{ now }] = (yield* sql<{ now: string }>`SELECT now()::text AS now`) as unknown as [{ now: string }]
    const before = yield* snapshot(now)

    const handled = new Set<string>()
    const events: Array<Worker.WorkerEvent> = []
    const logs: Array<string> = []
    const storageFailed = yield* Deferred.make<string>()
    const recorder = Logger.make(({ message }) => {
      const parts = Array.isArray(message) ? message : [message]
      const text = parts.filter((p): p is string => typeof p === "string").join(" ")
      logs.push(text)
      // A storage failure is the end of the case: the loop would restart and meet the same row again.
      if (text.startsWith("outbox worker: storage failure")) {
        const error = parts.find((p) => typeof p === "object" && p !== null) as { message?: unknown } | undefined
        Deferred.unsafeDone(storageFailed, Exit.succeed(String(error?.message ?? text).slice(0, 500)))
      }
    })
    const stack = Layer.mergeAll(
      Outbox.layer(),
      Handlers.layer([handler(handled)]),
      ScheduleRetryStrategy.layer({ default: kase.policy.policy })
    ).pipe(Layer.provideMerge(PgTransport.layer({ table })), Layer.orDie)

    const result = yield* Effect.raceFirst(
      Worker.run({
        transports: ["outbox"],
        stopWhenEmpty: true,
        batchSize: kase.batchSize,
        concurrency: kase.concurrency,
        sleep: "100 millis",
        // safety nets, not measures: a healthy run over these rows takes well under a second
        timeLimit: "20 seconds",
        settleTimeout: "2 seconds",
        shutdownTimeout: "1 second",
        onEvent: (event) => Effect.sync(() => void events.push(event))
      }),
      Effect.map(Deferred.await(storageFailed), (message) => ({ storageFailure: message }))
    ).pipe(
      Effect.timeoutOption("40 seconds"),
      Effect.exit,
      Effect.provide(stack),
      Effect.provide(Logger.replace(Logger.defaultLogger, recorder))
    )
    const after = yield* snapshot(now)
    return { before, after, result, handled, events, logs } satisfies Ran
  })

// --- what must hold ----------------------------------------------------------------------------------------------

function describeRow(row: StoredRow): string {
  return `${row.kind} body=${preview(row.body)} headers=${preview(row.headers)} created_at=${row.createdAt} ` +
    `available_at=${row.availableAt} delivered_at=${row.deliveredAt} delivery_count=${row.deliveryCount}`
}

/** The stored history says its handler already succeeded: acked without running it again (by design). */
const alreadyHandled = (headers: string) => {
  const decoded = Headers.decode(headers)
  return Either.isRight(decoded) && (decoded.right.handledBy ?? []).includes("record")
}

const detailsOverBounds = (prefix: string, details: Headers.ErrorDetails) =>
  overBounds([
    [`${prefix}.tag`, details.tag, bounds.name],
    [`${prefix}.message`, details.message, bounds.message],
    [`${prefix}.cause`, details.cause, bounds.cause]
  ])

/** Every way the run broke the contract, one line each (empty when it kept it). */
const violations = (kase: Case, ran: Ran): Array<string> => {
  const found: Array<string> = []
  const { after, before, handled, result } = ran
  if (Exit.isFailure(result)) {
    found.push(`the worker run failed: ${Cause.pretty(result.cause).slice(0, 1_000)}`)
  } else if (Option.isNone(result.value)) {
    found.push("the worker run did not end within 40 seconds")
  } else {
    const ended = result.value.value
    if ("storageFailure" in ended) found.push(`the worker met a storage failure: ${ended.storageFailure}`)
    else if (ended.stoppedBy !== "empty") {
      found.push(`the worker stopped by ${ended.stoppedBy}, not because the queue was empty`)
    }
  }

  for (const row of kase.rows) {
    const was = before.get(row.messageId)
    const now = after.get(row.messageId)
    const where = `${describeRow(row)}:`
    if (was === undefined) {
      found.push(`${where} not stored by the test`)
      continue
    }
    if (row.kind === "parked") {
      if (now === undefined || JSON.stringify({ ...now, later: was.later }) !== JSON.stringify(was)) {
        found.push(
          `${where} parked, yet touched: ${
            now === undefined
              ? "deleted"
              : JSON.stringify({ ...now, body: preview(now.body), headers: preview(now.headers) })
          }`
        )
      }
      continue
    }
    if (now === undefined) {
      if (!handled.has(row.messageId) && !alreadyHandled(row.headers)) found.push(`${where} deleted, never handled`)
      continue
    }
    if (row.kind === "neighbour") {
      found.push(`${where} a valid neighbour not handled (queue ${now.queue_name}, delivered_at ${now.delivered_at})`)
      continue
    }
    if (now.delivered_at !== null) {
      found.push(`${where} still claimed after the run (delivered_at ${now.delivered_at}, queue ${now.queue_name})`)
      continue
    }
    if (now.body !== was.body) found.push(`${where} its body changed`)
    const headers = Headers.decode(now.headers)
    if (Either.isLeft(headers)) {
      found.push(`${where} its headers after the run cannot be read: ${headers.left.message.slice(0, 300)}`)
      continue
    }
    if (now.queue_name === "failed") {
      const reason = headers.right.errorDetails
      if (reason === undefined) found.push(`${where} in the failure queue without a reason`)
      else found.push(...detailsOverBounds(`${where} failure reason`, reason))
      // the transport it failed from, unless its stored headers already named an earlier one (kept by design)
      const earlier = Headers.decode(was.headers).pipe(Either.map((h) => h.originalTransport), Either.getOrUndefined)
      if (headers.right.originalTransport !== (earlier ?? "outbox")) {
        found.push(
          `${where} failed with original transport ${headers.right.originalTransport}, not ${earlier ?? "outbox"}`
        )
      }
      continue
    }
    if (now.queue_name !== "outbox") {
      found.push(`${where} in queue ${now.queue_name}`)
      continue
    }
    // Retried: due later, with a redelivery recorded by this run.
    const history = headers.right.redeliveries ?? []
    const retried = now.later && now.headers !== was.headers && history.length > 0
    if (!retried) {
      found.push(
        `${where} stayed in the queue without an outcome (available_at ${now.available_at}, ` +
          `${history.length} redeliveries, headers ${now.headers === was.headers ? "unchanged" : "changed"})`
      )
      continue
    }
    if (!kase.policy.retries) found.push(`${where} retried by a strategy that gives up at once`)
    found.push(
      // the entry this run recorded (the earlier ones are the row's own text)
      ...overBounds([[
        `${where} the new redelivery's errorMessage`,
        history[history.length - 1]!.errorMessage,
        bounds.message
      ]])
    )
  }

  return found
}

/** What the worker reported beyond its bounds: the events' errors and types, the log lines. */
const reportViolations = (_kase: Case, ran: Ran): Array<string> => {
  const found: Array<string> = []
  for (const event of ran.events) {
    if (event._tag === "Started" || event._tag === "Stopped") continue
    if (event._tag !== "Handled") found.push(...detailsOverBounds(`${event._tag} event error`, event.error))
    found.push(...overBounds([[`${event._tag} event type`, event.type, textBound]]))
  }
  const longest = ran.logs.reduce((a, b) => (b.length > a.length ? b : a), "")
  found.push(...overBounds([[`a log line (${preview(longest)})`, longest, textBound]]))
  return found
}

/** One property: a table set up by the product, then `numRuns` worker runs over arbitrary cases. */
const property = async (
  cases: fc.Arbitrary<Case>,
  numRuns: number,
  check: (kase: Case, ran: Ran) => Array<string> = violations
) => {
  const table = uniqueTable("row_outcome")
  await runtime.runPromise(Effect.provide(Effect.void, Layer.orDie(PgTransport.layer({ table, autoSetup: true }))))
  await fc.assert(
    fc.asyncProperty(cases, async (kase) => {
      const ran = await runtime.runPromise(runCase(table, kase))
      expect(check(kase, ran)).toEqual([])
    }),
    // shrinking a failure stops after this long (the counterexample so far is reported)
    { numRuns, skipAllAfterTimeLimit: 60_000 }
  )
}

describe("stored rows → outcomes, on PostgreSQL", () => {
  it(
    "arbitrary text and column values among valid neighbours: the run ends cleanly, every row ends handled, retried or failed with a bounded reason",
    async () => {
      await property(caseOf(row), 30)
    },
    180_000
  )

  it("parked rows (available_at = 'infinity') stay untouched and block no neighbour, nor any other row", async () => {
    await property(caseOf(fc.oneof(parked, row), { maxLength: 8 }), 15)
  }, 180_000)

  it("a lease until 'infinity' holds no row forever: such rows end like the others", async () => {
    await property(caseOf(fc.oneof(leasedForever, row), { maxLength: 8 }), 15)
  }, 180_000)

  it(
    "what the worker reports of such rows is bounded: the error and the type of each event, each log line",
    async () => {
      await property(caseOf(row, { maxLength: 4, hugeShare: 0.75 }), 12, reportViolations)
    },
    180_000
  )
})
