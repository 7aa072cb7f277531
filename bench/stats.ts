/**
 * Median / min / max of rounds, number formatting and Markdown tables (printed as is on the console).
 */

export interface Summary {
  readonly median: number
  readonly min: number
  readonly max: number
  readonly rounds: number
}

export const summarize = (values: ReadonlyArray<number>): Summary => {
  if (values.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, rounds: 0 }
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  const median = sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
  return { median, min: sorted[0]!, max: sorted[sorted.length - 1]!, rounds: sorted.length }
}

/** 58 123 → "58 100"-style grouping with a thin space, rounded to 3 significant digits above 1 000. */
export const rate = (value: number): string => {
  if (!Number.isFinite(value)) return "–"
  const rounded = value >= 1000
    ? Math.round(value / 10) * 10
    : value >= 100
    ? Math.round(value)
    : Number(value.toPrecision(3))
  return rounded.toLocaleString("en-US").replace(/,/g, " ")
}

export const ratio = (value: number): string => (Number.isFinite(value) ? `${value.toFixed(2)}×` : "–")

export const mb = (bytes: number): string => (Number.isFinite(bytes) ? `${(bytes / (1024 * 1024)).toFixed(1)} MB` : "–")

export const signedMb = (bytes: number): string =>
  Number.isFinite(bytes) ? `${bytes >= 0 ? "+" : "−"}${(Math.abs(bytes) / (1024 * 1024)).toFixed(1)} MB` : "–"

/** A Markdown table whose columns are padded, so it reads the same on a terminal. */
export const table = (
  header: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string>>,
  align: ReadonlyArray<"l" | "r"> = []
): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const pad = (cell: string, i: number) => (align[i] === "r" ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!))
  const line = (cells: ReadonlyArray<string>) => `| ${cells.map((c, i) => pad(c, i)).join(" | ")} |`
  const rule = `|${
    widths.map((w, i) => (align[i] === "r" ? `${"-".repeat(w + 1)}:` : `${"-".repeat(w + 2)}`)).join("|")
  }|`
  return [line(header), rule, ...rows.map((r) => line(header.map((_, i) => r[i] ?? "")))].join("\n")
}
