/**
 * `MysqlClient` layers on the test run's MariaDB server (support/mariadb.ts): a fresh database per caller.
 */
import * as MysqlClient from "@effect/sql-mysql2/MysqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { inject } from "vitest"
import * as MysqlTransport from "../../src/layers/MysqlTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { createMysqlDatabase } from "./mariadb.js"

/** A `MysqlClient` layer for a database URL. */
export const mysqlLayer = (url: string, maxConnections = 10) =>
  MysqlClient.layer({ url: Redacted.make(url), maxConnections })

/** Creates a fresh database on the test server (named after `prefix`) and returns its URL. */
export const createTestMysqlDatabase = (prefix: string): Promise<string> =>
  createMysqlDatabase(inject("mysqlUrl"), prefix)

/** A `MysqlClient` layer (as `SqlClient`) on a fresh database of the test server, named after `prefix`. */
export const freshMysqlDatabase = (prefix: string, options: { readonly maxConnections?: number } = {}) =>
  Layer.unwrapEffect(
    Effect.promise(() => createTestMysqlDatabase(prefix)).pipe(
      Effect.map((url) => mysqlLayer(url, options.maxConnections ?? 10))
    )
  )

/** Outbox, the MySQL transport (set up on build), retry strategy and handlers over the SqlClient in context. */
export const mysqlOutboxStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(options: {
  readonly handlers: Hs
  readonly table: string
  readonly transports?: MysqlTransport.Options["transports"]
  readonly retry?: ScheduleRetryStrategy.Options
}) =>
  Layer.mergeAll(
    Outbox.layer(),
    Handlers.layer(options.handlers),
    ScheduleRetryStrategy.layer(options.retry)
  ).pipe(
    Layer.provideMerge(
      MysqlTransport.layer({ table: options.table, transports: options.transports ?? { outbox: {} }, autoSetup: true })
    )
  )
