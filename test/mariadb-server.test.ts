/**
 * The MariaDB server the MySQL dialect is tested on (support/mariadb.ts), reached through `@effect/sql-mysql2`:
 * a version that has `SKIP LOCKED` (MariaDB ≥ 10.6, MySQL ≥ 8.0), and the claim's premise on it — a transaction's
 * `SELECT … FOR UPDATE SKIP LOCKED` passes over the rows another open transaction holds, and takes them once that
 * one ends.
 */
import * as MysqlClient from "@effect/sql-mysql2/MysqlClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { beforeAll, inject } from "vitest"
import { createMysqlDatabase } from "./support/mariadb.js"

let url = ""
beforeAll(async () => {
  url = await createMysqlDatabase(inject("mysqlUrl"), "mariadb_server")
})

const withMysql = <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.suspend(() =>
    Effect.provide(self, Layer.orDie(MysqlClient.layer({ url: Redacted.make(url), maxConnections: 4 })))
  )

/** "10.11.19-MariaDB-0+deb12u1" → [10, 11]; "8.0.36" → [8, 0]. */
const majorMinor = (version: string) => version.split(".").slice(0, 2).map(Number) as [number, number]

describe("MariaDB for the MySQL dialect", () => {
  it.live("is a version with SKIP LOCKED: MariaDB ≥ 10.6 or MySQL ≥ 8.0", () =>
    withMysql(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ readonly version: string }>`SELECT VERSION() AS version`
      const version = row!.version
      console.log(`MariaDB/MySQL ${version}`)
      const [major, minor] = majorMinor(version)
      const atLeast = (m: number, n: number) => major > m || (major === m && minor >= n)
      expect(version.includes("MariaDB") ? atLeast(10, 6) : atLeast(8, 0)).toBe(true)
    })))

  it.live("SELECT … FOR UPDATE SKIP LOCKED passes over the rows another open transaction holds", () =>
    withMysql(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE queue (id BIGINT AUTO_INCREMENT PRIMARY KEY, body TEXT NOT NULL) ENGINE = InnoDB`
      yield* sql`INSERT INTO queue (body) VALUES ('a'), ('b'), ('c'), ('d'), ('e')`
      const take = (n: number) =>
        Effect.map(
          sql<{ readonly id: number }>`SELECT id FROM queue ORDER BY id LIMIT ${n} FOR UPDATE SKIP LOCKED`,
          (rows) => rows.map((r) => Number(r.id))
        )
      const holding = yield* Deferred.make<ReadonlyArray<number>>()
      const release = yield* Deferred.make<void>()
      // The first claimer holds its two rows until told to end.
      const first = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* Deferred.succeed(holding, yield* take(2))
        yield* Deferred.await(release)
      })))
      expect(yield* Deferred.await(holding)).toEqual([1, 2])
      expect(yield* sql.withTransaction(take(2))).toEqual([3, 4])
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(first)
      expect(yield* sql.withTransaction(take(2))).toEqual([1, 2])
    })))
})
