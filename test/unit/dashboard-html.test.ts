/**
 * The dashboard's escaping and its guard of mutations, without a server: every value `html` is given is escaped,
 * and a mutation needs a configured token, the CSRF token and the operator token, in that order.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Redacted from "effect/Redacted"
import { escapeHtml, html } from "../../src/programs/dashboard/html.js"
import { csrfCookie, newCsrfToken, refusal } from "../../src/programs/dashboard/security.js"

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
