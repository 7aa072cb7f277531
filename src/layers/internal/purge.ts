/**
 * What every idempotency store resolves and runs the same way: the retention check, the purge options
 * with their defaults, and the batch loop.
 *
 * @since 0.1.0
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { OutboxConfigError } from "../../domain/Errors.js"
import { defaultPurgeBatchSize, defaultRetention, type PurgeOptions } from "../../services/IdempotencyStore.js"

/**
 * Purge options with their defaults applied and checked.
 *
 * @since 0.1.0
 * @category models
 * @internal
 */
export interface ResolvedPurgeOptions {
  readonly olderThan: Duration.Duration
  readonly batchSize: number
  readonly maxBatches: number
  readonly onBatch: (deleted: number) => Effect.Effect<void>
}

/**
 * Checks a retention window: a positive duration (infinite means "keep forever"); the default is
 * `IdempotencyStore.defaultRetention`.
 *
 * @since 0.1.0
 * @category validation
 * @internal
 */
export const validateRetention = (
  input: Duration.DurationInput | undefined
): Effect.Effect<Duration.Duration, OutboxConfigError> => {
  const decoded = Duration.decodeUnknown(input ?? defaultRetention)
  return Option.isSome(decoded) && Duration.toMillis(decoded.value) > 0
    ? Effect.succeed(decoded.value)
    : Effect.fail(new OutboxConfigError({ message: `Idempotency retention must be a positive duration` }))
}

/**
 * Applies the defaults to purge options and checks them: `olderThan` a duration (zero purges every
 * committed record, infinite none), `batchSize` and `maxBatches` positive integers.
 *
 * @since 0.1.0
 * @category validation
 * @internal
 */
export const resolvePurgeOptions = (
  options: PurgeOptions | undefined,
  retention: Duration.Duration
): Effect.Effect<ResolvedPurgeOptions, OutboxConfigError> => {
  const olderThan = Duration.decodeUnknown(options?.olderThan ?? retention)
  if (Option.isNone(olderThan)) {
    return Effect.fail(new OutboxConfigError({ message: `Purge: olderThan must be a duration` }))
  }
  const batchSize = options?.batchSize ?? defaultPurgeBatchSize
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    return Effect.fail(new OutboxConfigError({ message: `Purge: batchSize must be a positive integer` }))
  }
  const maxBatches = options?.maxBatches ?? Number.POSITIVE_INFINITY
  if (maxBatches !== Number.POSITIVE_INFINITY && (!Number.isSafeInteger(maxBatches) || maxBatches < 1)) {
    return Effect.fail(new OutboxConfigError({ message: `Purge: maxBatches must be a positive integer` }))
  }
  return Effect.succeed({
    olderThan: olderThan.value,
    batchSize,
    maxBatches,
    onBatch: options?.onBatch ?? (() => Effect.void)
  })
}

/**
 * Runs purge batches until one deletes fewer than `batchSize` records or `maxBatches` ran. `batch`
 * returns `None` to stop early (a lost lock), with what was deleted so far. Returns `None` only when
 * the very first batch stopped, and `Some(0)` at once when `olderThan` is infinite.
 *
 * @since 0.1.0
 * @category utils
 * @internal
 */
export const purgeLoop = <E, R>(
  options: ResolvedPurgeOptions,
  batch: Effect.Effect<Option.Option<number>, E, R>
): Effect.Effect<Option.Option<number>, E, R> =>
  Effect.gen(function*() {
    if (!Duration.isFinite(options.olderThan)) return Option.some(0)
    let deleted = 0
    for (let batches = 0; batches < options.maxBatches; batches++) {
      const result = yield* batch
      if (Option.isNone(result)) return batches === 0 ? Option.none() : Option.some(deleted)
      deleted += result.value
      yield* options.onBatch(result.value)
      if (result.value < options.batchSize) break
    }
    return Option.some(deleted)
  })
