/**
 * The dashboard's reading of a request's values: what a query or form value may be, and the error of one that
 * cannot be taken.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/** A request the dashboard cannot answer as asked: 400 (or `status`) with its message. @internal */
export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", {
  message: Schema.String,
  status: Schema.optionalWith(Schema.Number, { default: () => 400 })
}) {}

/** The longest query or form value taken (a type name, an error tag, a transport). */
const maxValueLength = 1000

/** A query or form value: absent or empty is `undefined`; given twice or too long is a bad request. @internal */
export const valueOf = (
  key: string,
  value: string | ReadonlyArray<string> | undefined
): Effect.Effect<string | undefined, BadRequest> => {
  if (typeof value !== "string" && value !== undefined && value.length > 1) {
    return new BadRequest({ message: `"${key}" is given more than once` })
  }
  const one = typeof value === "string" ? value : value?.[0]
  if (one !== undefined && one.length > maxValueLength) {
    return new BadRequest({ message: `"${key}" is too long (at most ${maxValueLength} characters)` })
  }
  return Effect.succeed(one === "" ? undefined : one)
}
