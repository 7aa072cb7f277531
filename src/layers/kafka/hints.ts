/**
 * Wake-up hints of the Kafka transport's sessions: a record fetched, released or settled wakes the sessions waiting
 * on its transport; a wait ends at the first hint or its deadline.
 *
 * @internal
 */

/** The hints of one transport layer. @internal */
export const make = () => {
  const waiters = new Map<string, Set<() => void>>()

  const wake = (name: string) => {
    const set = waiters.get(name)
    if (set === undefined) return
    for (const resolve of [...set]) resolve()
  }

  /** Resolves at the next hint for `name`, or after `ms`. */
  const nextHint = (names: ReadonlyArray<string>, ms: number, signal?: { cancel?: () => void }) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer)
        for (const name of names) waiters.get(name)?.delete(done)
        resolve()
      }
      const timer = setTimeout(done, Math.max(0, ms))
      for (const name of names) {
        const set = waiters.get(name) ?? new Set()
        set.add(done)
        waiters.set(name, set)
      }
      if (signal !== undefined) signal.cancel = done
    })

  return { nextHint, wake }
}
