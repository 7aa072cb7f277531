/**
 * Index compaction of a transport table. A vacuum empties the table's file after a drain, but a btree index keeps
 * its pages: they are reused by later rows, never returned. Rebuilding an index with `REINDEX CONCURRENTLY` returns
 * them without blocking producers or workers (it blocks only other maintenance of the table while it runs).
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Statements from "./sql/compaction.js"
import { keySequences, keyStates, waitingWorkers } from "./sql/identifiers.js"

/** One index of a transport table's tables, and what compaction did with it. @internal */
export interface CompactedIndex {
  readonly table: string
  readonly index: string
  readonly bytesBefore: number
  readonly bytesAfter: number
  readonly rebuilt: boolean
}

/** What one compaction did. @internal */
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

/** The advisory lock of a table's compactor. @internal */
export const lockName = (table: string): string => `effect-outbox:compact:${table}`

/**
 * Rebuilds the indexes of `table` and its companion tables that are bigger than `minBytes` and mostly empty (all of
 * them with `force`), first dropping what an interrupted rebuild left. `None`: another compactor holds the table.
 *
 * @internal
 */
export const compact = (
  table: string,
  options: { readonly force: boolean; readonly minBytes: number }
): Effect.Effect<Option.Option<Compaction>, SqlError, SqlClient.SqlClient> =>
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const statements = Statements.make(yield* sql.reserve)
    const lock = lockName(table)
    const [row] = yield* statements.tryLock(lock)
    if (row?.locked !== true) return Option.none()
    yield* Effect.addFinalizer(() => Effect.ignore(statements.unlock(lock)))

    const tables = [table, keySequences(table), keyStates(table), waitingWorkers(table)]
    const found = yield* statements.indexes(tables)
    const dropped: Array<string> = []
    for (const index of found) {
      if (index.valid || !leftover.test(index.index_name)) continue
      yield* statements.drop(index.schema_name, index.index_name)
      dropped.push(index.index_name)
    }

    const valid = found.filter((index) => index.valid)
    const rows = new Map<string, number>()
    for (const name of new Set(valid.map((index) => index.table_name))) {
      const largest = Math.max(...valid.filter((index) => index.table_name === name).map((index) => index.bytes))
      const schema = valid.find((index) => index.table_name === name)!.schema_name
      const [counted] = yield* statements.rowsUpTo(schema, name, Math.ceil(largest / bytesPerRowOfBloat) + 1)
      rows.set(name, counted!.n)
    }
    const indexes: Array<CompactedIndex> = []
    for (const index of valid) {
      const bloated = index.bytes > options.minBytes && index.bytes > rows.get(index.table_name)! * bytesPerRowOfBloat
      if (!options.force && !bloated) {
        indexes.push({
          table: index.table_name,
          index: index.index_name,
          bytesBefore: index.bytes,
          bytesAfter: index.bytes,
          rebuilt: false
        })
        continue
      }
      yield* statements.reindex(index.schema_name, index.index_name)
      const [after] = yield* statements.size(index.schema_name, index.index_name)
      indexes.push({
        table: index.table_name,
        index: index.index_name,
        bytesBefore: index.bytes,
        bytesAfter: after!.bytes,
        rebuilt: true
      })
    }
    return Option.some({ indexes, dropped })
  }))
