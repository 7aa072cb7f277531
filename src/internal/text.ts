/**
 * Bounds on the text the worker stores and shows about a message: reasons, error tags, type names. The body is
 * never cut; what is cut says so.
 *
 * @internal
 */

/** The longest error message kept in a reason (headers, events, logs). @internal */
export const maxMessageLength = 2000

/** The longest error tag or message type name kept in a reason. @internal */
export const maxNameLength = 200

/**
 * `text` when it fits in `max` characters, else its first `max` characters and a marker saying how many were
 * cut. A cut never splits a surrogate pair.
 *
 * @internal
 */
export const cut = (text: string, max: number): string => {
  if (text.length <= max) return text
  let end = max
  const last = text.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end--
  return `${text.slice(0, end)}… [${text.length - end} more characters cut]`
}

/** Whether `text` holds JSON arrays or objects nested deeper than `max` (strings are skipped). @internal */
export const nestedDeeperThan = (text: string, max: number): boolean => {
  // A text of n characters nests at most n / 2 levels: short texts need no scan.
  if (text.length <= 2 * max) return false
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) {
      inString = true
    } else if (c === 91 || c === 123) {
      if (++depth > max) return true
    } else if (c === 93 || c === 125) {
      depth--
    }
  }
  return false
}

/** Arrays and objects in a message's body or headers nest at most this deep; deeper ones are corrupt. @internal */
export const maxJsonDepth = 1000

/**
 * Runs a decoding step whose work recurses with its input (parsing, schema checks, formatting the errors): a
 * stack overflow on a hostile value becomes `onOverflow`'s answer instead of a crash.
 *
 * @internal
 */
export const guardStack = <A>(run: () => A, onOverflow: () => A): A => {
  try {
    return run()
  } catch (error) {
    if (isStackOverflow(error)) return onOverflow()
    throw error
  }
}

const isStackOverflow = (error: unknown): boolean => {
  // Effect wraps what a synchronous run throws in a FiberFailure whose message repeats the original.
  const message = error instanceof Error ? error.message : String(error)
  return error instanceof RangeError || message.includes("Maximum call stack size exceeded")
}
