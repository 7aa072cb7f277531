/**
 * A LISTEN connection that comes back: @effect/sql-pg's `listen` never reconnects and can hang silently
 * when its backend dies, so the transport keeps its own dedicated `pg.Client`, re-established with backoff,
 * health-checked with `SELECT 1`, and says so (one wake-up) after every reconnect so nothing sent while it
 * was away is waited for until the next poll.
 *
 * @internal
 */
import type { PgClientConfig } from "@effect/sql-pg/PgClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import pg from "pg"

/** @internal */
export interface ListenerOptions {
  readonly config: PgClientConfig
  readonly channel: string
  /** Called with each payload, and with `"*"` after every (re)connection. */
  readonly onNotify: (payload: string) => void
  /** How often the connection is checked with `SELECT 1` (default 10 s). */
  readonly healthCheck?: Duration.DurationInput
}

/** A listening session: resolves never, fails when the connection is lost. @internal */
const session = (options: ListenerOptions) =>
  Effect.async<never, Error>((resume) => {
    const { config } = options
    const client = new pg.Client({
      ...(config.url ? { connectionString: Redacted.value(config.url) } : {}),
      ...(config.host ? { host: config.host } : {}),
      ...(config.port ? { port: config.port } : {}),
      ...(config.database ? { database: config.database } : {}),
      ...(config.username ? { user: config.username } : {}),
      ...(config.password ? { password: Redacted.value(config.password) } : {}),
      ...(config.ssl !== undefined ? { ssl: config.ssl } : {}),
      ...(config.stream ? { stream: config.stream } : {}),
      connectionTimeoutMillis: config.connectTimeout ? Duration.toMillis(config.connectTimeout) : 5_000,
      application_name: "effect-outbox listener",
      keepAlive: true
    })
    let finished = false
    let timer: ReturnType<typeof setInterval> | undefined
    const close = () => {
      if (timer !== undefined) clearInterval(timer)
      client.removeAllListeners("notification")
      client.end().catch(() => undefined)
    }
    const fail = (error: unknown) => {
      if (finished) return
      finished = true
      close()
      resume(Effect.fail(error instanceof Error ? error : new Error(String(error))))
    }
    client.on("error", fail)
    client.on("end", () => fail(new Error("listener connection closed")))
    client.on("notification", (message) => {
      if (message.channel === options.channel) options.onNotify(message.payload ?? "")
    })
    const checkMs = Duration.toMillis(Duration.decode(options.healthCheck ?? "10 seconds"))
    client.connect()
      .then(() => client.query(`LISTEN "${options.channel}"`))
      .then(() => {
        if (finished) return
        options.onNotify("*")
        timer = setInterval(() => {
          const deadline = setTimeout(() => fail(new Error("listener health check timed out")), 5_000)
          client.query("SELECT 1").then(() => clearTimeout(deadline), (error) => {
            clearTimeout(deadline)
            fail(error)
          })
        }, checkMs)
      })
      .catch(fail)
    return Effect.sync(() => {
      finished = true
      close()
    })
  })

/**
 * Listens on `channel` for as long as the scope lives, reconnecting with backoff (100 ms doubling up to
 * 5 s) whenever the connection is lost.
 *
 * @internal
 */
export const listen = (options: ListenerOptions): Effect.Effect<void, never, Scope.Scope> =>
  session(options).pipe(
    Effect.catchAll((error) =>
      Effect.logWarning(`outbox: LISTEN connection lost (${error.message}); reconnecting`).pipe(
        Effect.zipRight(Effect.fail(error))
      )
    ),
    Effect.retry(Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")))),
    // Forked from wherever it is started (often an uninterruptible acquire): it must stay interruptible.
    Effect.interruptible,
    Effect.forkScoped,
    Effect.asVoid
  )
