import * as PgClient from "@effect/sql-pg/PgClient"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import pg from "pg"
import { afterAll, beforeAll, inject } from "vitest"
import type * as EmbeddedPostgres from "../../src/programs/EmbeddedPostgres.js"
import { startPostgres } from "./postgres.js"

/** The URL of the server's maintenance database, from the global setup. */
export const adminUrl = (): string => inject("adminDatabaseUrl")

/**
 * Creates a fresh database on the test server — or on the server whose maintenance database `serverUrl` names (a
 * file's `ownServer()`) — and returns its URL.
 */
export const createDatabase = async (prefix = "t", serverUrl = adminUrl()): Promise<string> => {
  const name = `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
  const client = new pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(`CREATE DATABASE "${name}"`)
  } finally {
    await client.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** A PgClient layer for a database URL. */
export const pgLayer = (url: string, maxConnections = 10) => PgClient.layer({ url: Redacted.make(url), maxConnections })

/** A PgClient layer on a fresh database. */
export const freshDatabase = (options: { readonly maxConnections?: number } = {}) =>
  Layer.unwrapEffect(
    Effect.promise(() => createDatabase()).pipe(
      Effect.map((url) => pgLayer(url, options.maxConnections ?? 10))
    )
  )

/** A test file's own database: created before its tests, and a way to run effects on it. */
export interface TestDatabase {
  /** Its URL (set once the file's `beforeAll` has run). */
  readonly url: string
  /** Runs an effect with a PgClient (pool of `maxConnections`, default 10) on the database. */
  readonly withPg: <A, E, R>(
    self: Effect.Effect<A, E, R>,
    maxConnections?: number
  ) => Effect.Effect<A, E, Exclude<R, PgClient.PgClient | SqlClient.SqlClient>>
}

/**
 * Registers a `beforeAll` that creates a fresh database (named after `prefix`) for the calling test file, and
 * returns it. Call it at the top level of the file.
 */
export const testDatabase = (prefix: string): TestDatabase => {
  let url = ""
  beforeAll(async () => {
    url = await createDatabase(prefix)
  })
  return {
    get url() {
      return url
    },
    withPg: (self, maxConnections = 10) =>
      Effect.suspend(() => Effect.provide(self, Layer.orDie(pgLayer(url, maxConnections))))
  }
}

/** Runs a query on a URL with a short-lived pg client (for assertions outside Effect). */
export const query = async <R extends Record<string, unknown>>(
  url: string,
  text: string,
  params: Array<unknown> = []
): Promise<Array<R>> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text, params)).rows as Array<R>
  } finally {
    await client.end()
  }
}

/**
 * A PostgreSQL server of the calling `describe`'s own, started before its tests and stopped after them: for tests
 * that stop or restart it (the suite's shared server must stay up for the other files). Call the result for it.
 */
export const ownServer = (): () => EmbeddedPostgres.RunningPostgres => {
  let server: EmbeddedPostgres.RunningPostgres | undefined
  beforeAll(async () => {
    server = await startPostgres()
  }, 60_000)
  afterAll(async () => {
    await server?.stop()
  })
  return () => server!
}
