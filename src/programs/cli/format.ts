/** @internal */
export const renderTable = (
  header: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string>>
): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ").trimEnd()
  const rule = widths.map((w) => "-".repeat(w)).join("-+-")
  return [line(header), rule, ...rows.map(line)].join("\n")
}

/** @internal */
export const formatTime = (date: Date | null): string =>
  date === null ? "-" : `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`

/** @internal */
export const formatAge = (ms: number | null): string => {
  if (ms === null) return "-"
  if (!Number.isFinite(ms)) return ms > 0 ? "forever" : "-"
  if (ms < 1000) return `${Math.round(ms)}ms`
  const s = ms / 1000
  if (s < 60) return `${s.toFixed(1)}s`
  if (s < 3600) return `${Math.floor(s / 60)}m${Math.round(s % 60)}s`
  if (s < 86_400) return `${Math.floor(s / 3600)}h${Math.round((s % 3600) / 60)}m`
  return `${Math.floor(s / 86_400)}d${Math.round((s % 86_400) / 3600)}h`
}

/** @internal */
export const truncate = (text: string, max: number): string => text.length <= max ? text : `${text.slice(0, max - 1)}…`

/** Parses `128M`-style sizes (K, M, G: powers of 1024; plain number: bytes). @internal */
export const parseBytes = (input: string): number | undefined => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([KMG]?)B?\s*$/i.exec(input)
  if (match === null) return undefined
  const unit = { "": 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[match[2]!.toUpperCase() as "" | "K" | "M" | "G"]
  const bytes = Math.floor(Number(match[1]) * unit)
  return bytes > 0 ? bytes : undefined
}

/** A size in bytes, in the largest unit of 1024 that keeps it ≥ 1 (`131.2 MB`, `16 kB`). @internal */
export const formatBytes = (bytes: number): string => {
  if (bytes < 1024) return `${bytes} B`
  const units = ["kB", "MB", "GB", "TB"]
  let value = bytes / 1024
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return `${value >= 100 || Number.isInteger(value) ? value.toFixed(0) : value.toFixed(1)} ${units[unit]}`
}

/** Collapses a multi-line message (a Schema parse tree, a stack) onto one line. @internal */
export const oneLine = (text: string): string => text.replace(/\s*\n\s*/g, " ").trim()

/** Parses durations such as `30d`, `12h`, `90 minutes`, `1.5 days` into milliseconds. @internal */
export const parseDurationMs = (input: string): number | undefined => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(input)
  if (match === null) return undefined
  const units: Record<string, number> = {
    "ms": 1,
    "millis": 1,
    "milliseconds": 1,
    "": 1000,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
    "w": 604_800_000,
    "week": 604_800_000,
    "weeks": 604_800_000
  }
  const unit = units[match[2]!.toLowerCase()]
  return unit === undefined ? undefined : Number(match[1]) * unit
}

/** The tree glyphs of `ParseResult.TreeFormatter` (and the indentation around them). */
const treeGlyphs = /^[\s│├└─]*/

/**
 * The most useful line of a reason, on one line and at most `max` characters: for a Schema parse tree, its
 * deepest line — what was expected and what was found — after the keys that lead to it
 * (`["amount"] Expected number, actual "x"`); for any other text of several lines (a stack), its first line.
 *
 * @internal
 */
export const headline = (text: string, max: number): string => {
  const lines = text.split("\n").filter((line) => line.trim().length > 0)
  if (lines.length <= 1) return truncate(oneLine(text), max)
  const isTree = lines.slice(1).every((line) => /^[\s│]*[└├]─/.test(line))
  if (!isTree) return truncate(lines[0]!.trim(), max)
  const indent = (line: string) => treeGlyphs.exec(line)![0].length
  const strip = (line: string) => line.slice(indent(line)).trim()
  const last = lines[lines.length - 1]!
  // The keys on the way from the root to the last line: the lines above it, each less indented than the one below.
  const path: Array<string> = []
  let depth = indent(last)
  for (let i = lines.length - 2; i >= 1; i--) {
    const line = lines[i]!
    if (indent(line) >= depth) continue
    depth = indent(line)
    const step = strip(line)
    if (/^\[.*\]$/.test(step)) path.unshift(step)
  }
  return truncate(path.length === 0 ? strip(last) : `${path.join("")} ${strip(last)}`, max)
}
