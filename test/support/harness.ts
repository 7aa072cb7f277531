import * as PgClient from "@effect/sql-pg/PgClient"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type { Routing } from "../../src/domain/Routing.js"
import * as PgTransport from "../../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"

let tables = 0

/** A unique table name for one test. */
export const uniqueTable = (prefix = "outbox") => `${prefix}_${process.pid}_${++tables}`

/** A PgClient layer for a database URL. */
export const pgLayer = (url: string, maxConnections = 10) =>
  PgClient.layer({ url: Redacted.make(url), maxConnections })

/** Outbox, transport (set up on build), retry strategy and handlers over the SqlClient in context. */
export const outboxStack = <const Hs extends ReadonlyArray<Handlers.Handler.Any>>(options: {
  readonly handlers: Hs
  readonly table: string
  readonly transports?: PgTransport.Options["transports"]
  readonly retry?: ScheduleRetryStrategy.Options
  readonly routing?: Routing
}) =>
  Layer.mergeAll(
    Outbox.layer(options.routing),
    Handlers.layer(options.handlers),
    ScheduleRetryStrategy.layer(options.retry)
  ).pipe(
    Layer.provideMerge(
      PgTransport.layer({ table: options.table, transports: options.transports ?? { outbox: {} }, autoSetup: true })
    )
  )
