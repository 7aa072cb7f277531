/**
 * How the command line shows a reason in one line: the most useful line of a Schema tree, the first of a stack.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { headline } from "../../src/programs/cli/format.js"

class OrderPaid extends Schema.TaggedClass<OrderPaid>()("OrderPaid", {
  orderId: Schema.Int,
  amount: Schema.Number,
  lines: Schema.Array(Schema.Struct({ sku: Schema.String }))
}) {}

const treeOf = (input: unknown): string => {
  const result = Schema.decodeUnknownEither(OrderPaid)(input)
  if (Either.isRight(result)) throw new Error("expected a failure")
  return ParseResult.TreeFormatter.formatErrorSync(result.left)
}

describe("headline", () => {
  it("a Schema tree: its deepest line, after the keys that lead to it", () => {
    const tree = treeOf({ _tag: "OrderPaid", orderId: 1, amount: "x", lines: [] })
    expect(tree.split("\n").length).toBeGreaterThan(3)
    expect(headline(tree, 100)).toBe(`["amount"] Expected number, actual "x"`)
    const nested = treeOf({ _tag: "OrderPaid", orderId: 1, amount: 1, lines: [{ sku: 5 }] })
    expect(headline(nested, 100)).toBe(`["lines"][0]["sku"] Expected string, actual 5`)
  })

  it("one line: itself, collapsed and bounded", () => {
    expect(headline("carrier API exploded", 100)).toBe("carrier API exploded")
    expect(headline("x".repeat(500), 100)).toHaveLength(100)
  })

  it("several lines that are not a tree (a stack): the first", () => {
    expect(headline("Error: boom\n    at handler (app.ts:1:1)\n    at run (worker.ts:2:2)", 100)).toBe("Error: boom")
  })

  it("is bounded whatever the tree", () => {
    const tree = treeOf({ _tag: "OrderPaid", orderId: 1, amount: "y".repeat(10_000), lines: [] })
    expect(headline(tree, 100).length).toBeLessThanOrEqual(100)
  })
})
