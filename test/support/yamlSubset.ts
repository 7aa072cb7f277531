/**
 * A strict reader of the part of YAML that configuration files such as Prometheus' rules use — no dependency for
 * it: block mappings and block sequences (nested by indentation, spaces only), plain, single- and double-quoted
 * scalars, `|` and `>` block scalars (with `-` to strip the final line break), and `#` comments. Every scalar is a
 * string. Anything else — flow collections (`[…]`, `{…}`), anchors, tags, documents, multi-line plain or quoted
 * scalars, tabs, duplicate keys — throws with its line number rather than being read wrongly.
 */

export type YamlValue = string | ReadonlyArray<YamlValue> | { readonly [key: string]: YamlValue }

interface Line {
  readonly number: number
  indent: number
  text: string
}

function fail(line: Line | undefined, what: string): never {
  throw new Error(`YAML subset: ${what}${line === undefined ? "" : ` at line ${line.number}`}`)
}

const entry = /^([A-Za-z_][\w.-]*):(?: +(.*))?$/

/** A scalar on one line: quoted (then only a comment may follow) or plain (a ` #` starts a comment). */
const scalar = (line: Line, raw: string): string => {
  if (raw.startsWith("\"")) {
    const end = /^"(?:[^"\\]|\\.)*"/.exec(raw)
    if (end === null || !/^ *(?:#.*)?$/.test(raw.slice(end[0].length))) fail(line, "an unterminated double quote")
    try {
      return JSON.parse(end![0]) as string
    } catch {
      return fail(line, "an escape outside JSON's")
    }
  }
  if (raw.startsWith("'")) {
    const end = /^'(?:[^']|'')*'/.exec(raw)
    if (end === null || !/^ *(?:#.*)?$/.test(raw.slice(end[0].length))) fail(line, "an unterminated single quote")
    return end![0].slice(1, -1).replaceAll("''", "'")
  }
  const value = raw.replace(/ +#.*$/, "").trimEnd()
  if (/^[[\]{}&*!|>%@`,?-]/.test(value) && !/^-\S/.test(value)) fail(line, `an unsupported scalar (${value})`)
  if (/: |:$/.test(value)) fail(line, `a ": " in a plain scalar (${value}): quote it`)
  return value
}

export const parseYaml = (text: string): YamlValue => {
  if (text.includes("\t")) fail(undefined, "a tab (only spaces indent)")
  const lines: Array<Line> = text.split("\n").map((raw, i) => ({
    number: i + 1,
    indent: raw.length - raw.trimStart().length,
    text: raw.trim()
  }))
  let at = 0
  /** The next line that is neither blank nor a comment (block scalars read their lines themselves). */
  const next = (): Line | undefined => {
    while (at < lines.length && (lines[at]!.text === "" || lines[at]!.text.startsWith("#"))) at++
    return lines[at]
  }

  const blockScalar = (style: string, parentIndent: number): string => {
    const body: Array<string> = []
    let indent: number | undefined
    for (; at < lines.length; at++) {
      const line = lines[at]!
      if (line.text === "") {
        body.push("")
        continue
      }
      if (line.indent <= parentIndent) break
      indent ??= line.indent
      if (line.indent < indent) fail(line, "a block scalar line indented less than its first")
      if (style.startsWith(">") && line.indent > indent) fail(line, "a more-indented line in a folded scalar")
      body.push(" ".repeat(line.indent - indent) + line.text)
    }
    while (body.length > 0 && body[body.length - 1] === "") body.pop()
    const joined = style.startsWith("|")
      ? body.join("\n")
      : body.reduce(
        (folded, part, i) => i === 0 ? part : folded + (part === "" ? "\n" : folded.endsWith("\n") ? part : ` ${part}`),
        ""
      )
    return style.endsWith("-") || joined === "" ? joined : `${joined}\n`
  }

  /** The value after `key:` or `- `: on the same line, or the block below it. */
  const valueOf = (line: Line, rest: string | undefined, indent: number, sequenceMayAlign: boolean): YamlValue => {
    if (rest !== undefined && rest !== "" && !rest.startsWith("#")) {
      if (/^[|>]-?$/.test(rest)) {
        at++
        return blockScalar(rest, indent)
      }
      at++
      return scalar(line, rest)
    }
    at++
    const below = next()
    if (below !== undefined && below.indent > indent) return block(below.indent)
    if (sequenceMayAlign && below !== undefined && below.indent === indent && /^-( |$)/.test(below.text)) {
      return block(indent)
    }
    return fail(line, "a key without a value")
  }

  const block = (indent: number): YamlValue => {
    const first = next()!
    if (/^-( |$)/.test(first.text)) {
      const items: Array<YamlValue> = []
      for (
        let line = next();
        line !== undefined && line.indent === indent && /^-( |$)/.test(line.text);
        line = next()
      ) {
        const rest = line.text.slice(1).trimStart()
        if (rest === "" || rest.startsWith("#")) {
          items.push(valueOf(line, undefined, indent, false))
        } else if (entry.test(rest) || /^-( |$)/.test(rest)) {
          // `- key: value` (`- - item`): a mapping (a sequence) aligned with its first key (item).
          line.indent = indent + line.text.length - rest.length
          line.text = rest
          items.push(block(line.indent))
        } else {
          items.push(valueOf(line, rest, indent, false))
        }
      }
      const after = next()
      if (after !== undefined && after.indent > indent) fail(after, "a line indented deeper than its block")
      return items
    }
    const mapping: Record<string, YamlValue> = {}
    for (let line = next(); line !== undefined && line.indent === indent; line = next()) {
      if (/^-( |$)/.test(line.text)) break
      const match = entry.exec(line.text)
      if (match === null) return fail(line, `an unsupported line (${line.text})`)
      const key = match[1]!
      if (Object.hasOwn(mapping, key)) fail(line, `a duplicate key ${key}`)
      mapping[key] = valueOf(line, match[2], indent, true)
    }
    const after = next()
    if (after !== undefined && after.indent > indent) fail(after, "a line indented deeper than its block")
    return mapping
  }

  const first = next()
  if (first === undefined) return fail(undefined, "an empty document")
  if (first.indent !== 0) fail(first, "a document that does not start at column 0")
  const value = block(0)
  const rest = next()
  if (rest !== undefined) fail(rest, "a line outside the document's block")
  return value
}
