/**
 * Runs the examples end to end against a real PostgreSQL ($DATABASE_URL, or an embedded one it starts and stops):
 *
 * 1. `http-api`: started as a child process on a free port; creates orders and pays them over HTTP (one with a
 *    negative amount), waits for the worker's outcome lines, sends SIGTERM, and checks the exit code (0), one
 *    invoice per paid order, the negative one in the failure queue, and the traces it exported over OTLP to a
 *    stand-in collector (each payment's request, its `send` and the worker's `process` in one trace), and the
 *    dashboard mounted under `/outbox` (401 without the example's credentials, the failed message with them).
 * 2. `worker-only`: pays more orders in a script (the same `pay` transaction), runs `consume outbox --limit N`
 *    and checks its exit code and the invoices.
 *
 * Exits non-zero with a message on the first broken expectation.
 */
import { ConfigProvider, Effect, Layer } from "effect"
import * as child from "node:child_process"
import * as http from "node:http"
import * as path from "node:path"
import * as readline from "node:readline"
import { fileURLToPath } from "node:url"
import pg from "pg"
import * as EmbeddedPostgres from "../src/programs/EmbeddedPostgres.js"
import { OutboxLive, pay } from "./http-api/app.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const deadlineMs = 30_000

class ExampleFailure extends Error {}
const check = (condition: boolean, message: string) => {
  if (!condition) throw new ExampleFailure(message)
}

/** A child process run with tsx, its stdout and stderr collected and its lines offered to `waitFor`. */
const spawn = (file: string, args: ReadonlyArray<string>, env: Record<string, string>) => {
  const proc = child.spawn(process.execPath, ["--import", "tsx", file, ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const lines: Array<string> = []
  const waiters: Array<() => void> = []
  const onLine = (line: string) => {
    lines.push(line)
    for (const wake of waiters.splice(0)) wake()
  }
  readline.createInterface({ input: proc.stdout }).on("line", onLine)
  readline.createInterface({ input: proc.stderr }).on("line", onLine)
  const exited = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)))
  /** Resolves once `count` lines match, or throws at the deadline with what the process printed. */
  const waitFor = async (pattern: RegExp, count = 1) => {
    const deadline = Date.now() + deadlineMs
    while (lines.filter((line) => pattern.test(line)).length < count) {
      const left = deadline - Date.now()
      check(left > 0, `${file}: no ${count} line(s) matching ${pattern} within ${deadlineMs} ms:\n${lines.join("\n")}`)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left)
        waiters.push(() => (clearTimeout(timer), resolve()))
        proc.once("exit", () => (clearTimeout(timer), resolve()))
      })
      check(
        proc.exitCode === null || lines.filter((line) => pattern.test(line)).length >= count,
        `${file} exited early (${proc.exitCode}):\n${lines.join("\n")}`
      )
    }
  }
  return { proc, lines, exited, waitFor }
}

interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
}

/** A stand-in OTLP/HTTP collector: keeps the spans of every JSON export it receives on `/v1/traces`. */
const startCollector = async () => {
  const spans: Array<OtlpSpan> = []
  const server = http.createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      if (request.url === "/v1/traces") {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
          resourceSpans: ReadonlyArray<{ scopeSpans: ReadonlyArray<{ spans: ReadonlyArray<OtlpSpan> }> }>
        }
        for (const r of body.resourceSpans) for (const s of r.scopeSpans) spans.push(...s.spans)
      }
      response.writeHead(200, { "content-type": "application/json" }).end("{}")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as { port: number }
  return { endpoint: `http://127.0.0.1:${port}`, spans, close: () => server.close() }
}

const runHttpExample = async (db: pg.Client, url: string) => {
  const port = await EmbeddedPostgres.freePort()
  const collector = await startCollector()
  const app = spawn("examples/http-api/main.ts", [], {
    DATABASE_URL: url,
    PORT: String(port),
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
    DASHBOARD_PASSWORD: "example-password"
  })
  try {
    await app.waitFor(/listening on /)
    const post = (route: string, body?: unknown) =>
      fetch(`http://127.0.0.1:${port}${route}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) })
      })
    const amounts = [1200, 4500, 990, -500]
    const ids: Array<number> = []
    for (const amountCents of amounts) {
      const created = await post("/orders", { amountCents })
      check(created.status === 201, `POST /orders answered ${created.status}`)
      ids.push(((await created.json()) as { id: number }).id)
    }
    for (const id of ids) {
      const paid = await post(`/orders/${id}/pay`)
      check(paid.status === 204, `POST /orders/${id}/pay answered ${paid.status}: ${await paid.text()}`)
    }
    const again = await post(`/orders/${ids[0]}/pay`)
    check(again.status === 404, `paying order ${ids[0]} twice answered ${again.status}, not 404`)
    const invalid = await post("/orders", { amountCents: "a lot" })
    check(invalid.status === 400, `an invalid body answered ${invalid.status}, not 400`)

    await app.waitFor(/handled OrderPaid /, 3)
    await app.waitFor(/failed OrderPaid .*negative amount/)
    // The dashboard, mounted under /outbox behind the example's own authentication (HTTP Basic).
    const dashboard = (route: string, credentials?: string) =>
      fetch(`http://127.0.0.1:${port}/outbox${route}`, {
        headers: credentials === undefined
          ? {}
          : { authorization: `Basic ${Buffer.from(credentials).toString("base64")}` }
      })
    const closed = await dashboard("/failed")
    check(closed.status === 401, `the dashboard without credentials answered ${closed.status}, not 401`)
    const opened = await dashboard("/failed", "admin:example-password")
    const listed = await opened.text()
    check(
      opened.status === 200 && listed.includes("negative amount"),
      `the dashboard answered ${opened.status} without the failed message:\n${listed}`
    )
    console.log("✔ http-api: the dashboard under /outbox, behind the application's authentication, shows the failure")
    app.proc.kill("SIGTERM")
    const code = await app.exited
    check(code === 0, `http-api exited with ${code} on SIGTERM, not 0:\n${app.lines.join("\n")}`)

    const invoices = await db.query<{ order_id: string; n: string }>(
      "SELECT order_id, count(*) AS n FROM invoices GROUP BY order_id ORDER BY order_id"
    )
    const expected = ids.filter((_, i) => amounts[i]! >= 0)
    check(
      JSON.stringify(invoices.rows.map((row) => [Number(row.order_id), Number(row.n)])) ===
        JSON.stringify(expected.map((id) => [id, 1])),
      `invoices per order: ${JSON.stringify(invoices.rows)}, expected one for each of ${expected.join(", ")}`
    )
    const failed = await db.query("SELECT 1 FROM messenger_messages WHERE queue_name = 'failed'")
    check(failed.rowCount === 1, `${failed.rowCount} message(s) in the failure queue, expected 1`)
    console.log(`✔ http-api: ${expected.length} orders paid over HTTP and invoiced once each; the negative one failed`)

    // Over OTLP: each payment's request, its `send` and the worker's `process` of it in one trace.
    const spans = collector.spans
    const byId = new Map(spans.map((span) => [span.spanId, span]))
    const sends = spans.filter((span) => span.name === "send outbox")
    check(sends.length === ids.length, `${sends.length} \`send outbox\` spans exported, expected ${ids.length}`)
    for (const send of sends) {
      let request = send.parentSpanId === undefined ? undefined : byId.get(send.parentSpanId)
      while (request !== undefined && !request.name.startsWith("http.server")) {
        request = request.parentSpanId === undefined ? undefined : byId.get(request.parentSpanId)
      }
      check(request !== undefined, `send ${send.spanId} is not inside an HTTP request's span`)
      const processes = spans.filter((span) => span.name === "process outbox" && span.parentSpanId === send.spanId)
      check(processes.length === 1, `send ${send.spanId}: ${processes.length} \`process outbox\` children, expected 1`)
      check(processes[0]!.traceId === request!.traceId, `process ${processes[0]!.spanId} is not in the request's trace`)
    }
    console.log(
      `✔ http-api: ${sends.length} traces over OTLP from the request through dispatch to the worker's handler`
    )
  } finally {
    if (app.proc.exitCode === null) app.proc.kill("SIGKILL")
    collector.close()
  }
}

const runWorkerOnlyExample = async (db: pg.Client, url: string) => {
  const created = await db.query<{ id: string }>(
    "INSERT INTO orders (amount_cents) VALUES (700), (800) RETURNING id"
  )
  const ids = created.rows.map((row) => Number(row.id))
  const Live = OutboxLive.pipe(Layer.provide(Layer.setConfigProvider(configFrom({ DATABASE_URL: url }))))
  await Effect.runPromise(Effect.forEach(ids, pay, { discard: true }).pipe(Effect.provide(Live)))

  const worker = spawn("examples/worker-only/main.ts", ["consume", "outbox", "--limit", String(ids.length)], {
    DATABASE_URL: url
  })
  const code = await worker.exited
  check(code === 0, `worker-only exited with ${code}, not 0:\n${worker.lines.join("\n")}`)
  const invoiced = await db.query<{ n: string }>(
    "SELECT count(*) AS n FROM invoices WHERE order_id = ANY($1::bigint[])",
    [ids]
  )
  check(
    Number(invoiced.rows[0]!.n) === ids.length,
    `worker-only issued ${invoiced.rows[0]!.n} invoices, not ${ids.length}`
  )
  const pending = await db.query("SELECT 1 FROM messenger_messages WHERE queue_name = 'outbox'")
  check(pending.rowCount === 0, `${pending.rowCount} message(s) left in the outbox`)
  console.log(`✔ worker-only: consume outbox --limit ${ids.length} invoiced ${ids.length} orders and exited 0`)
}

const configFrom = (env: Record<string, string>) => ConfigProvider.fromMap(new Map(Object.entries(env)))

const main = async () => {
  const started = Date.now()
  const embedded = process.env.DATABASE_URL === undefined ? await EmbeddedPostgres.start() : undefined
  // A database of its own, so the checks count only what the examples wrote.
  const serverUrl = new URL(process.env.DATABASE_URL ?? embedded!.url)
  const database = `effect_outbox_examples_${process.pid}`
  const admin = new pg.Client({ connectionString: serverUrl.href })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  const url = Object.assign(new URL(serverUrl.href), { pathname: `/${database}` }).href
  const db = new pg.Client({ connectionString: url })
  try {
    await db.connect()
    await runHttpExample(db, url)
    await runWorkerOnlyExample(db, url)
    console.log(`examples passed in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  } finally {
    await db.end().catch(() => undefined)
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined)
    await admin.end().catch(() => undefined)
    await embedded?.stop()
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof ExampleFailure ? `✘ ${error.message}` : error)
  process.exit(1)
})
