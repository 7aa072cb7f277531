/**
 * effect-outbox/testing: the conformance suites, for implementations of the library's services to run
 * against themselves with `@effect/vitest`.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as IdempotencyStoreSuite from "./IdempotencyStoreSuite.js"
/** @since 0.1.0 */
export * as TransportSuite from "./TransportSuite.js"
