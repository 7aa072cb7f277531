/**
 * What the chaos run does differently on MariaDB: the server it starts (a private `mariadbd` it stops with SIGTERM
 * or SIGKILL and starts again), the probes' connections and the SQL they send, the business tables. The database
 * URL's scheme says which (`mysql://` is MariaDB), so worker processes and probes follow the scenario's database.
 */
import { createConnection } from "mysql2/promise"
import { startPrivateMariadb } from "../test/support/mariadb.js"
import type { ChaosServer } from "./postgres.js"

/** The servers the chaos run can target. */
export type DialectName = "postgres" | "mariadb"

/** The dialect of a database URL. */
export const dialectOf = (url: string): DialectName => url.startsWith("mysql:") ? "mariadb" : "postgres"

/** A private MariaDB server as a `ChaosServer`: `fast` stops it cleanly, `immediate` kills it (InnoDB recovers). */
export const startMariadbServer = async (): Promise<ChaosServer> => {
  const server = await startPrivateMariadb()
  const halt = (mode: string) => server.halt(mode === "immediate" ? "immediate" : "fast")
  return {
    adminUrl: server.url,
    dataDir: server.dir,
    stop: halt,
    start: server.resume,
    restart: async (mode) => {
      await halt(mode)
      await server.resume()
    },
    destroy: server.stop
  }
}

/** One query on a short-lived MariaDB connection (`?` placeholders). */
export const mysqlQuery = async <R>(url: string, text: string, params: ReadonlyArray<unknown>): Promise<Array<R>> => {
  const connection = await createConnection({ uri: url, connectTimeout: 2000 })
  connection.on("error", () => {})
  try {
    const [rows] = await connection.query(text, [...params] as Array<{} | null>)
    return rows as Array<R>
  } finally {
    await connection.end().catch(() => undefined)
  }
}

/** The business tables of `model.ts` (see there), on MariaDB. */
export const mariadbBusinessTables = [
  `CREATE TABLE chaos_orders (n INT PRIMARY KEY, message_id CHAR(36) NOT NULL)`,
  `CREATE TABLE chaos_effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, message_id CHAR(36) NOT NULL,
     n INT NOT NULL, pid INT NOT NULL, at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`,
  `CREATE TABLE chaos_deliveries (message_id CHAR(36) NOT NULL, pid INT NOT NULL,
     at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`
]
