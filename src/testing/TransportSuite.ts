/**
 * The transport conformance suite: the contract of `Transport` and `TransportAdmin` (see
 * `services/Transport.ts`), as `@effect/vitest` tests any backend can run against itself. Cases a backend's
 * capabilities rule out (leases, browsing, stable ids, counted deliveries, ordering keys) or that need its clock moved
 * (`advance`) are skipped, as River's `riverdrivertest` skips what a driver lacks.
 *
 * @since 0.1.0
 */
import { layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { TransportBackend } from "../services/TransportAdmin.js"
import * as Admin from "./transport/admin.js"
import * as Claims from "./transport/claims.js"
import * as Crashes from "./transport/crashes.js"
import * as Ordering from "./transport/ordering.js"
import * as Settling from "./transport/settling.js"
import * as Shared from "./transport/shared.js"
import type { When } from "./transport/shared.js"

/**
 * A backend under test.
 *
 * @since 0.1.0
 * @category models
 */
export interface BackendUnderTest<R> {
  /** The name of the describe block. */
  readonly name: string
  /** What `make` and `advance` need (a database, a broker connection); built once for the suite. */
  readonly layer: Layer.Layer<R, unknown>
  /**
   * A fresh, empty backend serving `outbox` (lease `lease` ms), `other` and `failed` (the failure transport of
   * both).
   */
  readonly make: Effect.Effect<TransportBackend, unknown, R | Scope.Scope>
  /** Moves the backend's notion of "now" forward; without it, the cases that wait for time are skipped. */
  readonly advance?: (backend: TransportBackend, ms: number) => Effect.Effect<void, unknown, R>
}

/**
 * The lease `make` must give `outbox`, in milliseconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const lease = Shared.lease

/**
 * Registers the suite for a backend.
 *
 * @since 0.1.0
 * @category suites
 */
export const exerciseTransport = <R>(backend: BackendUnderTest<R>): void =>
  layer(backend.layer)(backend.name, (it) => {
    /** The case runs only when the backend can (its capabilities for `outbox`, and a clock to move). */
    const when: When<R> = (title, needs, body) =>
      it.scoped(title, () =>
        Effect.gen(function*() {
          // The backend lives for the case (a broker connection closes with its scope).
          const t = yield* backend.make
          const capabilities = Option.getOrThrow(t.capabilities("outbox"))
          const lacking = (needs.capabilities ?? []).filter((c) => !capabilities[c])
          if (lacking.length > 0 || (needs.time === true && backend.advance === undefined)) return
          const advance = (ms: number) => backend.advance === undefined ? Effect.void : backend.advance(t, ms)
          yield* body(t, advance)
        }) as Effect.Effect<void, unknown, Scope.Scope>)

    Claims.register(when)
    Settling.register(when)
    Crashes.register(when)
    Admin.register(when)
    Ordering.register(when)
  })
