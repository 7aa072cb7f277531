/**
 * A web dashboard for the outbox: every transport's counts, refreshed live, with a chart of the last hour; the
 * failed messages, filtered and paged, each in detail; and the actions of `failed:retry` / `failed:remove`. Served
 * by `outbox dashboard`, or mounted as a router in an application's own `@effect/platform` HTTP server (behind its
 * own authentication). It reads and acts only through the `Transport` and `TransportAdmin` services.
 *
 * Safe by default: `serve` binds to 127.0.0.1; without an operator token the dashboard is read-only; every
 * mutation is a POST that needs the token and passes a CSRF check (see `security.ts`); every value from a message
 * is escaped; the Content-Security-Policy allows only the dashboard's own stylesheet and script.
 *
 * @since 0.1.0
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as HttpIncomingMessage from "@effect/platform/HttpIncomingMessage"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as UrlParams from "@effect/platform/UrlParams"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import type { StoredMessage } from "../../domain/Envelope.js"
import { describeError } from "../../internal/describeError.js"
import { Transport } from "../../services/Transport.js"
import { TransportAdmin } from "../../services/TransportAdmin.js"
import { applyRetry, planRetry, removeMessages } from "../operator/failedMessages.js"
import { asset, favicon, script, stylesheet } from "./assets.js"
import type { Html } from "./html.js"
import { BadRequest, valueOf } from "./input.js"
import * as Sampler from "./sampler.js"
import * as Security from "./security.js"
import * as Views from "./views.js"

/**
 * The dashboard could not be served (its port is taken, its options are wrong).
 *
 * @since 0.1.0
 * @category errors
 */
export class DashboardError extends Schema.TaggedError<DashboardError>()("DashboardError", {
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  /** @since 0.1.0 */
  override get message(): string {
    return `Cannot serve the dashboard: ${this.reason}`
  }
}

/**
 * Options of the dashboard's router.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * The operator token that the actions need (default: `OUTBOX_DASHBOARD_TOKEN`). Without one (or an empty one)
   * the dashboard is read-only: its actions answer 403.
   */
  readonly token?: Redacted.Redacted<string> | string | undefined
  /** Where the router is mounted (`/outbox` for `HttpRouter.mount("/outbox", …)`), for its links; default none. */
  readonly basePath?: string
  /** Failed messages per page (default 50, at most 500). */
  readonly pageSize?: number
  /** How often the chart's counts are sampled (default 10 seconds). */
  readonly sampleEvery?: Duration.DurationInput
  /** How often an open overview refreshes itself (default 5 seconds). */
  readonly refreshEvery?: Duration.DurationInput
}

/**
 * Options of `serve`: the router's, and where to listen.
 *
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions extends Options {
  /** The port (default 8080; 0 lets the system pick one). */
  readonly port?: number
  /** The interface (default `127.0.0.1`: loopback only). */
  readonly host?: string
}

/**
 * Where a served dashboard listens.
 *
 * @since 0.1.0
 * @category models
 */
export interface DashboardShape {
  readonly address: { readonly host: string; readonly port: number }
  /** Whether actions are possible (a token is configured). */
  readonly readOnly: boolean
}

/**
 * A served dashboard.
 *
 * @since 0.1.0
 * @category tags
 */
export class Dashboard extends Context.Tag("effect-outbox/Dashboard")<Dashboard, DashboardShape>() {}

/**
 * The default port of `serve`.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultPort = 8080

/**
 * The Content-Security-Policy of every answer: only the dashboard's own stylesheet and script, no inline code, no
 * plugin, no framing.
 *
 * @since 0.1.0
 * @category constants
 */
export const contentSecurityPolicy: string = Security.contentSecurityPolicy

/** The largest form an action takes. */
const maxBodyBytes = 64 * 1024

/**
 * The dashboard as a router, over the `Transport` and `TransportAdmin` in context; it samples the counts for its
 * chart while its scope lives. Mount it in an application's HTTP server behind the application's authentication
 * (with `basePath` set to where it is mounted).
 *
 * @since 0.1.0
 * @category constructors
 */
export const router = (
  options: Options = {}
): Effect.Effect<HttpRouter.HttpRouter, DashboardError, Transport | TransportAdmin | Scope.Scope> =>
  Effect.gen(function*() {
    const transport = yield* Transport
    const admin = yield* TransportAdmin
    const token = yield* Security.configuredToken(options.token)
    const base = options.basePath ?? ""
    if (base !== "" && !/^(\/[A-Za-z0-9._~-]+)+$/.test(base)) {
      return yield* new DashboardError({ reason: `basePath must look like /outbox, got ${JSON.stringify(base)}` })
    }
    const pageSize = options.pageSize ?? 50
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 500) {
      return yield* new DashboardError({ reason: `pageSize must be an integer from 1 to 500, got ${pageSize}` })
    }
    const frame: Views.Frame = { base, readOnly: token === undefined }
    const refreshMs = Duration.toMillis(Duration.decode(options.refreshEvery ?? "5 seconds"))

    const failureOf = (name: string) => Option.getOrElse(transport.failureTransport(name), () => name)
    const failureNames = [...new Set(transport.names.map(failureOf))].filter((name) => transport.names.includes(name))
    const queueNames = transport.names.filter((name) => !failureNames.includes(name))
    const browsable = failureNames.filter((name) => Option.exists(transport.capabilities(name), (c) => c.browsing))

    const samples = yield* Sampler.start({
      admin,
      queues: queueNames,
      failures: failureNames,
      every: options.sampleEvery ?? "10 seconds"
    })

    const page = (markup: Html, status = 200, csrf?: { readonly value: string; readonly fresh: boolean }) => {
      const response = HttpServerResponse.text(markup.markup, {
        status,
        contentType: "text/html; charset=utf-8",
        headers: Security.headers
      })
      return csrf === undefined || !csrf.fresh ? response : HttpServerResponse.unsafeSetCookie(
        response,
        Security.csrfCookie,
        csrf.value,
        { httpOnly: true, sameSite: "strict", path: base === "" ? "/" : base }
      )
    }

    /** The request's CSRF token: its cookie's when valid, else a fresh one (set by the answer). */
    const csrfOf = Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
      const cookie = request.cookies[Security.csrfCookie]
      return Security.isCsrfToken(cookie)
        ? { value: cookie, fresh: false }
        : { value: Security.newCsrfToken(), fresh: true }
    })

    /** One query value: absent or empty is `undefined`; given twice or too long is a bad request. */
    const queryValue = (key: string) =>
      Effect.flatMap(HttpServerRequest.ParsedSearchParams, (search) => valueOf(key, search[key]))

    const failureTransportOf = (value: string | undefined) => {
      const name = value ?? (browsable.includes("failed") ? "failed" : browsable[0])
      return name !== undefined && browsable.includes(name)
        ? Effect.succeed(name)
        : new BadRequest({
          message: `Unknown failure transport ${JSON.stringify(value ?? "")}; known: ${browsable.join(", ") || "none"}`
        })
    }

    const idOf = (value: string | undefined, key: string) =>
      value !== undefined && /^\d{1,19}$/.test(value)
        ? Effect.succeed(value)
        : new BadRequest({ message: `"${key}" must be a message id (digits), got ${JSON.stringify(value ?? "")}` })

    /** Where a request's values come from: its query string or its form. */
    type Values<R> = (key: string) => Effect.Effect<string | undefined, BadRequest, R>

    const filtersFrom = <R>(get: Values<R>) =>
      Effect.gen(function*() {
        const filters: Views.Filters = {
          transport: yield* failureTransportOf(yield* get("transport")),
          type: yield* get("type"),
          errorTag: yield* get("errorTag"),
          from: yield* get("from")
        }
        return filters
      })

    const listOptions = (filters: Views.Filters) => ({
      type: filters.type,
      errorTag: filters.errorTag,
      originalTransport: filters.from
    })

    const overviewContent = Effect.gen(function*() {
      const queues = yield* Effect.forEach(
        queueNames,
        (name) =>
          Effect.map(admin.stats(name), (stats): Views.QueueRow => ({
            stats,
            keyed: Option.exists(transport.capabilities(name), (c) => c.orderingKeys),
            failureTransport: failureOf(name)
          }))
      )
      const failures = yield* Effect.forEach(failureNames, (name) => admin.stats(name))
      return Views.overviewContent(frame, queues, failures, yield* samples, yield* Clock.currentTimeMillis)
    })

    const selectionOf = <R>(get: Values<R>) =>
      Effect.gen(function*() {
        if ((yield* get("all")) === "1") {
          const selection: Views.Selection = { _tag: "All", filters: yield* filtersFrom(get) }
          return selection
        }
        const selection: Views.Selection = {
          _tag: "One",
          transport: yield* failureTransportOf(yield* get("transport")),
          id: yield* idOf(yield* get("id"), "id")
        }
        return selection
      })

    /** The messages a selection names now: one (404 when gone) or every one matching the filters. */
    const selected = (selection: Views.Selection) =>
      Effect.gen(function*() {
        if (selection._tag === "All") {
          return yield* admin.list(selection.filters.transport, {
            max: Number.MAX_SAFE_INTEGER,
            ...listOptions(selection.filters)
          })
        }
        const found = yield* admin.find(selection.transport, selection.id)
        if (Option.isNone(found)) {
          return yield* new BadRequest({
            status: 404,
            message: `The message ${selection.id} is not in "${selection.transport}" (retried or removed meanwhile?)`
          })
        }
        return [found.value] as ReadonlyArray<StoredMessage>
      })

    /** A mutation: the guard first, then the selection from the form, then `act`. */
    const mutation = <E>(
      act: (transport: string, messages: ReadonlyArray<StoredMessage>) => Effect.Effect<Html, E>
    ) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const form = yield* request.urlParamsBody.pipe(
          HttpIncomingMessage.withMaxBodySize(Option.some(maxBodyBytes)),
          Effect.mapError(() =>
            new BadRequest({ message: `The form could not be read (at most ${maxBodyBytes} bytes)` })
          )
        )
        const get = (key: string) => valueOf(key, UrlParams.getAll(form, key))
        const refused = Security.refusal(token, {
          headers: request.headers,
          cookies: request.cookies,
          csrf: UrlParams.getFirst(form, "csrf").pipe(Option.getOrUndefined),
          token: UrlParams.getFirst(form, "token").pipe(Option.getOrUndefined)
        })
        if (refused !== undefined) return page(Views.problem(frame, "Refused", refused), 403)
        const selection = yield* selectionOf(get)
        const name = selection._tag === "One" ? selection.transport : selection.filters.transport
        const messages = yield* selected(selection)
        return page(yield* act(name, messages))
      })

    /** A route's answer: its failures and defects become error pages (400/404 for bad requests, else 500). */
    const handle = <E, R>(
      self: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
    ): Effect.Effect<HttpServerResponse.HttpServerResponse, never, R> =>
      self.pipe(
        Effect.catchAll((error) =>
          Effect.succeed(
            error instanceof BadRequest
              ? page(
                Views.problem(frame, error.status === 404 ? "Not found" : "Bad request", error.message),
                error.status
              )
              : page(Views.problem(frame, "Error", describeError(error)), 500)
          )
        ),
        Effect.catchAllDefect((defect) =>
          Effect.succeed(page(Views.problem(frame, "Error", describeError(defect)), 500))
        )
      )

    return HttpRouter.empty.pipe(
      HttpRouter.get(
        "/",
        handle(Effect.gen(function*() {
          return page(Views.overview(frame, yield* overviewContent, refreshMs), 200, yield* csrfOf)
        }))
      ),
      HttpRouter.get(
        "/overview/live",
        handle(Effect.map(overviewContent, (content) => page(content)))
      ),
      HttpRouter.get(
        "/failed",
        handle(Effect.gen(function*() {
          const filters = yield* filtersFrom(queryValue)
          const afterText = yield* queryValue("after")
          const after = afterText === undefined ? undefined : yield* idOf(afterText, "after")
          // One more than a page: whether there is a next page, without counting.
          const found = yield* admin.list(filters.transport, { max: pageSize + 1, after, ...listOptions(filters) })
          return page(
            Views.failedList(frame, {
              filters,
              failureTransports: browsable,
              origins: queueNames,
              after,
              page: found.slice(0, pageSize),
              more: found.length > pageSize
            }),
            200,
            yield* csrfOf
          )
        }))
      ),
      HttpRouter.get(
        "/failed/message",
        handle(Effect.gen(function*() {
          const name = yield* failureTransportOf(yield* queryValue("transport"))
          const id = yield* idOf(yield* queryValue("id"), "id")
          const [message] = yield* selected({ _tag: "One", transport: name, id })
          return page(Views.failedMessage(frame, name, message!), 200, yield* csrfOf)
        }))
      ),
      HttpRouter.get(
        "/failed/confirm",
        handle(Effect.gen(function*() {
          const action = yield* queryValue("action")
          if (action !== "retry" && action !== "remove") {
            return yield* new BadRequest({ message: `"action" must be retry or remove` })
          }
          const selection = yield* selectionOf(queryValue)
          const count = selection._tag === "One" ? 1 : (yield* selected(selection)).length
          const csrf = yield* csrfOf
          return page(Views.confirm(frame, { action, selection, count, csrf: csrf.value }), 200, csrf)
        }))
      ),
      HttpRouter.post(
        "/failed/retry",
        handle(mutation((name, messages) =>
          Effect.gen(function*() {
            const { refused, steps } = planRetry(messages, name, transport.names)
            const moved = yield* applyRetry(name, steps)
            return Views.done(
              frame,
              name,
              [
                ...moved.map(({ message, to }) => `Message ${message.id} (${message.messageId}) sent back to "${to}".`),
                `${moved.length} message(s) will be retried by the workers of their transports.`
              ],
              refused
            )
          }).pipe(Effect.provideService(TransportAdmin, admin))
        ))
      ),
      HttpRouter.post(
        "/failed/remove",
        handle(mutation((name, messages) =>
          Effect.map(
            removeMessages(name, messages).pipe(Effect.provideService(TransportAdmin, admin)),
            (removed) => Views.done(frame, name, [`${removed} message(s) removed.`], [])
          )
        ))
      ),
      HttpRouter.get("/assets/dashboard.css", Effect.succeed(asset(stylesheet, "text/css; charset=utf-8"))),
      HttpRouter.get("/assets/dashboard.js", Effect.succeed(asset(script, "text/javascript; charset=utf-8"))),
      HttpRouter.get("/assets/favicon.svg", Effect.succeed(asset(favicon, "image/svg+xml"))),
      HttpRouter.all("*", Effect.succeed(page(Views.problem(frame, "Not found", "There is no such page."), 404)))
    )
  })

/**
 * Serves the dashboard on its own HTTP server (default `127.0.0.1:8080`) while the scope lives.
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (
  options: ServeOptions = {}
): Effect.Effect<DashboardShape, DashboardError, Transport | TransportAdmin | Scope.Scope> =>
  Effect.gen(function*() {
    const host = options.host ?? "127.0.0.1"
    const port = options.port ?? defaultPort
    const app = yield* router(options)
    const server = yield* NodeHttpServer.make(() => Http.createServer(), { port, host }).pipe(
      Effect.mapError((error) =>
        new DashboardError({ reason: `${host}:${port}: ${describeError(error.cause)}`, cause: error.cause })
      )
    )
    yield* server.serve(app)
    const bound = server.address._tag === "TcpAddress" ? server.address : { hostname: host, port }
    return {
      address: { host: bound.hostname, port: bound.port },
      readOnly: (yield* Security.configuredToken(options.token)) === undefined
    }
  })

/**
 * `serve` as a layer.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: ServeOptions = {}): Layer.Layer<Dashboard, DashboardError, Transport | TransportAdmin> =>
  Layer.scoped(Dashboard, serve(options))
