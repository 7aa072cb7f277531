/**
 * The latency scenario's clocks. `monotonicMs` is a millisecond clock every process of this machine shares
 * (`CLOCK_MONOTONIC`): times taken in a producer process and in the worker process can be subtracted.
 */
import pg from "pg"

export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6

let lastCommitAt = Number.NaN
let installed = false

/**
 * Installs (once per process) a hook on `pg`'s client that notes when the response to a `COMMIT` arrives, and
 * returns a reader of the latest such time: the moment the producer's commit returned, before the
 * application's own code (releasing the connection, closing scopes, resolving promises) runs on. Both
 * contenders' producers commit through `pg` (via @effect/sql-pg).
 */
export const commitClock = (): () => number => {
  if (!installed) {
    installed = true
    const proto = pg.Client.prototype as unknown as { query: (...args: Array<unknown>) => unknown }
    const query = proto.query
    proto.query = function(this: unknown, ...args: Array<unknown>) {
      const callback = args[2]
      if (args[0] === "COMMIT" && typeof callback === "function") {
        return query.call(this, args[0], args[1], (error: unknown, result: unknown) => {
          lastCommitAt = monotonicMs()
          ;(callback as (e: unknown, r: unknown) => void)(error, result)
        })
      }
      return query.apply(this, args)
    }
  }
  return () => lastCommitAt
}
