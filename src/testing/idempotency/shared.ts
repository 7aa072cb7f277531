/**
 * What the idempotency store suite's cases share: the backend under test, its members bound, and test data.
 *
 * @internal
 */
import type { Vitest } from "@effect/vitest"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type { IdempotencyKey } from "../../domain/IdempotencyKey.js"
import * as MessageId from "../../domain/MessageId.js"
import type { IdempotencyStoreShape } from "../../services/IdempotencyStore.js"
import type { Backend } from "../IdempotencyStoreSuite.js"

/** The backend and the suite's `it`, for each group of cases. @internal */
export interface Context<S extends IdempotencyStoreShape, R> {
  readonly it: Vitest.MethodsNonLive<R>
  readonly backend: Backend<S, R>
  readonly make: (options?: { readonly retention?: Duration.DurationInput }) => Effect.Effect<S, unknown, R>
  readonly age: Backend<S, R>["age"]
  readonly count: Backend<S, R>["count"]
}

/** A failure of the effect under test. @internal */
export class Boom {
  readonly _tag = "Boom"
  constructor(readonly detail = "boom") {}
}

export const key = (consumer = "invoices"): IdempotencyKey => ({ messageId: MessageId.make(), consumer })

export const tagOf = (u: unknown): unknown =>
  typeof u === "object" && u !== null ? (u as { _tag?: unknown })._tag : undefined
