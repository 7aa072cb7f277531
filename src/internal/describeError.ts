/**
 * One readable line for an error and its driver cause: `"Failed to execute statement: relation … does not exist"`.
 *
 * @internal
 */
export const describeError = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    const message = (error as { message?: unknown }).message
    const cause = (error as { cause?: unknown }).cause
    const inner = typeof cause === "object" && cause !== null ? (cause as { message?: unknown }).message : undefined
    const parts = [message, inner].filter((s): s is string => typeof s === "string" && s.length > 0)
    if (parts.length > 0) return Array.from(new Set(parts)).join(": ")
  }
  return String(error)
}
