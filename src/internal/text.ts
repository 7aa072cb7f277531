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

/** How deep `fieldsJson` follows nested objects and arrays; deeper ones are shown as `"…"`. @internal */
const maxFieldsDepth = 6

/** The keys an error's own text already says (its tag, message and stack) or that its cause chain shows. */
const describedKeys = new Set(["_tag", "message", "stack", "cause", "name"])

/**
 * The fields of a failure as JSON — `{"code":"card_expired"}` for a `{ _tag: "PaymentDeclined", code }` — without
 * the keys an error's own text already says (`_tag`, `message`, `name`, `stack`, `cause`). At most about `max`
 * characters (a longer text is cut and says so). Never throws: a getter that throws reads as `"(unreadable)"`, a
 * cycle as `"(circular)"`, a `bigint` as its digits, a value nested deeper than a few levels as `"…"`; functions
 * and symbols are left out, as `JSON.stringify` does. `undefined` when there is no field to show.
 *
 * @internal
 */
export const fieldsJson = (value: object, max: number): string | undefined => boundedJson(value, max, true)

/**
 * Any value as JSON, bounded and never throwing, as `fieldsJson` renders fields (no key left out). `undefined` for
 * an empty object or array.
 *
 * @internal
 */
export const valueJson = (value: object, max: number): string | undefined => boundedJson(value, max, false)

const boundedJson = (value: object, max: number, omitDescribed: boolean): string | undefined => {
  const parts: Array<string> = []
  let length = 0
  let full = false
  const push = (text: string) => {
    if (full) return
    parts.push(text)
    length += text.length
    if (length > max) full = true
  }
  const seen = new Set<object>()
  const write = (v: unknown, depth: number): void => {
    if (full) return
    switch (typeof v) {
      case "string":
        return push(JSON.stringify(v.length > max ? v.slice(0, max) : v))
      case "number":
        return push(Number.isFinite(v) ? String(v) : JSON.stringify(String(v)))
      case "bigint":
        return push(v.toString())
      case "boolean":
        return push(String(v))
      case "undefined":
      case "function":
      case "symbol":
        return push("null")
    }
    if (v === null) return push("null")
    const object = v as object
    if (seen.has(object)) return push(`"(circular)"`)
    if (depth >= maxFieldsDepth) return push(`"…"`)
    const date = readSafely(() => (object instanceof Date ? object.toISOString() : undefined), undefined)
    if (date !== undefined) return push(JSON.stringify(date))
    seen.add(object)
    if (readSafely(() => Array.isArray(object), false)) {
      const items = object as ReadonlyArray<unknown>
      const count = readSafely(() => items.length, 0)
      push("[")
      for (let i = 0; i < count && !full; i++) {
        if (i > 0) push(",")
        write(readSafely(() => items[i], "(unreadable)"), depth + 1)
      }
      push("]")
    } else {
      push("{")
      let first = true
      for (const key of readSafely(() => Object.keys(object), [] as Array<string>)) {
        if (full) break
        if (omitDescribed && depth === 0 && describedKeys.has(key)) continue
        const field = readSafely(() => (object as Record<string, unknown>)[key], "(unreadable)")
        if (typeof field === "function" || typeof field === "symbol" || field === undefined) continue
        if (!first) push(",")
        first = false
        push(`${JSON.stringify(key)}:`)
        write(field, depth + 1)
      }
      push("}")
    }
    seen.delete(object)
  }
  write(value, 0)
  const text = parts.join("")
  if (text === "{}" || text === "[]") return undefined
  return full ? cut(text, max) : text
}

/** What `read` gives, or `fallback` when it throws (a hostile getter or proxy). */
const readSafely = <A>(read: () => A, fallback: A): A => {
  try {
    return read()
  } catch {
    return fallback
  }
}
