/**
 * The burn-down chart: one horizontal bar per contender (median), a whisker from min to max, and the
 * value. Plain SVG text, generated from the run's own results.
 */
import { rate } from "./stats.js"

export interface Bar {
  readonly label: string
  readonly median: number
  readonly min: number
  readonly max: number
  readonly ours: boolean
}

export const escape = (s: string) =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

export const niceStep = (max: number): number => {
  const raw = max / 5
  const magnitude = 10 ** Math.floor(Math.log10(raw))
  const n = raw / magnitude
  return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * magnitude
}

export const burnDownSvg = (bars: ReadonlyArray<Bar>, subtitle: string): string => {
  const width = 860
  const left = 300
  const right = 90
  const top = 64
  const barHeight = 22
  const gap = 12
  const plotWidth = width - left - right
  const height = top + bars.length * (barHeight + gap) + 40
  const top1 = Math.max(1, ...bars.map((b) => (Number.isFinite(b.max) ? b.max : 0)))
  const step = niceStep(top1)
  const scaleMax = Math.ceil(top1 / step) * step
  const x = (v: number) => left + (Math.max(0, v) / scaleMax) * plotWidth
  const out: Array<string> = []
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="13">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="16" y="24" font-size="16" font-weight="600" fill="#111">Burn-down: messages per second (median of rounds; whisker = min–max)</text>`,
    `<text x="16" y="44" fill="#555">${escape(subtitle)}</text>`
  )
  for (let v = 0; v <= scaleMax + 1e-9; v += step) {
    const gx = x(v).toFixed(1)
    out.push(
      `<line x1="${gx}" y1="${top - 6}" x2="${gx}" y2="${height - 34}" stroke="#e5e5e5"/>`,
      `<text x="${gx}" y="${height - 18}" text-anchor="middle" fill="#777" font-size="11">${escape(rate(v))}</text>`
    )
  }
  bars.forEach((bar, i) => {
    const y = top + i * (barHeight + gap)
    const cy = y + barHeight / 2
    const fill = bar.ours ? "#2563eb" : "#9ca3af"
    out.push(
      `<text x="${left - 10}" y="${cy + 4}" text-anchor="end" fill="#111"${bar.ours ? ` font-weight="600"` : ""}>${
        escape(bar.label)
      }</text>`
    )
    if (Number.isFinite(bar.median)) {
      out.push(
        `<rect x="${left}" y="${y}" width="${
          Math.max(1, x(bar.median) - left).toFixed(1)
        }" height="${barHeight}" fill="${fill}" rx="2"/>`
      )
      if (Number.isFinite(bar.min) && Number.isFinite(bar.max) && bar.max > bar.min) {
        out.push(
          `<line x1="${x(bar.min).toFixed(1)}" y1="${cy}" x2="${
            x(bar.max).toFixed(1)
          }" y2="${cy}" stroke="#111" stroke-width="1.5"/>`,
          `<line x1="${x(bar.min).toFixed(1)}" y1="${cy - 5}" x2="${x(bar.min).toFixed(1)}" y2="${
            cy + 5
          }" stroke="#111" stroke-width="1.5"/>`,
          `<line x1="${x(bar.max).toFixed(1)}" y1="${cy - 5}" x2="${x(bar.max).toFixed(1)}" y2="${
            cy + 5
          }" stroke="#111" stroke-width="1.5"/>`
        )
      }
      out.push(
        `<text x="${(Math.max(x(bar.median), Number.isFinite(bar.max) ? x(bar.max) : 0) + 8).toFixed(1)}" y="${
          cy + 4
        }" fill="#111">${escape(rate(bar.median))}</text>`
      )
    }
  })
  out.push(`</svg>`, "")
  return out.join("\n")
}
