/**
 * What the ordering-key tests share: a message per key and step, a handler that records when each step of a key
 * starts (and whether two of a key ever ran at once) and fails chosen steps a few times first, and the check.
 */
import { expect } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Handlers from "../../src/services/Handlers.js"

export class Step extends Schema.TaggedClass<Step>()("Step", { key: Schema.String, n: Schema.Int }) {}

/** Keys `k0…k{keys-1}`, steps 1…perKey; step n fails `failsFirst(n)` times before it succeeds. */
export const orderedSteps = (options: {
  readonly keys: number
  readonly perKey: number
  readonly failsFirst: (n: number) => number
}) => {
  const { failsFirst, keys, perKey } = options
  const active = new Set<string>()
  const overlaps: Array<string> = []
  const started = new Map<string, Array<number>>()
  const attempts = new Map<string, number>()
  let retries = 0
  for (let n = 1; n <= perKey; n++) retries += keys * failsFirst(n)
  const handler = Handlers.handler(Step, (step) =>
    Effect.gen(function*() {
      if (active.has(step.key)) overlaps.push(`${step.key}#${step.n}`)
      active.add(step.key)
      started.set(step.key, [...(started.get(step.key) ?? []), step.n])
      yield* Effect.sleep(`${(step.n * 7) % 3} millis`)
      active.delete(step.key)
      const id = `${step.key}#${step.n}`
      const attempt = (attempts.get(id) ?? 0) + 1
      attempts.set(id, attempt)
      if (attempt <= failsFirst(step.n)) return yield* Effect.fail(new Error(`${id} not yet`))
    }))
  /** Every key's steps started one at a time, in order, each again after each of its failures. */
  const check = () => {
    expect(overlaps).toEqual([])
    for (let k = 0; k < keys; k++) {
      const expected = Array.from({ length: perKey }, (_, i) => i + 1).flatMap((n) =>
        Array.from({ length: failsFirst(n) + 1 }, () => n)
      )
      expect(started.get(`k${k}`), `k${k}`).toEqual(expected)
    }
  }
  return { handler, check, retries, total: keys * perKey + retries }
}
