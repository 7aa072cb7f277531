/**
 * Arbitrary stored text for the property tests of the way from a stored row to an outcome
 * (test/unit/row-outcome.property.test.ts, test/row-outcome.property.test.ts): bodies and headers as a corrupt,
 * hostile or merely unusual row can hold them — any JSON, nesting up to 10 000 levels (in the body and inside
 * header fields), `\u0000` escapes and lone surrogates, strings of megabytes, prototype keys, text that is not JSON —
 * and the bounds every error text derived from them must keep.
 */
import * as Schema from "effect/Schema"
import fc from "fast-check"
import * as Headers from "../../src/domain/Headers.js"
import * as Message from "../../src/domain/Message.js"
import * as Outcome from "../../src/domain/Outcome.js"
import * as Text from "../../src/internal/text.js"

/** The bound every error text keeps, whatever the product's own constants: an error text is never a body. */
export const textBound = 10_000

/** Room for the marker of a cut ("… [123456 more characters cut]") beyond a product constant. */
const cutMarker = 64

/** A numeric constant the product defines under `name` (Outcome, Message, Headers, its internal text bounds), if any. */
export const exported = (name: string): number | undefined => {
  for (const module of [Outcome, Message, Headers, Text] as ReadonlyArray<object>) {
    const value = (module as Record<string, unknown>)[name]
    if (typeof value === "number" && Number.isFinite(value)) return value
  }
  return undefined
}

const within = (constant: number | undefined) =>
  constant === undefined ? textBound : Math.min(textBound, constant + cutMarker)

/**
 * The longest text allowed for each kind of error text: `textBound`, or tighter when the product exports the
 * constant (`maxMessageLength`, `maxCauseLength`, `maxNameLength`), plus room for the marker of a cut.
 */
export const bounds = {
  message: within(exported("maxMessageLength")),
  cause: within(exported("maxCauseLength")),
  name: within(exported("maxNameLength"))
} as const

/** The deepest nesting the product accepts (`Message.maxJsonDepth`), if it declares one. */
export const maxJsonDepth: number | undefined = exported("maxJsonDepth")

/** Lengths of the texts that break a bound, as `field: length` (empty when every one fits). */
export const overBounds = (
  texts: ReadonlyArray<readonly [field: string, text: string | undefined, bound: number]>
): Array<string> =>
  texts.flatMap(([field, text, bound]) =>
    text !== undefined && text.length > bound ? [`${field}: ${text.length} characters (bound ${bound})`] : []
  )

// --- message classes ---------------------------------------------------------------------------------------------

export class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
  orderId: Schema.Int,
  amount: Schema.Number
}) {}

/** A class whose body carries any JSON (its schema does not look inside `data`). */
export class Payload extends Schema.TaggedClass<Payload>()("Payload", {
  data: Schema.Unknown
}) {}

/** Registered without a handler: decoded, then "no handler". */
export class OrderShipped extends Schema.TaggedClass<OrderShipped>()("OrderShipped", {
  orderId: Schema.Int,
  carrier: Schema.NonEmptyString
}) {}

// --- strings -----------------------------------------------------------------------------------------------------

/** Keys that mean something to a JavaScript object. */
export const prototypeKeys = [
  "__proto__",
  "constructor",
  "prototype",
  "toString",
  "valueOf",
  "hasOwnProperty",
  "isPrototypeOf",
  "__defineGetter__"
] as const

/** Characters that stress JSON text and its escapes: control characters, lone surrogates, brackets, quotes. */
const oddChar = fc.constantFrom(
  "\u0000",
  "\u0001",
  "\u001f",
  "\ud800",
  "\udbff",
  "\udc00",
  "\udfff",
  "\u2028",
  "\u2029",
  "\ufeff",
  "\\",
  "\"",
  "/",
  "[",
  "]",
  "{",
  "}",
  ":",
  ",",
  "\n",
  "\t",
  "😀",
  "é"
)

/**
 * A string of one to two megabytes once written as JSON (a `\u0000` is written as 6 characters, a backslash as 2):
 * low counts, so a suite stays fast.
 */
export const hugeString = fc.integer({ min: 1 << 20, max: 2 << 20 }).chain((n) =>
  fc.constantFrom<readonly [string, number]>(["x", 1], ["[", 1], ["é", 1], ["\\", 2], ["\u0000", 6]).map((
    [c, width]
  ) => c.repeat(Math.ceil(n / width)))
)

/** Any string a stored field can hold, odd characters and prototype keys included (no megabytes). */
export const oddString: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.string({
      unit: fc.oneof(oddChar, fc.string({ unit: "binary", minLength: 1, maxLength: 1 })),
      maxLength: 40
    })
  },
  { weight: 2, arbitrary: fc.constantFrom(...prototypeKeys, "", "OrderPaid", "Payload", "record", "<unknown>") },
  { weight: 1, arbitrary: fc.string({ unit: "binary" }) },
  // brackets inside a string are not nesting
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 6_000 }).map((n) => "[{".repeat(n)) }
)

/** `oddString`, and sometimes megabytes. */
export const anyString: fc.Arbitrary<string> = fc.oneof(
  { weight: 12, arbitrary: oddString },
  { weight: 1, arbitrary: hugeString }
)

// --- JSON text ---------------------------------------------------------------------------------------------------

/** Nesting depths: shallow, around the product's limit, anything up to 10 000, and 10 000. */
export const depth: fc.Arbitrary<number> = fc.oneof(
  fc.integer({ min: 1, max: 20 }),
  fc.integer({ min: Math.max(1, (maxJsonDepth ?? 1000) - 3), max: (maxJsonDepth ?? 1000) + 3 }),
  fc.integer({ min: 1, max: 10_000 }),
  fc.constant(10_000)
)

/** Arrays and objects nested `n` deep around `inner`, as text (`unclosed` is cut before its end). */
export const nest = (n: number, shape: "array" | "object" | "mixed" | "unclosed", inner = "1"): string => {
  switch (shape) {
    case "array":
      return "[".repeat(n) + inner + "]".repeat(n)
    case "object":
      return "{\"a\":".repeat(n) + inner + "}".repeat(n)
    case "mixed":
      return "[{\"__proto__\":".repeat(Math.ceil(n / 2)) + inner + "}]".repeat(Math.ceil(n / 2))
    case "unclosed":
      return "[".repeat(n) + inner
  }
}

/** Deeply nested JSON text (or nearly JSON: `unclosed`). */
export const nestedText: fc.Arbitrary<string> = fc.tuple(
  depth,
  fc.constantFrom("array", "object", "mixed", "unclosed") as fc.Arbitrary<"array" | "object" | "mixed" | "unclosed">,
  fc.constantFrom("1", "\"\\u0000\"", "\"\\ud800\"", "null", "[]", "{}")
).map(([n, shape, inner]) => nest(n, shape, inner))

/** JSON values with odd strings and prototype keys (as own keys, which JSON.stringify writes). */
export const jsonValue: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.constantFrom(2 ** 31 - 1, 2 ** 31, -(2 ** 31) - 1, Number.MAX_SAFE_INTEGER, 1e308, -1e308, 5e-324, -0),
    oddString,
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.oneof(fc.constantFrom(...prototypeKeys), oddString), tie("value"), { maxKeys: 4 })
  )
})).value

/** Any JSON text: `jsonValue` written out, or fast-check's own JSON. */
export const jsonText: fc.Arbitrary<string> = fc.oneof(
  jsonValue.map((v) => JSON.stringify(v)),
  fc.json()
)

/**
 * Raw JSON text to put where a value goes: any JSON, deep nesting, a huge string, a number out of every range,
 * `\u0000` and lone-surrogate escapes.
 */
export const rawValue: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: jsonText },
  { weight: 3, arbitrary: nestedText },
  { weight: 1, arbitrary: hugeString.map((s) => JSON.stringify(s)) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "\"\\u0000\"",
      "\"\\ud800\"",
      "\"\\udfff\\ud800\"",
      "1e400",
      "-1e400",
      "1e-400",
      "123456789012345678901234567890"
    )
  }
)

/** Text that is not JSON (or is JSON with something wrong at the end). */
export const notJson: fc.Arbitrary<string> = fc.oneof(
  fc.string({ unit: "binary", maxLength: 60 }),
  fc.string({ unit: oddChar, maxLength: 60 }),
  jsonText.chain((text) => fc.nat(text.length).map((n) => text.slice(0, n))),
  jsonText.map((text) => `${text} trailing`),
  fc.constantFrom("", " ", "undefined", "NaN", "Infinity", "'single'", "{\"type\":\"OrderPaid\",}", "\u0000", "\ud800")
)

// --- bodies ------------------------------------------------------------------------------------------------------

/** The body of a valid OrderPaid (an integer id, any finite amount). */
export const validBody = (orderId: number, amount: number): string =>
  JSON.stringify({ _tag: "OrderPaid", orderId, amount })

const orderIds = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })
const amounts = fc.double({ noNaN: true, noDefaultInfinity: true })

/** Any body text a row can hold. */
export const bodyText: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.tuple(orderIds, amounts).map(([id, amount]) => validBody(id, amount)) },
  {
    weight: 3,
    arbitrary: fc.tuple(fc.constantFrom("orderId", "amount", "_tag", "data", "extra", ...prototypeKeys), rawValue).map((
      [field, raw]
    ) => {
      switch (field) {
        case "orderId":
          return `{"_tag":"OrderPaid","orderId":${raw},"amount":1}`
        case "amount":
          return `{"_tag":"OrderPaid","orderId":1,"amount":${raw}}`
        case "_tag":
          return `{"_tag":${raw},"orderId":1,"amount":1}`
        case "data":
          return `{"_tag":"Payload","data":${raw}}`
        default:
          return `{"_tag":"OrderPaid","orderId":1,"amount":1,${JSON.stringify(field)}:${raw}}`
      }
    })
  },
  { weight: 2, arbitrary: rawValue },
  { weight: 2, arbitrary: notJson }
)

// --- headers -----------------------------------------------------------------------------------------------------

/** Any value of a field of the stored headers, as JSON text. */
const headerFieldValue: fc.Arbitrary<readonly [string, string]> = fc.oneof(
  fc.tuple(
    fc.constant("custom"),
    fc.oneof(
      rawValue,
      fc.tuple(fc.oneof(fc.constantFrom(...prototypeKeys), oddString), rawValue).map(([k, v]) =>
        `{${JSON.stringify(k)}:${v}}`
      )
    )
  ),
  fc.tuple(
    fc.constant("redeliveries"),
    fc.oneof(
      rawValue,
      rawValue.map((v) => `[{"retryCount":${v},"delayMs":1,"errorTag":"E","errorMessage":"m"}]`),
      rawValue.map((v) => `[{"retryCount":1,"delayMs":1,"errorTag":"E","errorMessage":${v}}]`)
    )
  ),
  fc.tuple(
    fc.constantFrom(
      "type",
      "transportNames",
      "delayMs",
      "handledBy",
      "errorDetails",
      "originalTransport",
      "rawHeaders",
      "extra",
      ...prototypeKeys
    ),
    rawValue
  ),
  fc.tuple(fc.constant("errorDetails"), rawValue.map((v) => `{"tag":${v},"message":"m"}`))
)

/** Valid stored headers: any stamps, odd strings everywhere. */
export const validHeaders: fc.Arbitrary<Headers.Headers> = fc.record({
  type: fc.oneof({ weight: 3, arbitrary: fc.constantFrom("OrderPaid", "Payload", "OrderShipped") }, {
    weight: 1,
    arbitrary: anyString
  }),
  transportNames: fc.option(fc.array(oddString, { maxLength: 3 }), { nil: undefined }),
  delayMs: fc.option(fc.double({ noNaN: true, noDefaultInfinity: true }), { nil: undefined }),
  redeliveries: fc.option(
    fc.array(
      fc.record({
        retryCount: fc.oneof(fc.integer({ min: -5, max: 20 }), fc.constantFrom(2 ** 31 - 1, Number.MAX_SAFE_INTEGER)),
        delayMs: fc.oneof(fc.integer({ min: 0, max: 3_600_000 }), fc.double({ noNaN: true, noDefaultInfinity: true })),
        errorTag: oddString,
        errorMessage: anyString
      }).map((r) => new Headers.Redelivery(r)),
      { maxLength: 12 }
    ),
    { nil: undefined }
  ),
  handledBy: fc.option(fc.array(oddString, { maxLength: 3 }), { nil: undefined }),
  errorDetails: fc.option(
    fc.record({ tag: oddString, message: anyString, cause: fc.option(anyString, { nil: undefined }) }).map((d) =>
      new Headers.ErrorDetails(d)
    ),
    { nil: undefined }
  ),
  originalTransport: fc.option(oddString, { nil: undefined }),
  rawHeaders: fc.option(anyString, { nil: undefined }),
  custom: fc.option(fc.dictionary(fc.oneof(fc.constantFrom(...prototypeKeys), oddString), anyString, { maxKeys: 4 }), {
    nil: undefined
  })
}, { requiredKeys: ["type"] }).map((fields) =>
  new Headers.Headers(
    Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined)) as ConstructorParameters<
      typeof Headers.Headers
    >[0]
  )
)

/** Any headers text a row can hold. */
export const headersText: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      "{\"type\":\"OrderPaid\"}",
      "{\"type\":\"Payload\"}",
      "{\"type\":\"OrderShipped\"}",
      "{\"type\":\"Refund\"}"
    )
  },
  { weight: 3, arbitrary: validHeaders.map((h) => Headers.encode(h)) },
  {
    weight: 4,
    arbitrary: fc.tuple(fc.constantFrom("OrderPaid", "Payload"), headerFieldValue).map(([type, [field, raw]]) =>
      field === "type" ? `{"type":${raw}}` : `{"type":${JSON.stringify(type)},${JSON.stringify(field)}:${raw}}`
    )
  },
  { weight: 2, arbitrary: rawValue },
  { weight: 2, arbitrary: notJson }
)

/**
 * The text as PostgreSQL can store it: a `text` column holds no NUL character (`\u0000` as an escape is kept as
 * such). Lone surrogates reach the server as U+FFFD, which the comparisons read back from the server anyway.
 */
export const storable = (text: string): string => text.includes("\u0000") ? text.replace(/\u0000/g, "\\u0000") : text

/** A short description of a text for a failure message: its length, its first and last characters. */
export const preview = (text: string): string =>
  text.length <= 160
    ? JSON.stringify(text)
    : `${JSON.stringify(text.slice(0, 100))}…${JSON.stringify(text.slice(-40))} (${text.length} characters)`

/** A text that fast-check shows in a counterexample by its `preview` (megabytes stay out of the report). */
export interface Shown {
  readonly text: string
}

/** `arb`'s texts, shown by their preview (replay the seed and path for the whole text). */
export const shown = (arb: fc.Arbitrary<string>): fc.Arbitrary<Shown> =>
  arb.map((text) => ({ text, [fc.toStringMethod]: () => preview(text) }))
