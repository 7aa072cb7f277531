/**
 * The sustained scenario's chart (bench/sustained.svg): two panels over the measured time of each paced run — latency
 * p50 and p99 per monitoring interval (by commit time), and the table + indexes size read at each tick, with a mark
 * where an autovacuum of the table had run since the previous tick. Plain SVG text, from the run's own results.
 */
import { escape, niceStep } from "./chart.js"
import { rate } from "./stats.js"
import type { Phase, SustainedResult } from "./sustained.js"

const colors = ["#9ca3af", "#2563eb", "#dc2626", "#16a34a"]

interface Series {
  readonly points: ReadonlyArray<readonly [number, number]>
  readonly color: string
  readonly dashed: boolean
}

const scaleOf = (max: number) => {
  const step = niceStep(Math.max(max, 1e-9))
  return { step, top: Math.max(step, Math.ceil(max / step) * step) }
}

const fmt = (v: number, step: number) => (step >= 1 ? rate(v) : Number(v.toFixed(3)).toString())

/** One panel: axes, grid, series, and marks (x positions) along its bottom. */
const panel = (
  y0: number,
  height: number,
  title: string,
  unit: string,
  xMax: number,
  series: ReadonlyArray<Series>,
  marks: ReadonlyArray<{ readonly x: number; readonly color: string }>,
  log = false
): Array<string> => {
  const left = 70
  const width = 860 - left - 30
  const xStep = scaleOf(xMax)
  const yMax = Math.max(0, ...series.flatMap((s) => s.points.map((p) => (Number.isFinite(p[1]) ? p[1] : 0))))
  const yScale = scaleOf(yMax)
  const x = (v: number) => left + (v / xStep.top) * width
  // Log scale: decades from 0.1 to the first power of ten at or above the largest value (values below 0.1 at 0.1).
  const decades = Math.max(1, Math.ceil(Math.log10(Math.max(yMax, 1))) + 1)
  const y = log
    ? (v: number) => y0 + height - ((Math.log10(Math.max(0.1, v)) + 1) / decades) * height
    : (v: number) => y0 + height - (Math.max(0, v) / yScale.top) * height
  const out = [`<text x="${left}" y="${y0 - 10}" font-weight="600" fill="#111">${escape(title)}</text>`]
  const gridValues = log
    ? Array.from({ length: decades + 1 }, (_, k) => 10 ** (k - 1))
    : Array.from({ length: Math.round(yScale.top / yScale.step) + 1 }, (_, k) => k * yScale.step)
  for (const v of gridValues) {
    out.push(
      `<line x1="${left}" y1="${y(v).toFixed(1)}" x2="${left + width}" y2="${y(v).toFixed(1)}" stroke="#e5e5e5"/>`,
      `<text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" fill="#777" font-size="11">${
        escape(log ? String(v) : fmt(v, yScale.step))
      }${v === 0 ? "" : ` ${unit}`}</text>`
    )
  }
  for (let v = 0; v <= xStep.top + 1e-9; v += xStep.step) {
    out.push(
      `<line x1="${x(v).toFixed(1)}" y1="${y0}" x2="${x(v).toFixed(1)}" y2="${y0 + height}" stroke="#f0f0f0"/>`,
      `<text x="${x(v).toFixed(1)}" y="${y0 + height + 16}" text-anchor="middle" fill="#777" font-size="11">${
        escape(rate(v))
      } s</text>`
    )
  }
  out.push(
    `<line x1="${left}" y1="${y0 + height}" x2="${left + width}" y2="${y0 + height}" stroke="#999"/>`
  )
  for (const s of series) {
    const pts = s.points.filter((p) => Number.isFinite(p[1]))
    if (pts.length === 0) continue
    out.push(
      `<polyline fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ` stroke-dasharray="5 4"` : ""} points="${
        pts.map(([a, b]) => `${x(a).toFixed(1)},${y(b).toFixed(1)}`).join(" ")
      }"/>`,
      ...pts.map(([a, b]) => `<circle cx="${x(a).toFixed(1)}" cy="${y(b).toFixed(1)}" r="2.5" fill="${s.color}"/>`)
    )
  }
  for (const m of marks) {
    const mx = x(m.x).toFixed(1)
    out.push(
      `<path d="M ${mx} ${y0 + height - 1} l -4 -8 l 8 0 z" fill="${m.color}"><title>autovacuum</title></path>`
    )
  }
  return out
}

const label = (p: Phase) => `${p.load === null ? "max" : `${Math.round(p.load * 100)} %`} (${rate(p.targetRate)} msg/s)`

export const sustainedSvg = (r: SustainedResult, subtitle: string): string => {
  const width = 860
  const height = 600
  const phases = r.phases
  const color = (i: number) => colors[(i + (phases.length === 1 ? 1 : 0)) % colors.length]!
  const xMax = Math.max(1, ...phases.map((p) => p.seconds))
  const mid = (w: { readonly from: number; readonly to: number }) => (w.from + w.to) / 2
  const latency: Array<Series> = phases.flatMap((p, i) => [
    { points: p.intervals.map((w) => [mid(w), w.latency.p99] as const), color: color(i), dashed: false },
    { points: p.intervals.map((w) => [mid(w), w.latency.p50] as const), color: color(i), dashed: true }
  ])
  const sizes: Array<Series> = phases.map((p, i) => ({
    points: p.ticks.map((t) => [t.at, (t.tableBytes + t.indexBytes) / 1024 ** 2] as const),
    color: color(i),
    dashed: false
  }))
  const marks = phases.flatMap((p, i) =>
    p.ticks.flatMap((
      t,
      k
    ) => (k > 0 && t.autovacuums > p.ticks[k - 1]!.autovacuums ? [{ x: t.at, color: color(i) }] : []))
  )
  const legend = [
    ...phases.map((p, i) =>
      `<g transform="translate(${16 + i * 200}, 66)"><line x1="0" y1="0" x2="24" y2="0" stroke="${color(i)}" ` +
      `stroke-width="2"/><text x="30" y="4" fill="#111">${escape(label(p))}</text></g>`
    ),
    `<text x="${16 + phases.length * 200}" y="70" fill="#555">latency: p99 solid, p50 dashed</text>`
  ]
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="13">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="16" y="24" font-size="16" font-weight="600" fill="#111">Sustained load: latency and table size over time</text>`,
    `<text x="16" y="44" fill="#555">${
      escape(
        `${r.producers} producers (max ${
          rate(r.max.achievedRate)
        } commits/s), 1 worker (batch ${r.batchSize}); ${subtitle}`
      )
    }</text>`,
    ...legend,
    ...panel(
      110,
      190,
      `Commit → handler start, per ${r.intervalSeconds} s by commit time (log scale)`,
      "ms",
      xMax,
      latency,
      [],
      true
    ),
    ...panel(
      370,
      170,
      "Table + indexes (pg_relation_size + pg_indexes_size); ▼ an autovacuum ran since the previous reading",
      "MB",
      xMax,
      sizes,
      marks
    ),
    `</svg>`,
    ""
  ]
  return out.join("\n")
}
