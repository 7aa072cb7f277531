/**
 * The dashboard's HTML: one escaping function, and a template tag that applies it to every value it is given, so
 * no value from a message (body, headers, error text, type names) reaches a page unescaped.
 *
 * @internal
 */

/**
 * HTML that is already safe: built by `html` (its values escaped) or one of the dashboard's own constants. The
 * only way a string becomes markup.
 *
 * @internal
 */
export class Html {
  constructor(readonly markup: string) {}
  toString(): string {
    return this.markup
  }
}

const entities: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  "\"": "&quot;",
  "'": "&#39;",
  "`": "&#96;"
}

/**
 * Escapes text for an HTML element or a quoted attribute value: `& < > " ' \``.
 *
 * @internal
 */
export const escapeHtml = (text: string): string => text.replace(/[&<>"'`]/g, (c) => entities[c]!)

/** What `html` takes: text (escaped), numbers, markup, nothing, or lists of these. @internal */
export type Value = string | number | Html | null | undefined | false | ReadonlyArray<Value>

const render = (value: Value): string =>
  value === null || value === undefined || value === false
    ? ""
    : value instanceof Html
    ? value.markup
    : typeof value === "number"
    ? escapeHtml(String(value))
    : typeof value === "string"
    ? escapeHtml(value)
    : value.map(render).join("")

/**
 * The template tag of every page: its literal parts are markup, every value is escaped with `escapeHtml` (an
 * `Html` value is inserted as is).
 *
 * @internal
 */
export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Value>): Html => {
  let markup = strings[0]!
  for (let i = 0; i < values.length; i++) markup += render(values[i]!) + strings[i + 1]!
  return new Html(markup)
}
