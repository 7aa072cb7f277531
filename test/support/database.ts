import * as PgClient from "@effect/sql-pg/PgClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import pg from "pg"
import { inject } from "vitest"

/** The URL of the server's maintenance database, from the global setup. */
export const adminUrl = (): string => inject("adminDatabaseUrl")

/** Creates a fresh database on the test server and returns its URL. */
export const createDatabase = async (prefix = "t"): Promise<string> => {
  const name = `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
  const client = new pg.Client({ connectionString: adminUrl() })
  await client.connect()
  try {
    await client.query(`CREATE DATABASE "${name}"`)
  } finally {
    await client.end()
  }
  const url = new URL(adminUrl())
  url.pathname = `/${name}`
  return url.toString()
}

/** A PgClient layer on a fresh database. */
export const freshDatabase = (options: { readonly maxConnections?: number } = {}) =>
  Layer.unwrapEffect(
    Effect.promise(() => createDatabase()).pipe(
      Effect.map((url) =>
        PgClient.layer({ url: Redacted.make(url), maxConnections: options.maxConnections ?? 10 })
      )
    )
  )

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
