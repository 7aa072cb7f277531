/**
 * The dashboard's stylesheet and script, served by its router from these constants: no build step, no file to
 * find at run time, no CDN. The Content-Security-Policy allows only these (`'self'`), never inline code.
 *
 * @internal
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Security from "./security.js"

/** A static asset as served: cached briefly, with the dashboard's security headers. @internal */
export const asset = (body: string, contentType: string) =>
  HttpServerResponse.text(body, {
    contentType,
    headers: { ...Security.headers, "cache-control": "max-age=300" }
  })

/** The stylesheet. @internal */
export const stylesheet = `
:root { color-scheme: light dark; --fg: #1d232a; --muted: #5b6672; --bg: #fbfcfd; --line: #d9dee4; --accent: #2458c6;
  --bad: #b42318; --ok: #067647; --panel: #ffffff; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ed; --muted: #9aa5b1; --bg: #14181d; --line: #2c333b;
  --accent: #7aa2f7; --bad: #f97066; --ok: #47cd89; --panel: #1b2027; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1.5rem; align-items: baseline; padding: .8rem 1.5rem; border-bottom: 1px solid var(--line); background: var(--panel); }
header h1 { font-size: 1.05rem; margin: 0; }
header nav a { margin-right: 1rem; }
main { padding: 1rem 1.5rem 3rem; max-width: 1200px; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
h2 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
table { border-collapse: collapse; width: 100%; background: var(--panel); }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: .85rem; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: var(--bad); font-weight: 600; }
.ok { color: var(--ok); }
.muted { color: var(--muted); }
.mode { font-size: .8rem; padding: .1rem .5rem; border: 1px solid var(--line); border-radius: 1rem; color: var(--muted); }
pre { background: var(--panel); border: 1px solid var(--line); padding: .6rem; overflow: auto; white-space: pre-wrap; word-break: break-word; max-height: 40rem; }
form.filters { display: flex; gap: .6rem; flex-wrap: wrap; align-items: end; margin: .5rem 0 1rem; }
form.filters label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
input, select, button { font: inherit; padding: .25rem .45rem; }
button.danger { color: #fff; background: var(--bad); border: 0; border-radius: 4px; padding: .35rem .9rem; }
button.primary { color: #fff; background: var(--accent); border: 0; border-radius: 4px; padding: .35rem .9rem; }
.actions a { margin-right: 1rem; }
.pager { margin: .8rem 0; display: flex; gap: 1rem; }
.notice { padding: .6rem .8rem; border: 1px solid var(--line); background: var(--panel); margin: .8rem 0; }
.chart { background: var(--panel); border: 1px solid var(--line); }
.chart .grid { stroke: var(--line); stroke-width: 1; }
.chart .axis { fill: var(--muted); font-size: 11px; }
.chart .backlog { stroke: var(--accent); fill: none; stroke-width: 2; }
.chart .failed { stroke: var(--bad); fill: none; stroke-width: 2; }
.chart .handled { stroke: var(--ok); fill: none; stroke-width: 2; }
.chart .backlog.dot { fill: var(--accent); }
.chart .failed.dot { fill: var(--bad); }
.chart .handled.dot { fill: var(--ok); }
.legend span { margin-right: 1rem; }
.legend .backlog { color: var(--accent); }
.legend .failed { color: var(--bad); }
.legend .handled { color: var(--ok); }
dl.fields { display: grid; grid-template-columns: max-content 1fr; gap: .3rem 1rem; }
dl.fields dt { color: var(--muted); }
dl.fields dd { margin: 0; word-break: break-word; }
`

/**
 * The script: refreshes the overview in place (the server renders it; the page works without the script, only
 * without the live refresh).
 *
 * @internal
 */
export const script = `"use strict";
(function () {
  var live = document.getElementById("overview");
  if (!live) return;
  var url = live.getAttribute("data-live");
  var every = Number(live.getAttribute("data-every")) || 5000;
  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (markup) {
        var parsed = new DOMParser().parseFromString(markup, "text/html");
        live.replaceChildren.apply(live, Array.prototype.slice.call(parsed.body.childNodes));
      })
      .catch(function () { /* the next round tries again */ })
      .then(function () { setTimeout(refresh, every); });
  }
  setTimeout(refresh, every);
})();
`

/** The icon (a browser asks for one; without it every page logs a 404). @internal */
export const favicon =
  `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#2458c6"/>` +
  `<path d="M4 8h8M8 4v8" stroke="#fff" stroke-width="2"/></svg>`
