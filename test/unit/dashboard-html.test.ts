/**
 * The dashboard's escaping and its guard of mutations, without a server: every value `html` is given is escaped,
 * a mutation needs a configured token, the CSRF token and the operator token, in that order; the chart draws the last
 * hour.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Redacted from "effect/Redacted"
import { escapeHtml, html } from "../../src/programs/dashboard/html.js"
import { csrfCookie, newCsrfToken, refusal } from "../../src/programs/dashboard/security.js"
import { overviewContent } from "../../src/programs/dashboard/views.js"

describe("dashboard html", () => {
  it("escapes the characters that open markup or close an attribute", () => {
    expect(escapeHtml(`<img src=x onerror="alert('x')">&\``)).toBe(
      "&lt;img src=x onerror=&quot;alert(&#39;x&#39;)&quot;&gt;&amp;&#96;"
    )
  })

  it("escapes every value of the template, in lists too, and inserts only its own markup as is", () => {
    const hostile = `</script><script>alert(1)</script>`
    const page = html`<p title="${hostile}">${hostile}${[hostile, 7]}${html`<b>${hostile}</b>`}${undefined}${false}</p>`
    expect(page.markup).not.toContain("<script>")
    expect(page.markup).toContain("<b>&lt;/script&gt;")
    expect(page.markup).toContain("7")
  })
})

describe("dashboard guard", () => {
  const csrf = newCsrfToken()
  const token = Redacted.make("operator-token")
  const request = {
    headers: { host: "127.0.0.1:8080", origin: "http://127.0.0.1:8080", "sec-fetch-site": "same-origin" },
    cookies: { [csrfCookie]: csrf },
    csrf,
    token: "operator-token"
  }

  it("lets a same-origin form with the CSRF token and the operator token through", () => {
    expect(refusal(token, request)).toBeUndefined()
    expect(
      refusal(token, {
        ...request,
        token: undefined,
        headers: { ...request.headers, authorization: "Bearer operator-token" }
      })
    )
      .toBeUndefined()
  })

  it("refuses without a configured token, across sites, without the CSRF token, without or with a wrong token", () => {
    expect(refusal(undefined, request)).toContain("read-only")
    expect(refusal(token, { ...request, headers: { ...request.headers, "sec-fetch-site": "cross-site" } }))
      .toContain("Cross-site")
    expect(refusal(token, { ...request, headers: { ...request.headers, origin: "http://evil.example" } }))
      .toContain("Cross-origin")
    expect(refusal(token, { ...request, headers: { ...request.headers, origin: "null" } })).toContain("Cross-origin")
    expect(refusal(token, { ...request, csrf: undefined })).toContain("CSRF")
    expect(refusal(token, { ...request, cookies: {} })).toContain("CSRF")
    expect(refusal(token, { ...request, csrf: newCsrfToken() })).toContain("CSRF")
    expect(refusal(token, { ...request, token: undefined })).toContain("required")
    expect(refusal(token, { ...request, token: "operator-token " })).toContain("wrong")
  })
})

describe("dashboard chart", () => {
  const frame = { base: "", readOnly: true }
  const stats = {
    transport: "outbox",
    queue: "outbox",
    ready: 1,
    delayed: 0,
    inFlight: 0,
    failed: 2,
    oldestReadyAgeMs: 1000,
    blockedKeys: 0
  }
  const now = 10_000_000

  it("draws the waiting and failed counts of the last hour, and what this process handled when a worker runs here", () => {
    const samples = [
      { at: now - 2 * 3_600_000, backlog: 99, failed: 99, handled: null },
      { at: now - 60_000, backlog: 4, failed: 1, handled: 3 },
      { at: now, backlog: 2, failed: 2, handled: 5 }
    ]
    const markup = overviewContent(frame, [{ stats, keyed: true, failureTransport: "failed" }], [], samples, now).markup
    expect(markup).toContain(`<polyline class="backlog"`)
    expect(markup).toContain(`<polyline class="failed"`)
    expect(markup).toContain(`<polyline class="handled"`)
    // The sample older than an hour is left out: the scale's top is 5, not 99.
    expect(markup).not.toContain(">99<")
    expect(markup).toContain("2 sample(s)")
    expect(markup).toContain("1 message(s) failed, 8 handled here")
  })

  it("leaves the handled line out when no worker runs in this process", () => {
    const samples = [{ at: now, backlog: 2, failed: 2, handled: null }]
    const markup = overviewContent(frame, [], [], samples, now).markup
    expect(markup).not.toContain(`class="handled"`)
  })
})
