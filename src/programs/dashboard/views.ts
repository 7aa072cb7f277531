/**
 * The dashboard's pages, rendered on the server with `html` (every value escaped). They read and act through forms
 * and links, so they work without JavaScript; the script only refreshes the overview.
 *
 * @internal
 */
import type { StoredMessage, TransportStats } from "../../domain/Envelope.js"
import { cut } from "../../internal/text.js"
import { formatAge, formatTime, headline } from "../cli/format.js"
import { describeFailed } from "../cli/render.js"
import { type Html, html, type Value } from "./html.js"

/** What every page knows: where the dashboard is mounted, and whether it may act. @internal */
export interface Frame {
  readonly base: string
  readonly readOnly: boolean
}

/** The filters of the failed list, as the query string carries them. @internal */
export interface Filters {
  readonly transport: string
  readonly type?: string | undefined
  readonly errorTag?: string | undefined
  readonly from?: string | undefined
}

/** A link within the dashboard, its query built from `params` (undefined ones left out). @internal */
export const href = (
  frame: Frame,
  path: string,
  params: Readonly<Record<string, string | undefined>> = {}
): string => {
  const query = new URLSearchParams()
  for (const [key, value] of Object.entries(params)) if (value !== undefined && value !== "") query.set(key, value)
  const text = query.toString()
  return `${frame.base}${path}${text === "" ? "" : `?${text}`}`
}

/** The page around a body. @internal */
export const layout = (frame: Frame, title: string, body: Html): Html =>
  html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · outbox</title>
<link rel="icon" href="${frame.base}/assets/favicon.svg">
<link rel="stylesheet" href="${frame.base}/assets/dashboard.css">
<script src="${frame.base}/assets/dashboard.js" defer></script>
</head>
<body>
<header>
<h1>effect-outbox</h1>
<nav><a href="${href(frame, "/")}">Overview</a><a href="${href(frame, "/failed")}">Failed messages</a></nav>
<span class="mode">${modeBanner(frame)}</span>
</header>
<main>
${body}
</main>
</body>
</html>
`

/**
 * What the header says of the actions: a read-only dashboard says why; one with a token says that retry and remove
 * are on, and that each asks for the token (not that one is missing).
 *
 * @internal
 */
export const modeBanner = (frame: Frame): string =>
  frame.readOnly
    ? "read-only: no operator token is configured"
    : "retry and remove enabled: each asks for the operator token"

/** One transport's counts on the overview. @internal */
export interface QueueRow {
  readonly stats: TransportStats
  /** Whether the transport keeps ordering keys (else its blocked keys are not counted). */
  readonly keyed: boolean
  readonly failureTransport: string
}

/** A point of the overview's chart. @internal */
export interface Sample {
  readonly at: number
  readonly backlog: number
  readonly failed: number
  /** Messages the workers of this process handled since the previous sample (`null`: no worker here). */
  readonly handled: number | null
}

/** The overview's live part: the tables and the chart. @internal */
export const overviewContent = (
  frame: Frame,
  queues: ReadonlyArray<QueueRow>,
  failures: ReadonlyArray<TransportStats>,
  samples: ReadonlyArray<Sample>,
  now: number
): Html =>
  html`<h2>Transports</h2>
<table id="transports">
<thead><tr><th>Transport</th><th>Queue</th><th class="n">Ready</th><th class="n">Delayed</th><th class="n">In flight</th>
<th class="n" title="The messages in its failure transport">Failed</th><th class="n">Oldest ready</th><th class="n">Blocked keys</th></tr></thead>
<tbody>
${
    queues.map(({ failureTransport, keyed, stats: s }) =>
      html`<tr data-transport="${s.transport}"><td>${s.transport}</td><td>${s.queue}</td>
<td class="n" data-count="ready">${s.ready}</td><td class="n" data-count="delayed">${s.delayed}</td>
<td class="n" data-count="inFlight">${s.inFlight}</td>
<td class="n" data-count="failed">${
        s.failed === 0
          ? "0"
          : html`<a class="bad" href="${
            href(frame, "/failed", { transport: failureTransport })
          }" title="the messages in ${failureTransport}, from every transport it serves">${s.failed}</a>`
      }</td>
<td class="n" data-count="oldestReady">${formatAge(s.oldestReadyAgeMs)}</td>
<td class="n" data-count="blockedKeys">${
        keyed ? (s.blockedKeys > 0 ? html`<span class="bad">${s.blockedKeys}</span>` : "0") : "-"
      }</td></tr>`
    )
  }
</tbody>
</table>
<h2>Failure transports</h2>
<table id="failure-transports">
<thead><tr><th>Failure transport</th><th>Queue</th><th class="n">Messages</th><th class="n">Oldest</th></tr></thead>
<tbody>
${
    failures.map((s) =>
      html`<tr data-transport="${s.transport}"><td><a href="${
        href(frame, "/failed", { transport: s.transport })
      }">${s.transport}</a></td><td>${s.queue}</td>
<td class="n" data-count="messages">${s.ready + s.delayed + s.inFlight}</td><td class="n">${
        formatAge(s.oldestReadyAgeMs)
      }</td></tr>`
    )
  }
</tbody>
</table>
<h2>Last hour</h2>
${chart(samples, now)}`

/** The overview page. @internal */
export const overview = (frame: Frame, content: Html, refreshMs: number): Html =>
  layout(
    frame,
    "Overview",
    html`<div id="overview" data-live="${href(frame, "/overview/live")}" data-every="${refreshMs}">${content}</div>`
  )

const chartWidth = 720
const chartHeight = 180
const hourMs = 3_600_000

/**
 * The backlog, failed and handled counts of the last hour as an SVG drawn on the server (no script, no inline
 * style: its colours come from the stylesheet's classes).
 */
const chart = (samples: ReadonlyArray<Sample>, now: number): Html => {
  const recent = samples.filter((s) => s.at >= now - hourMs)
  const handled = recent.some((s) => s.handled !== null)
  const top = Math.max(1, ...recent.flatMap((s) => [s.backlog, s.failed, s.handled ?? 0]))
  const x = (at: number) => ((at - (now - hourMs)) / hourMs) * (chartWidth - 50) + 45
  const y = (n: number) => chartHeight - 20 - (n / top) * (chartHeight - 35)
  // A line through the samples, and a dot on the last one (a line of one sample shows nothing).
  const line = (cls: string, value: (s: Sample) => number) => {
    const last = recent[recent.length - 1]
    return last === undefined
      ? ""
      : html`<polyline class="${cls}" points="${
        recent.map((s) => `${x(s.at).toFixed(1)},${y(value(s)).toFixed(1)}`).join(" ")
      }"/><circle class="${cls} dot" r="3" cx="${x(last.at).toFixed(1)}" cy="${y(value(last)).toFixed(1)}"/>`
  }
  const firstFailed = recent[0]?.failed ?? 0
  let failures = 0
  for (let i = 1; i < recent.length; i++) failures += Math.max(0, recent[i]!.failed - recent[i - 1]!.failed)
  const handledSum = recent.reduce((sum, s) => sum + (s.handled ?? 0), 0)
  return html`<svg class="chart" role="img" aria-label="Backlog and failed messages over the last hour" width="${chartWidth}" height="${chartHeight}" viewBox="0 0 ${chartWidth} ${chartHeight}">
<line class="grid" x1="45" y1="${y(0)}" x2="${chartWidth - 5}" y2="${y(0)}"/>
<line class="grid" x1="45" y1="${y(top)}" x2="${chartWidth - 5}" y2="${y(top)}"/>
<text class="axis" x="40" y="${y(top) + 4}" text-anchor="end">${top}</text>
<text class="axis" x="40" y="${y(0) + 4}" text-anchor="end">0</text>
<text class="axis" x="45" y="${chartHeight - 4}">-60 min</text>
<text class="axis" x="${chartWidth - 5}" y="${chartHeight - 4}" text-anchor="end">now</text>
${line("backlog", (s) => s.backlog)}${line("failed", (s) => s.failed)}${
    handled ? line("handled", (s) => s.handled ?? 0) : ""
  }
</svg>
<p class="legend"><span class="backlog">■ waiting (ready, delayed, in flight)</span><span class="failed">■ failed (in the failure transports)</span>${
    handled ? html`<span class="handled">■ handled by this process's workers, per sample</span>` : ""
  }</p>
<p class="muted" id="hour-summary">${
    recent.length === 0
      ? "No samples yet: the dashboard samples the counts while it runs."
      : `${recent.length} sample(s) since ${formatTime(new Date(recent[0]!.at))}: ` +
        `${failures} message(s) failed` + (handled ? `, ${handledSum} handled here` : "") +
        ` (failed ${firstFailed} → ${recent[recent.length - 1]!.failed}).`
  }</p>`
}

/** One failed message as the list shows it. @internal */
const listRow = (frame: Frame, transport: string, m: StoredMessage): Html => {
  const d = describeFailed(m, false)
  return html`<tr data-id="${d.id}"><td><a href="${
    href(frame, "/failed/message", { transport, id: d.id })
  }">${d.id}</a></td><td class="type">${cut(d.type, 120)}</td><td>${
    d.originalTransport ?? "-"
  }</td><td>${d.failedAt}</td>
<td class="error"><strong>${cut(d.errorTag, 80)}</strong>: ${headline(d.errorMessage, 160)}</td><td>${
    d.orderingKey === null
      ? ""
      : html`${cut(d.orderingKey, 60)}${d.blocksKey ? html` <span class="bad">blocking</span>` : ""}`
  }</td></tr>`
}

/** The failed list: filters, one page, the pager and the actions on the whole selection. @internal */
export const failedList = (
  frame: Frame,
  options: {
    readonly filters: Filters
    readonly failureTransports: ReadonlyArray<string>
    readonly origins: ReadonlyArray<string>
    readonly after: string | undefined
    readonly page: ReadonlyArray<StoredMessage>
    readonly more: boolean
  }
): Html => {
  const { after, failureTransports, filters, more, origins, page } = options
  const filterParams = {
    transport: filters.transport,
    type: filters.type,
    errorTag: filters.errorTag,
    from: filters.from
  }
  const last = page[page.length - 1]
  return layout(
    frame,
    "Failed messages",
    html`<h2>Failed messages in “${filters.transport}”</h2>
<form class="filters" method="get" action="${href(frame, "/failed")}">
<label>Failure transport<select name="transport">${
      failureTransports.map((name) =>
        html`<option value="${name}"${name === filters.transport ? html` selected` : ""}>${name}</option>`
      )
    }</select></label>
<label>Message type<input name="type" value="${filters.type ?? ""}" placeholder="any"></label>
<label>Error tag<input name="errorTag" value="${filters.errorTag ?? ""}" placeholder="any"></label>
<label>Failed from<select name="from"><option value="">any</option>${
      origins.map((name) =>
        html`<option value="${name}"${name === filters.from ? html` selected` : ""}>${name}</option>`
      )
    }</select></label>
<button type="submit">Filter</button>
</form>
${
      page.length === 0
        ? html`<p class="notice ok" id="empty">No failed messages${after === undefined ? "" : " after this point"}.</p>`
        : html`<table id="failed">
<thead><tr><th>Id</th><th>Type</th><th>From</th><th>Failed at</th><th>Error</th><th>Ordering key</th></tr></thead>
<tbody>
${page.map((m) => listRow(frame, filters.transport, m))}
</tbody>
</table>`
    }
<p class="pager">${
      after === undefined ? "" : html`<a href="${href(frame, "/failed", filterParams)}">« First page</a>`
    }${
      more && last !== undefined
        ? html`<a id="next" href="${href(frame, "/failed", { ...filterParams, after: last.id })}">Next page »</a>`
        : ""
    }</p>
${
      frame.readOnly || page.length === 0 ? "" : html`<p class="actions">Every message matching these filters:
<a id="retry-all" href="${
        href(frame, "/failed/confirm", { ...filterParams, action: "retry", all: "1" })
      }">Retry all…</a>
<a id="remove-all" href="${
        href(frame, "/failed/confirm", { ...filterParams, action: "remove", all: "1" })
      }">Remove all…</a></p>`
    }`
  )
}

/** How much of a long value a page shows before “show all”. */
const shownLength = 2000

/** A value in a `<pre>`: cut when long, the whole of it one click away (`<details>`, no script needed). */
const longText = (text: string, id: string): Html =>
  text.length <= shownLength
    ? html`<pre id="${id}">${text}</pre>`
    : html`<pre id="${id}">${text.slice(0, shownLength)}…</pre>
<details><summary>Show all (${text.length} characters)</summary><pre id="${id}-all">${text}</pre></details>`

/** A body pretty-printed when it is JSON, else its raw text. */
const prettyBody = (body: string): { readonly text: string; readonly json: boolean } => {
  try {
    return { text: JSON.stringify(JSON.parse(body), null, 2), json: true }
  } catch {
    return { text: body, json: false }
  }
}

/** The detail view of one failed message. @internal */
export const failedMessage = (frame: Frame, transport: string, m: StoredMessage): Html => {
  const d = describeFailed(m, true)
  const body = prettyBody(m.body)
  const headers = prettyBody(m.headers)
  const field = (name: string, value: Value) => html`<dt>${name}</dt><dd>${value}</dd>`
  return layout(
    frame,
    `Message ${d.id}`,
    html`<h2>Failed message ${d.id}</h2>
<dl class="fields">
${field("Type", html`<span id="type">${d.type}</span>`)}
${field("Message id", d.messageId)}
${field("Failed at", d.failedAt)}
${field("Failed from", d.originalTransport ?? "(unknown)")}
${field("In", transport)}
${field("Deliveries", m.deliveries)}
${
      d.orderingKey === null
        ? ""
        : field(
          "Ordering key",
          `${d.orderingKey} (${d.blocksKey ? "blocked: its later messages wait for this one" : "not blocked"})`
        )
    }
</dl>
${
      frame.readOnly ?
        "" :
        html`<p class="actions"><a id="retry" href="${
          href(frame, "/failed/confirm", { action: "retry", transport, id: d.id })
        }">Retry…</a><a id="remove" href="${
          href(frame, "/failed/confirm", { action: "remove", transport, id: d.id })
        }">Remove…</a></p>`
    }
<h2>Error</h2>
<p id="error"><strong id="error-tag">${d.errorTag}</strong>: <span id="error-message">${d.errorMessage}</span></p>
<h3>Cause</h3>
${longText(d.cause ?? "(no cause recorded)", "cause")}
<h3>Retry history</h3>
${
      d.retries.length === 0
        ? html`<p class="muted" id="retries">No retries.</p>`
        : html`<table id="retries"><thead><tr><th>Retry</th><th>After</th><th>Error</th></tr></thead><tbody>${
          d.retries.map((r) =>
            html`<tr><td>#${r.retry}</td><td>${formatAge(r.delayMs)}</td><td><strong>${r.errorTag}</strong>: ${
              headline(r.errorMessage, 300)
            }</td></tr>`
          )
        }</tbody></table>`
    }
<h2>Body${body.json ? "" : " (not JSON: raw text)"}</h2>
${longText(body.text, "body")}
<h2>Headers</h2>
${longText(headers.text, "headers")}
`
  )
}

/** What an action acts on: one message, or every message matching the filters. @internal */
export type Selection =
  | { readonly _tag: "One"; readonly transport: string; readonly id: string }
  | { readonly _tag: "All"; readonly filters: Filters }

/** The hidden fields that carry a selection to the action. */
const selectionFields = (selection: Selection): Html =>
  selection._tag === "One"
    ? html`<input type="hidden" name="transport" value="${selection.transport}"><input type="hidden" name="id" value="${selection.id}">`
    : html`<input type="hidden" name="transport" value="${selection.filters.transport}"><input type="hidden" name="all" value="1">${
      (["type", "errorTag", "from"] as const).map((key) => {
        const value = selection.filters[key]
        return value === undefined ? "" : html`<input type="hidden" name="${key}" value="${value}">`
      })
    }`

/** The confirmation of an action, with the token field; the form posts to the action. @internal */
export const confirm = (
  frame: Frame,
  options: {
    readonly action: "retry" | "remove"
    readonly selection: Selection
    readonly count: number
    readonly csrf: string
  }
): Html => {
  const { action, count, csrf, selection } = options
  const what = selection._tag === "One"
    ? `message ${selection.id}`
    : `${count} message(s) of “${selection.filters.transport}” matching the filters`
  const question = action === "retry"
    ? `Send ${what} back to the transport it failed from, ready now?`
    : `Permanently remove ${what}?`
  return layout(
    frame,
    action === "retry" ? "Retry" : "Remove",
    html`<h2>${action === "retry" ? "Retry" : "Remove"}</h2>
<p id="question">${question}</p>
${
      frame.readOnly
        ? html`<p class="notice bad">This dashboard is read-only: no operator token is configured.</p>`
        : html`<form method="post" action="${href(frame, `/failed/${action}`)}" id="confirm">
${selectionFields(selection)}
<input type="hidden" name="csrf" value="${csrf}">
<p><label>Operator token <input type="password" name="token" id="token" autocomplete="current-password" required></label></p>
<p><button type="submit" class="${action === "retry" ? "primary" : "danger"}">${
          action === "retry" ? "Retry" : "Remove"
        }</button> <a href="${
          selection._tag === "One"
            ? href(frame, "/failed/message", { transport: selection.transport, id: selection.id })
            : href(frame, "/failed", { ...selection.filters })
        }">Cancel</a></p>
</form>`
    }`
  )
}

/** What an action did. @internal */
export const done = (
  frame: Frame,
  transport: string,
  lines: ReadonlyArray<string>,
  refused: ReadonlyArray<string>
): Html =>
  layout(
    frame,
    "Done",
    html`<h2>Done</h2>
<ul id="result">${lines.map((line) => html`<li class="ok">${line}</li>`)}${
      refused.map((line) => html`<li class="bad">${line}</li>`)
    }</ul>
<p><a href="${href(frame, "/failed", { transport })}">Back to the failed messages</a></p>`
  )

/** An error page (a refusal, bad input, a failure of the storage). @internal */
export const problem = (frame: Frame, title: string, message: string): Html =>
  layout(frame, title, html`<h2>${title}</h2><p class="notice bad" id="problem">${message}</p>`)
