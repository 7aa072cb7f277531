/**
 * The dashboard's guard of its mutations: the operator token and the CSRF check. A mutation is refused (403) when
 * no token is configured (the dashboard is read-only), when the request does not come from the dashboard's own
 * pages (CSRF), or when it does not carry the token.
 *
 * The CSRF check is twofold: a double-submit token (a random value in an `HttpOnly`, `SameSite=Strict` cookie that
 * each form repeats in a hidden field; another site can neither read nor set it), and the browser's own word on
 * where the request comes from (`Sec-Fetch-Site` must be `same-origin`, `Origin` the dashboard's host, when sent).
 *
 * @internal
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"

/** The cookie of the double-submit CSRF token. @internal */
export const csrfCookie = "outbox_dashboard_csrf"

/** A fresh CSRF token: 32 random bytes, base64url. @internal */
export const newCsrfToken = (): string => randomBytes(32).toString("base64url")

/** Whether a cookie value is a CSRF token of ours (another value is replaced, never echoed into a page). @internal */
export const isCsrfToken = (value: string | undefined): value is string =>
  value !== undefined && /^[A-Za-z0-9_-]{43}$/.test(value)

/**
 * Compares two secrets in constant time (their SHA-256, so their lengths do not show either).
 *
 * @internal
 */
export const sameSecret = (a: string, b: string): boolean =>
  timingSafeEqual(createHash("sha256").update(a).digest(), createHash("sha256").update(b).digest())

/** What a mutation request brings to the guard. @internal */
export interface MutationRequest {
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly cookies: Readonly<Record<string, string | undefined>>
  /** The form's `csrf` field. */
  readonly csrf: string | undefined
  /** The form's `token` field. */
  readonly token: string | undefined
}

/**
 * Why a mutation is refused, or `undefined` when it may go on. The token is the form's `token` field or an
 * `Authorization: Bearer` header.
 *
 * @internal
 */
export const refusal = (
  configured: Redacted.Redacted<string> | undefined,
  request: MutationRequest
): string | undefined => {
  if (configured === undefined) {
    return "This dashboard is read-only: no token is configured (OUTBOX_DASHBOARD_TOKEN or the token option)."
  }
  const site = request.headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin") return `Cross-site request refused (Sec-Fetch-Site: ${site}).`
  const origin = request.headers["origin"]
  const host = request.headers["host"]
  if (origin !== undefined && origin !== "null" && !(host !== undefined && sameHost(origin, host))) {
    return "Cross-origin request refused (its Origin is not this dashboard's host)."
  }
  if (origin === "null") return "Cross-origin request refused (Origin: null)."
  const cookie = request.cookies[csrfCookie]
  if (!isCsrfToken(cookie) || request.csrf === undefined || !sameSecret(cookie, request.csrf)) {
    return "The CSRF check failed: reload the page and try again."
  }
  const bearer = /^Bearer (.+)$/.exec(request.headers["authorization"] ?? "")?.[1]
  const given = request.token !== undefined && request.token.length > 0 ? request.token : bearer
  if (given === undefined) return "The operator token is required for this action."
  if (!sameSecret(Redacted.value(configured), given)) return "The operator token is wrong."
  return undefined
}

/** Whether an `Origin` names the host the request was sent to. */
const sameHost = (origin: string, host: string): boolean => {
  if (!URL.canParse(origin)) return false
  return new URL(origin).host === host
}

/**
 * The configured operator token: the option, else `OUTBOX_DASHBOARD_TOKEN`; an empty one is none (read-only).
 *
 * @internal
 */
export const configuredToken = (option: Redacted.Redacted<string> | string | undefined) =>
  Effect.map(
    option === undefined
      ? Config.option(Config.redacted("OUTBOX_DASHBOARD_TOKEN")).pipe(
        Effect.map(Option.getOrUndefined),
        Effect.orElseSucceed(() => undefined)
      )
      : Effect.succeed(typeof option === "string" ? Redacted.make(option) : option),
    (token) => (token === undefined || Redacted.value(token).trim() === "" ? undefined : token)
  )

/** The Content-Security-Policy of every answer (exported as `Dashboard.contentSecurityPolicy`). @internal */
export const contentSecurityPolicy =
  "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

/** The headers of every answer. @internal */
export const headers = {
  "content-security-policy": contentSecurityPolicy,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  // Not `no-referrer`: under it a form's POST carries `Origin: null`, which the CSRF check refuses.
  "referrer-policy": "same-origin",
  "cache-control": "no-store"
}
