/**
 * One readable line for a command's failure: never empty, never `[object Object]`.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Data from "effect/Data"
import * as Schema from "effect/Schema"
import { describeError } from "../../src/internal/describeError.js"

class PaymentDeclined extends Data.TaggedError("PaymentDeclined")<{ readonly code: string }> {}
class Refused extends Schema.TaggedError<Refused>()("Refused", {}) {}

describe("describeError", () => {
  it("an error's message and its driver cause", () => {
    const error = Object.assign(new Error("Failed to execute statement"), {
      cause: new Error(`relation "x" does not exist`)
    })
    expect(describeError(error)).toBe(`Failed to execute statement: relation "x" does not exist`)
  })

  it("a wrapper whose message already holds its cause's words says them once", () => {
    const sqlError = Object.assign(new Error("Failed to execute statement"), {
      cause: new Error(`relation "x" does not exist`)
    })
    const wrapper = Object.assign(new Error(`Failed to execute statement: relation "x" does not exist`), {
      cause: sqlError
    })
    expect(describeError(wrapper)).toBe(`Failed to execute statement: relation "x" does not exist`)
  })

  it("an error without a message: its tag and its fields as JSON", () => {
    expect(describeError(new PaymentDeclined({ code: "card_expired" }))).toBe(
      `PaymentDeclined: {"code":"card_expired"}`
    )
    expect(describeError({ _tag: "PaymentDeclined", code: "card_expired" })).toBe(
      `PaymentDeclined: {"code":"card_expired"}`
    )
  })

  it("an error that says nothing: its tag, never an empty line", () => {
    expect(describeError(new Refused())).toBe("Refused")
    expect(describeError(new Error())).toBe("Error")
    expect(describeError({})).toBe("(an error without a message)")
    expect(describeError("plain text")).toBe("plain text")
  })

  it("hostile values: a line, never a throw", () => {
    const hostile = new Proxy({}, {
      get: () => {
        throw new Error("no")
      },
      has: () => {
        throw new Error("no")
      }
    })
    expect(typeof describeError(hostile)).toBe("string")
  })
})
