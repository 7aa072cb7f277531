/**
 * The SQL dialects the command line speaks, chosen by the DSN's scheme: `postgres://` (PostgreSQL) or `mysql://`
 * / `mariadb://` (MySQL and MariaDB, through `@effect/sql-mysql2`, loaded only when a MySQL DSN is given).
 *
 * @internal
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type { OutboxConfigError, StorageNotReadyError, TransportError } from "../../domain/Errors.js"
import * as MysqlErrors from "../../layers/mysql/errors.js"
import * as MysqlIdempotencyStore from "../../layers/MysqlIdempotencyStore.js"
import * as MysqlTransport from "../../layers/MysqlTransport.js"
import * as PgErrors from "../../layers/pg/errors.js"
import * as PgIdempotencyStore from "../../layers/PgIdempotencyStore.js"
import * as PgTransport from "../../layers/PgTransport.js"
import type { IdempotencyStore } from "../../services/IdempotencyStore.js"
import type { TransportBackend } from "../../services/TransportAdmin.js"
import * as Optional from "./optional.js"

/** What a command needs of a dialect. @internal */
export interface Dialect {
  /** The server's name, for messages. */
  readonly name: string
  readonly client: (url: Redacted.Redacted) => Layer.Layer<SqlClient.SqlClient, unknown>
  readonly transport: (
    options: PgTransport.Options
  ) => Effect.Effect<TransportBackend, OutboxConfigError | TransportError, SqlClient.SqlClient>
  readonly queueNames: typeof PgTransport.queueNames
  readonly failedFrom: typeof PgTransport.failedFrom
  readonly idempotency: (
    options: PgIdempotencyStore.Options
  ) => Layer.Layer<IdempotencyStore, OutboxConfigError | TransportError, SqlClient.SqlClient>
  /** Whether `storage:compact` applies (PostgreSQL's indexes). */
  readonly compaction: boolean
  /** A failure on a table that is missing or not granted, as the transports report it; else `undefined`. */
  readonly notReady: (table: string, error: SqlError) => StorageNotReadyError | undefined
}

/** The dialect of the database the command runs on. @internal */
export class CliDialect extends Context.Tag("effect-outbox/cli/Dialect")<CliDialect, Dialect>() {}

const postgres: Dialect = {
  name: "PostgreSQL",
  client: (url) => PgClient.layer({ url, connectTimeout: "5 seconds" }),
  transport: PgTransport.make,
  queueNames: PgTransport.queueNames,
  failedFrom: PgTransport.failedFrom,
  idempotency: PgIdempotencyStore.layer,
  compaction: true,
  notReady: (table, error) => PgErrors.isStorageUnusable(error) ? PgErrors.storageNotReady(table, error) : undefined
}

const mysql: Dialect = {
  name: "MySQL",
  client: (url) =>
    Layer.unwrapEffect(
      Optional.load(Optional.mysql, () => import("@effect/sql-mysql2/MysqlClient")).pipe(
        Effect.map((MysqlClient) => MysqlClient.layer({ url: Redacted.make(mysqlUri(Redacted.value(url))) }))
      )
    ),
  transport: MysqlTransport.make,
  queueNames: MysqlTransport.queueNames,
  failedFrom: MysqlTransport.failedFrom,
  idempotency: MysqlIdempotencyStore.layer,
  compaction: false,
  notReady: (table, error) =>
    MysqlErrors.isStorageUnusable(error) ? MysqlErrors.storageNotReady(table, error) : undefined
}

/** `mariadb://…` as the driver reads it (`mysql://…`). */
const mysqlUri = (value: string): string => value.replace(/^mariadb:/, "mysql:")

/** The dialect of a DSN, by its scheme; `undefined` for one no dialect takes. @internal */
export const fromUrl = (value: string): Dialect | undefined => {
  const parsed = URL.canParse(value) ? new URL(value) : undefined
  if (parsed === undefined) return undefined
  if (/^(postgres|postgresql|socket):$/.test(parsed.protocol)) return postgres
  if (/^(mysql|mariadb):$/.test(parsed.protocol)) return mysql
  return undefined
}
