/**
 * The web dashboard in a real Chromium (Debian's, installed when missing, driven by playwright-core) against a real
 * PostgreSQL: served by the `outbox` binary, and by the router in process for paging a large failure queue.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Browser, Page } from "playwright-core"
import { UnrecoverableMessageHandlingError } from "../src/domain/Errors.js"
import * as Headers from "../src/domain/Headers.js"
import * as MessageId from "../src/domain/MessageId.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import * as Dashboard from "../src/programs/dashboard/Dashboard.js"
import * as Worker from "../src/programs/worker/Worker.js"
import * as Handlers from "../src/services/Handlers.js"
import * as Outbox from "../src/services/Outbox.js"
import { Transport } from "../src/services/Transport.js"
import { launchChromium, type RunningChromium } from "./support/chromium.js"
import { type Proc, spawnScript } from "./support/cli.js"
import { testDatabase } from "./support/database.js"
import { outboxStack, uniqueTable } from "./support/harness.js"
import { track } from "./support/leftovers.js"
import { OrderPaid, OrderShipped } from "./support/messages.js"

const db = testDatabase("dashboard")
const { withPg } = db

const token = "s3cret-operator-token"
const hostileText = `<img src=x onerror="alert('body')"></script><script>alert('script')</script>`
/** Where the screenshots go: docs/ when asked (`UPDATE_SCREENSHOTS=1`), else a temporary directory. */
const screenshots = process.env["UPDATE_SCREENSHOTS"] === "1" ? "docs" : mkdtempSync(join(tmpdir(), "dashboard-"))
const screenshotsDir = screenshots === "docs"
  ? undefined
  : track({ label: "screenshots", processes: [], dirs: [screenshots] })

let table = ""
let chromium: RunningChromium | undefined
let browser: Browser
const procs: Array<Proc> = []
/** The binary's dashboard with the token, and one without (read-only). */
let withToken = ""
let readOnly = ""

/** Every OrderShipped fails (a defect), OrderPaid 2 fails unrecoverably; the rest are handled. */
const seed = () =>
  withPg(
    Effect.gen(function*() {
      const outbox = yield* Outbox.Outbox
      yield* outbox.dispatchAll([1, 2, 3].map((orderId) => new OrderPaid({ orderId, amount: 10 })))
      yield* outbox.dispatchAll([new OrderShipped({ orderId: 7, carrier: "ups" })])
      yield* Worker.run({ transports: ["outbox"], stopWhenEmpty: true })
      // A hostile failed message: every field an attacker could write into.
      const transport = yield* Transport
      yield* transport.send("failed", [{
        messageId: MessageId.make(),
        type: hostileText,
        body: hostileText,
        headers: Headers.encode(
          new Headers.Headers({
            type: hostileText,
            errorDetails: new Headers.ErrorDetails({ tag: hostileText, message: hostileText, cause: hostileText }),
            originalTransport: "outbox",
            custom: { note: hostileText }
          })
        ),
        delayMs: 0
      }])
      // Two ready and one delayed message stay in `outbox` for the overview's counts.
      yield* outbox.dispatchAll([
        new OrderPaid({ orderId: 100, amount: 1 }),
        new OrderPaid({ orderId: 101, amount: 1 })
      ])
      yield* outbox.dispatch(new OrderPaid({ orderId: 102, amount: 1 }), { delay: "1 hour" })
    }).pipe(Effect.provide(outboxStack({
      table,
      handlers: [
        Handlers.handler(OrderPaid, (m) =>
          m.orderId === 2
            ? Effect.fail(new UnrecoverableMessageHandlingError({ message: `order ${m.orderId} cannot be paid` }))
            : Effect.void),
        Handlers.handler(OrderShipped, () => Effect.die(new Error("carrier API exploded")))
      ],
      // One retry, at once: a failed OrderShipped has a retry history.
      retry: { default: Schedule.recurs(1) }
    })))
  )

/** Starts `outbox dashboard` on a free port; resolves with its URL once it says it serves. */
const startBinary = async (env: Record<string, string>) => {
  const proc = spawnScript("src/programs/outbox-main.ts", ["dashboard", "--port", "0", "--table", table], {
    DATABASE_URL: db.url,
    ...env
  })
  procs.push(proc)
  const line = await proc.waitFor(/Serving the dashboard on /)
  return /on (http:\/\/\S+?)\/?$/.exec(line)![1]!
}

beforeAll(async () => {
  table = uniqueTable("dashboard")
  await Effect.runPromise(seed())
  ;[withToken, readOnly] = await Promise.all([
    startBinary({ OUTBOX_DASHBOARD_TOKEN: token }),
    startBinary({ OUTBOX_DASHBOARD_TOKEN: "" })
  ])
  chromium = await launchChromium()
  browser = chromium.browser
}, 600_000) // on a fresh machine, the first run installs Debian's chromium

afterAll(async () => {
  await chromium?.close()
  for (const proc of procs) proc.kill("SIGTERM")
  await Promise.all(procs.map((proc) => proc.exited))
  if (screenshots !== "docs") rmSync(screenshots, { recursive: true, force: true })
  screenshotsDir?.release()
})

/** A page that records every dialog, console error and uncaught error it sees. */
const watchedPage = async (options: { readonly javaScriptEnabled?: boolean } = {}) => {
  const context = await browser.newContext({ javaScriptEnabled: options.javaScriptEnabled ?? true })
  const page = await context.newPage()
  const incidents: Array<string> = []
  page.on("dialog", (dialog) => {
    incidents.push(`dialog: ${dialog.message()}`)
    void dialog.dismiss()
  })
  page.on("console", (message) => {
    if (message.type() === "error") incidents.push(`console: ${message.text()}`)
  })
  page.on("pageerror", (error) => incidents.push(`pageerror: ${error.message}`))
  return { page, incidents, close: () => context.close() }
}

/** The ids of the failed list's rows on the page. */
const listedIds = (page: Page) =>
  page.locator("#failed tbody tr").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-id")))

/** The id of the failed message whose type cell says `type`. */
const idOfType = async (page: Page, base: string, type: string) => {
  await page.goto(`${base}/failed`)
  const row = page.locator("#failed tbody tr", { has: page.locator("td.type", { hasText: type }) })
  return (await row.getAttribute("data-id"))!
}

const failedIds = (transportTable: string) =>
  withPg(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ id: string }>`SELECT id::text FROM ${sql(transportTable)} WHERE queue_name = 'failed'
        ORDER BY ${sql(transportTable)}.id`)
  ).pipe(Effect.map((rows) =>
    rows.map((row) =>
      row.id
    )
  ))

describe("dashboard", () => {
  it.live("the overview shows the counts of the database, and its security headers", () =>
    Effect.promise(async () => {
      const { close, incidents, page } = await watchedPage()
      const response = await page.goto(`${withToken}/`)
      expect(response!.status()).toBe(200)
      expect(response!.headers()["content-security-policy"]).toBe(Dashboard.contentSecurityPolicy)
      const outbox = page.locator(`#transports tr[data-transport="outbox"]`)
      expect(await outbox.locator(`[data-count="ready"]`).textContent()).toBe("2")
      expect(await outbox.locator(`[data-count="delayed"]`).textContent()).toBe("1")
      expect(await outbox.locator(`[data-count="inFlight"]`).textContent()).toBe("0")
      expect(await outbox.locator(`[data-count="failed"]`).textContent()).toBe("3")
      expect(
        await page.locator(`#failure-transports tr[data-transport="failed"] [data-count="messages"]`).textContent()
      )
        .toBe("3")
      await page.screenshot({ path: join(screenshots, "dashboard-overview.png"), fullPage: true })
      expect(incidents).toEqual([])
      await close()
    }))

  it.live("a failed message's detail shows its error, cause, retry history and body", () =>
    Effect.promise(async () => {
      const { close, incidents, page } = await watchedPage()
      const id = await idOfType(page, withToken, "OrderShipped")
      await page.click(`#failed tr[data-id="${id}"] a`)
      expect(await page.locator("#error-tag").textContent()).toBe("Error")
      expect(await page.locator("#error-message").textContent()).toContain("carrier API exploded")
      expect(await page.locator("#body").textContent()).toContain(`"carrier": "ups"`)
      expect(await page.locator("#cause").textContent()).toContain("carrier API exploded")
      expect(await page.locator("#retries tbody tr").count()).toBe(1)
      expect(await page.locator("#retries tbody").textContent()).toContain("carrier API exploded")
      await page.screenshot({ path: join(screenshots, "dashboard-failed-message.png"), fullPage: true })
      expect(incidents).toEqual([])
      await close()
    }))

  it.live("reading works with JavaScript disabled", () =>
    Effect.promise(async () => {
      const { close, page } = await watchedPage({ javaScriptEnabled: false })
      await page.goto(`${readOnly}/`)
      expect(await page.locator(`#transports tr[data-transport="outbox"] [data-count="ready"]`).textContent()).toBe("2")
      await page.click(`#failure-transports a`)
      const id = (await listedIds(page))[0]!
      await page.click(`#failed tr[data-id="${id}"] a`)
      expect(await page.locator("#error-tag").textContent()).not.toBe("")
      await close()
    }))

  it.live("retry with the token sends the message back, and a running worker handles it", () =>
    Effect.gen(function*() {
      const handled = yield* Deferred.make<number>()
      // The worker of `outbox`: OrderPaid 2 now succeeds and says so.
      const worker = yield* withPg(
        Worker.run({ transports: ["outbox"] }).pipe(
          Effect.provide(outboxStack({
            table,
            handlers: [
              Handlers.handler(OrderPaid, (m) => m.orderId === 2 ? Deferred.succeed(handled, m.orderId) : Effect.void)
            ]
          }))
        )
      ).pipe(Effect.forkScoped)
      const { close, incidents, page } = yield* Effect.promise(() => watchedPage())
      const id = yield* Effect.promise(() => idOfType(page, withToken, "OrderPaid"))
      yield* Effect.promise(async () => {
        await page.goto(`${withToken}/failed/message?transport=failed&id=${id}`)
        await page.click("#retry")
        await page.fill("#token", token)
        const [response] = await Promise.all([page.waitForResponse(/\/failed\/retry$/), page.click("#confirm button")])
        expect(response.status()).toBe(200)
        expect(await page.locator("#result").textContent()).toContain(`Message ${id}`)
        await page.goto(`${withToken}/failed`)
        expect(await listedIds(page)).not.toContain(id)
      })
      expect(yield* Deferred.await(handled)).toBe(2)
      expect(yield* failedIds(table)).not.toContain(id)
      yield* Fiber.interrupt(worker)
      expect(incidents).toEqual([])
      yield* Effect.promise(close)
    }).pipe(Effect.scoped))

  it.live("without the token (or on a read-only dashboard) an action is refused with 403 and nothing changes", () =>
    Effect.gen(function*() {
      const before = yield* failedIds(table)
      const id = before[0]!
      const outcome = yield* Effect.promise(async () => {
        const { close, page } = await watchedPage()
        // A wrong token through the form.
        await page.goto(`${withToken}/failed/confirm?action=remove&transport=failed&id=${id}`)
        await page.fill("#token", "not-the-token")
        const [wrong] = await Promise.all([page.waitForResponse(/\/failed\/remove$/), page.click("#confirm button")])
        const wrongText = await page.locator("#problem").textContent()
        // The right token, but no CSRF field (a post from elsewhere).
        const noCsrf = await page.request.post(`${withToken}/failed/remove`, {
          form: { transport: "failed", id, token }
        })
        // A read-only dashboard: no form, and a post is refused whatever it carries.
        await page.goto(`${readOnly}/failed/confirm?action=remove&transport=failed&id=${id}`)
        const formShown = await page.locator("#confirm").count()
        const readOnlyPost = await page.request.post(`${readOnly}/failed/remove`, {
          form: { transport: "failed", id, token }
        })
        await close()
        return { wrong: wrong.status(), wrongText, noCsrf: noCsrf.status(), formShown, readOnly: readOnlyPost.status() }
      })
      expect(outcome).toMatchObject({ wrong: 403, noCsrf: 403, formShown: 0, readOnly: 403 })
      expect(outcome.wrongText).toContain("token is wrong")
      expect(yield* failedIds(table)).toEqual(before)
    }))

  it.live("a hostile message runs no script and shows as text", () =>
    Effect.promise(async () => {
      const { close, incidents, page } = await watchedPage()
      await page.goto(`${withToken}/failed`)
      const row = page.locator("#failed tbody tr", { has: page.locator("td.type", { hasText: "<img src=x" }) })
      expect(await row.locator("img").count()).toBe(0)
      await row.locator("a").click()
      expect(await page.locator("#type").textContent()).toBe(hostileText)
      expect(await page.locator("#error-tag").textContent()).toBe(hostileText)
      expect(await page.locator("#body").textContent()).toBe(hostileText)
      expect(await page.locator("#headers").textContent()).toContain(`onerror=\\"alert('body')\\"`)
      expect(await page.locator("main img, main script").count()).toBe(0)
      expect(incidents).toEqual([])
      await close()
    }))

  it.live("the overview refreshes itself: a new message shows without a reload", () =>
    Effect.gen(function*() {
      const { close, incidents, page } = yield* Effect.promise(() => watchedPage())
      const selector = `#transports tr[data-transport="outbox"] [data-count="ready"]`
      const before = yield* Effect.promise(async () => {
        await page.goto(`${withToken}/`)
        return Number(await page.locator(selector).textContent())
      })
      yield* withPg(
        Outbox.dispatch(new OrderPaid({ orderId: 200, amount: 1 })).pipe(
          Effect.provide(outboxStack({ table, handlers: [] }))
        )
      )
      // The script's next refresh shows it: the page is not reloaded.
      yield* Effect.promise(() => page.locator(selector, { hasText: new RegExp(`^${before + 1}$`) }).waitFor())
      expect(incidents).toEqual([])
      yield* Effect.promise(close)
    }))

  it.live("remove of every message matching the filters, with the token, removes exactly those", () =>
    Effect.gen(function*() {
      const before = yield* failedIds(table)
      const { close, incidents, page } = yield* Effect.promise(() => watchedPage())
      const shipped = yield* Effect.promise(async () => {
        await page.goto(`${withToken}/failed?type=OrderShipped`)
        const ids = await listedIds(page)
        await page.click("#remove-all")
        expect(await page.locator("#question").textContent()).toContain(`${ids.length} message(s)`)
        await page.fill("#token", token)
        const [response] = await Promise.all([page.waitForResponse(/\/failed\/remove$/), page.click("#confirm button")])
        expect(response.status()).toBe(200)
        expect(await page.locator("#result").textContent()).toContain(`${ids.length} message(s) removed.`)
        return ids
      })
      expect(shipped.length).toBe(1)
      expect(yield* failedIds(table)).toEqual(before.filter((id) => !shipped.includes(id)))
      expect(incidents).toEqual([])
      yield* Effect.promise(close)
    }))

  it.live("bad input is a 400 with a message, never a crash", () =>
    Effect.promise(async () => {
      const status = async (path: string) => {
        const response = await fetch(`${withToken}${path}`)
        return { status: response.status, text: await response.text() }
      }
      expect(await status("/failed/message?transport=failed&id=abc")).toMatchObject({ status: 400 })
      expect(await status("/failed/message?transport=failed&id=99999999999999999999")).toMatchObject({ status: 400 })
      expect((await status("/failed?transport=nope")).text).toContain("Unknown failure transport")
      expect(await status("/failed?type=a&type=b")).toMatchObject({ status: 400 })
      expect(await status(`/failed?type=${"x".repeat(5000)}`)).toMatchObject({ status: 400 })
      expect(await status("/failed/confirm?action=explode&transport=failed&id=1")).toMatchObject({ status: 400 })
      expect(await status("/failed/message?transport=failed&id=123456789")).toMatchObject({ status: 404 })
      expect(await status("/nowhere")).toMatchObject({ status: 404 })
      // Still serving.
      expect(await status("/")).toMatchObject({ status: 200 })
    }))
})

/** The ids of the first two pages of a dashboard's failed list, unfiltered and by the error tag `Rare`. */
const pages = async (base: string) => {
  const ids = (markup: string) => [...markup.matchAll(/<tr data-id="(\d+)">/g)].map((match) => match[1]!)
  const next = (markup: string) => /id="next" href="([^"]+)"/.exec(markup)?.[1]?.replaceAll("&amp;", "&")
  const get = async (path: string) => (await fetch(`${base}${path}`)).text()
  const first = await get("/failed")
  const second = await get(next(first)!)
  const rare = await get("/failed?errorTag=Rare")
  const rareNext = await get(next(rare)!)
  return {
    first: ids(first),
    second: ids(second),
    rare: ids(rare),
    rareNext: ids(rareNext),
    rareLast: next(rareNext) === undefined
  }
}

describe("dashboard router", () => {
  it.live("pages 100 000 failed rows by id: the second page is the next 50 ids", () =>
    Effect.gen(function*() {
      const big = uniqueTable("dashboard_big")
      yield* withPg(
        Effect.gen(function*() {
          yield* PgTransport.make({ table: big, autoSetup: true })
          const sql = yield* SqlClient.SqlClient
          const headers = (tag: string) =>
            Headers.encode(
              new Headers.Headers({
                type: "OrderPaid",
                errorDetails: new Headers.ErrorDetails({ tag, message: "boom" }),
                originalTransport: "outbox"
              })
            )
          yield* sql`INSERT INTO ${sql(big)} (message_id, body, headers, queue_name, available_at)
            SELECT gen_random_uuid(), '{}', CASE WHEN n % 1000 = 0 THEN ${headers("Rare")} ELSE ${
            headers("Common")
          } END,
              'failed', now()
            FROM generate_series(1, 100000) AS n`
        })
      )
      const all = yield* failedIds(big)
      expect(all.length).toBe(100_000)
      // The dashboard in process, over the transport of the big table, while the scope lives.
      const served = yield* withPg(
        Dashboard.serve({ port: 0, token }).pipe(
          Effect.provide(PgTransport.layer({ table: big })),
          Effect.flatMap((served) => Effect.promise(() => pages(`http://127.0.0.1:${served.address.port}`))),
          Effect.scoped
        )
      )
      const rareIds = all.filter((_, i) => (i + 1) % 1000 === 0)
      expect(served.first).toEqual(all.slice(0, 50))
      expect(served.second).toEqual(all.slice(50, 100))
      // Filtered by error tag (every thousandth row), paged the same way.
      expect(served.rare).toEqual(rareIds.slice(0, 50))
      expect(served.rareNext).toEqual(rareIds.slice(50, 100))
      expect(served.rareLast).toBe(true)
    }))
})
