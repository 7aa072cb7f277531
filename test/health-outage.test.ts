/**
 * `consume --metrics-port --stall-after` through a PostgreSQL outage, on a real worker process: the probes answer
 * 200, then — the server stopped, its postmaster gone — `/readyz` says the storage failed and `/healthz` that the
 * loop stalled past its bound, then both answer 200 again once the server is back, and the worker handles what is
 * dispatched after it. The server is this file's own (stopping the suite's shared one would fail the other files),
 * so the test runs on it whether or not DATABASE_URL names a server, as the other outage tests do.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Outbox from "../src/services/Outbox.js"
import { type Proc, spawnScript } from "./support/cli.js"
import { ownServer } from "./support/database.js"
import { outboxStack, pgLayer, uniqueTable } from "./support/harness.js"
import { OrderPaid } from "./support/messages.js"

/** How long any awaited state may take to appear: generous for a busy machine, it only ends a test that hangs. */
const deadlineMs = 60_000

/** One answer of the endpoint. */
interface Answer {
  readonly status: number
  readonly body: string
}

const get = (port: number, route: string) =>
  Effect.tryPromise(async (): Promise<Answer> => {
    const response = await fetch(`http://127.0.0.1:${port}${route}`, { signal: AbortSignal.timeout(5_000) })
    return { status: response.status, body: await response.text() }
  })

/** Asks `route` every 150 ms until it answers `status`, and returns that answer (dies after `deadlineMs`). */
const awaitStatus = (port: number, route: string, status: number) =>
  Effect.gen(function*() {
    const deadline = Date.now() + deadlineMs
    while (true) {
      const answer = yield* Effect.either(get(port, route))
      if (Either.isRight(answer) && answer.right.status === status) return answer.right
      if (Date.now() > deadline) {
        const last = Either.isRight(answer) ? `${answer.right.status} ${answer.right.body}` : String(answer.left)
        return yield* Effect.dieMessage(`${route} did not answer ${status} within ${deadlineMs} ms (last: ${last})`)
      }
      yield* Effect.sleep("150 millis")
    }
  })

/** Waits until `check` holds, asking every 150 ms (dies after `deadlineMs` with `what`). */
const awaitTrue = (what: string, check: () => boolean) =>
  Effect.gen(function*() {
    const deadline = Date.now() + deadlineMs
    while (!check()) {
      if (Date.now() > deadline) return yield* Effect.dieMessage(`${what}: not within ${deadlineMs} ms`)
      yield* Effect.sleep("150 millis")
    }
  })

/** A line the process prints, within `deadlineMs`. */
const awaitLine = (proc: Proc, pattern: RegExp) =>
  Effect.promise(() => proc.waitFor(pattern)).pipe(
    Effect.timeoutFail({
      duration: deadlineMs,
      onTimeout: () => new Error(`no line ${pattern} within ${deadlineMs} ms:\n${proc.lines.join("\n")}`)
    }),
    Effect.orDie
  )

/** Whether a process of this pid exists (the test runs as the postmaster's user or as root). */
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** SIGTERM, then SIGKILL if it is still there after a while: a test that failed midway leaves no process behind. */
const stopProcess = (proc: Proc) =>
  Effect.promise(async () => {
    proc.kill("SIGTERM")
    const killed = setTimeout(() => proc.kill("SIGKILL"), 30_000)
    await proc.exited
    clearTimeout(killed)
  })

describe("the worker's probes through a PostgreSQL outage", () => {
  const server = ownServer()

  it.live(
    "/readyz and /healthz turn 503 while the server is down (stalled past --stall-after), 200 once it is back",
    () =>
      Effect.gen(function*() {
        const pg = server()
        const table = uniqueTable("health_outage")
        // Each its own short-lived pool, closed before the server stops: only the worker sees the outage.
        const dispatch = (orderId: number) =>
          Outbox.dispatch(new OrderPaid({ orderId, amount: 1 })).pipe(
            Effect.provide(outboxStack({ table, handlers: [] }).pipe(Layer.provideMerge(Layer.orDie(pgLayer(pg.url)))))
          )
        yield* dispatch(1)
        const worker = yield* Effect.acquireRelease(
          Effect.sync(() =>
            spawnScript(
              "test/fixtures/cli-app.ts",
              ["consume", "outbox", "--metrics-port", "0", "--stall-after", "2", "--sleep", "0.5"],
              { DATABASE_URL: pg.url, OUTBOX_TABLE: table, FIXTURE_HANDLER: "log" }
            )
          ),
          stopProcess
        )
        const serving = yield* awaitLine(worker, /^\[OK\] Serving \/metrics/)
        const port = Number(/:(\d+)\.$/.exec(serving)![1])
        yield* awaitLine(worker, /handled order 1\b/)
        expect(yield* awaitStatus(port, "/healthz", 200)).toEqual({ status: 200, body: "ok\n" })
        expect(yield* awaitStatus(port, "/readyz", 200)).toEqual({ status: 200, body: "ok\n" })

        // The outage: the postmaster stopped and gone, so every connection is refused.
        const postmaster = Number(fs.readFileSync(path.join(pg.dataDir, "postmaster.pid"), "utf8").split("\n")[0])
        expect(alive(postmaster)).toBe(true)
        yield* Effect.promise(() => pg.halt("fast"))
        yield* awaitTrue(`the postmaster (pid ${postmaster}) exits`, () => !alive(postmaster))

        const notReady = yield* awaitStatus(port, "/readyz", 503)
        expect(notReady.body).toMatch(/^storage failure: .+\n$/s)
        const notLive = yield* awaitStatus(port, "/healthz", 503)
        expect(notLive.body).toMatch(/^the worker's loop made no progress for \d.*\n$/s)
        // Bounded: the endpoint cuts a reason to 500 characters, whatever the driver's error said.
        for (const { body } of [notReady, notLive]) expect(body.length).toBeLessThanOrEqual(501)

        yield* Effect.promise(() => pg.resume())
        expect(yield* awaitStatus(port, "/readyz", 200)).toEqual({ status: 200, body: "ok\n" })
        expect(yield* awaitStatus(port, "/healthz", 200)).toEqual({ status: 200, body: "ok\n" })
        yield* dispatch(2)
        yield* awaitLine(worker, /handled order 2\b/)

        worker.kill("SIGTERM")
        const { code } = yield* Effect.promise(() => worker.exited)
        expect(code, worker.lines.join("\n") + worker.stderr.join("")).toBe(0)
        expect(worker.lines.join("\n")).toContain("storage failure, restarting the loop")
      }).pipe(Effect.scoped),
    120_000
  )
})
