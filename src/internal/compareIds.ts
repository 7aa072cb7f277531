/**
 * Orders transport ids (decimal, no leading zeros) without a BigInt per comparison: shorter is smaller, then lexical.
 *
 * @internal
 */
export const compareIds = (a: string, b: string): number =>
  a.length !== b.length ? a.length - b.length : a < b ? -1 : a > b ? 1 : 0
