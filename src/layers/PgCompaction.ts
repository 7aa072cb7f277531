/**
 * Index compaction of the PostgreSQL transport's table. A vacuum empties the table's file after a drain, but a btree
 * index keeps its pages: they are reused by later rows, never returned. Rebuilding an index with
 * `REINDEX CONCURRENTLY` returns them without blocking producers or workers (it blocks only other maintenance of the
 * table while it runs). Its statements live in `pg/sql/compaction.ts`.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { OutboxConfigError, TransportError } from "../domain/Errors.js"
import * as Identifier from "../domain/Identifier.js"
import { transportError } from "./pg/errors.js"
import * as Statements from "./pg/sql/compaction.js"
import { keySequences, keyStates, waitingWorkers } from "./pg/sql/identifiers.js"
import { defaultTable } from "./PgTransport.js"

/**
 * One index of a transport table's tables, and what `compactIndexes` did with it (sizes in bytes).
 *
 * @since 0.1.0
 * @category models
 */
export interface CompactedIndex {
  readonly table: string
  readonly index: string
  readonly bytesBefore: number
  readonly bytesAfter: number
  readonly rebuilt: boolean
}

/**
 * What one `compactIndexes` did.
 *
 * @since 0.1.0
 * @category models
 */
export interface Compaction {
  readonly indexes: ReadonlyArray<CompactedIndex>
  /** Invalid indexes an interrupted rebuild left behind, dropped (each slows every write until it is). */
  readonly dropped: ReadonlyArray<string>
}

/**
 * A fresh btree entry of these tables takes well under 64 bytes with its share of the page: an index bigger than
 * four times that for each row of its table is mostly empty pages.
 */
const bytesPerRowOfBloat = 256

/** The names `REINDEX CONCURRENTLY` gives the indexes it builds and retires. */
const leftover = /_cc(new|old)\d*$/

/**
 * The name whose `hashtext` is the advisory (session) lock key of a table's compactor.
 *
 * @since 0.1.0
 * @category constants
 */
export const lockName = (table: string): string => `effect-outbox:compact:${table}`

/**
 * Returns to the server the empty pages of the table's indexes (and of its companion tables' indexes) after a
 * backlog drained: a vacuum empties the table, but a btree index keeps its pages. Each index bigger than `minBytes`
 * (default 1 MiB) and mostly empty for the rows its table holds — every one with `force` — is rebuilt with
 * `REINDEX INDEX CONCURRENTLY`, which does not block producers or workers; invalid indexes an interrupted rebuild
 * left are dropped first. One compactor per table at a time: `None` when another one runs. An operator task (it
 * needs the table's owner): `outbox storage:compact`.
 *
 * @since 0.1.0
 * @category maintenance
 */
export const compactIndexes = (
  options: { readonly table?: string; readonly force?: boolean; readonly minBytes?: number } = {}
): Effect.Effect<Option.Option<Compaction>, OutboxConfigError | TransportError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const table = yield* Identifier.validateTableName(options.table ?? defaultTable, 48)
    return yield* compact(table, options.force ?? false, Math.max(0, options.minBytes ?? 1024 * 1024)).pipe(
      Effect.mapError((error) => transportError("*", "compact", error))
    )
  })

const compact = (
  table: string,
  force: boolean,
  minBytes: number
): Effect.Effect<Option.Option<Compaction>, SqlError, SqlClient.SqlClient> =>
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const statements = Statements.make(yield* sql.reserve)
    const lock = lockName(table)
    const [row] = yield* statements.tryLock(lock)
    if (row?.locked !== true) return Option.none()
    yield* Effect.addFinalizer(() => Effect.ignore(statements.unlock(lock)))

    const found = yield* statements.indexes([table, keySequences(table), keyStates(table), waitingWorkers(table)])
    const dropped: Array<string> = []
    for (const index of found) {
      if (index.valid || !leftover.test(index.index_name)) continue
      yield* statements.drop(index.schema_name, index.index_name)
      dropped.push(index.index_name)
    }

    const valid = found.filter((index) => index.valid)
    const rows = new Map<string, number>()
    for (const name of new Set(valid.map((index) => index.table_name))) {
      const own = valid.filter((index) => index.table_name === name)
      const largest = Math.max(...own.map((index) => index.bytes))
      const [counted] = yield* statements.rowsUpTo(
        own[0]!.schema_name,
        name,
        Math.ceil(largest / bytesPerRowOfBloat) + 1
      )
      rows.set(name, counted!.n)
    }
    const indexes: Array<CompactedIndex> = []
    for (const index of valid) {
      const rebuilt = force ||
        (index.bytes > minBytes && index.bytes > rows.get(index.table_name)! * bytesPerRowOfBloat)
      if (rebuilt) yield* statements.reindex(index.schema_name, index.index_name)
      const bytesAfter = rebuilt ? (yield* statements.size(index.schema_name, index.index_name))[0]!.bytes : index.bytes
      indexes.push({ table: index.table_name, index: index.index_name, bytesBefore: index.bytes, bytesAfter, rebuilt })
    }
    return Option.some({ indexes, dropped })
  }))
