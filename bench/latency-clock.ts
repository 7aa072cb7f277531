/** A millisecond clock that every process of this machine shares (`CLOCK_MONOTONIC`): times taken in a
 * producer process and in the worker process can be subtracted. */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6
