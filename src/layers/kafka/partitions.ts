/**
 * What a Kafka consumer-group member holds per partition: its records from the first one not committed, where a
 * partition may be committed to (its first record whose outcome is not durable), which records a claim may hand out
 * (a key's records one at a time, in offset order), and gaps in the offsets.
 *
 * @internal
 */
import type { ReceivedMessage } from "../../domain/Envelope.js"
import type { Consumed } from "./codec.js"

/** A fetched record and where it stands. @internal */
export interface Held {
  readonly id: string
  readonly offset: bigint
  readonly key: string | undefined
  readonly record: Consumed
  message: ReceivedMessage
  state: "ready" | "claimed" | "done"
}

/** A partition a member owns: its records from the first one not committed, in offset order. @internal */
export interface PartitionState {
  readonly topic: string
  readonly partition: number
  readonly records: Array<Held>
  /**
   * The offset after the last record received, from the group's committed offset on: a record below it is already
   * held, one above it is after a gap. Unknown (-1) until the member read the partition's committed offset.
   */
  next: bigint
  /** A gap met at `next` (-1: none), and the first offset after it: met again after a fetch from `next`, it is real. */
  gapAt: bigint
  gapFirst: bigint
  /** The offset last committed by this member (-1 when none). */
  committed: bigint
  /** The end of the partition as last known (at the join, or from this process's sends): records up to it exist. */
  end: bigint
}

/** A partition before its committed offset is known. @internal */
export const make = (topic: string, partition: number): PartitionState => ({
  topic,
  partition,
  records: [],
  next: -1n,
  gapAt: -1n,
  gapFirst: -1n,
  committed: -1n,
  end: -1n
})

/** A member's state of a partition (by `topic:partition`), made when first met. @internal */
export const stateOf = (partitions: Map<string, PartitionState>, topic: string, partition: number): PartitionState => {
  const key = `${topic}:${partition}`
  let state = partitions.get(key)
  if (state === undefined) {
    state = make(topic, partition)
    partitions.set(key, state)
  }
  return state
}

/**
 * Whether a record after a gap at `state.next` is the first after it seen twice: read again from `next`, the gap
 * stays (compacted records, a transaction's marker). @internal
 */
export const realGap = (state: PartitionState, offset: bigint): boolean => {
  if (state.gapAt === state.next && state.gapFirst === offset) return true
  if (state.gapAt !== state.next || offset < state.gapFirst) {
    state.gapAt = state.next
    state.gapFirst = offset
  }
  return false
}

/**
 * Drops each partition's leading settled records (from `byId` too) and returns the offsets to commit: each partition's
 * first record not settled (after the last record received when all are), where it moved past the last commit.
 * @internal
 */
export const commitPoints = (
  partitions: Iterable<PartitionState>,
  byId: Map<string, Held>
): Array<{ topic: string; partition: number; offset: bigint; leaderEpoch: number }> => {
  const offsets: Array<{ topic: string; partition: number; offset: bigint; leaderEpoch: number }> = []
  for (const state of partitions) {
    while (state.records.length > 0 && state.records[0]!.state === "done") {
      byId.delete(state.records.shift()!.id)
    }
    const target = state.records[0]?.offset ?? state.next
    if (target > state.committed) {
      offsets.push({ topic: state.topic, partition: state.partition, offset: target, leaderEpoch: -1 })
    }
  }
  return offsets
}

/**
 * The records a claim may hand out now — the first unsettled record of each key in its partition, and every ready
 * record without a key — oldest first, and when the next one held back becomes due. @internal
 */
export const ready = (partitions: Iterable<PartitionState>, now: number) => {
  const candidates: Array<Held> = []
  let nextDue = Number.POSITIVE_INFINITY
  for (const state of partitions) {
    const blocked = new Set<string>()
    for (const held of state.records) {
      if (held.state === "done") continue
      const free = held.key === undefined || !blocked.has(held.key)
      if (held.key !== undefined) blocked.add(held.key)
      if (!free || held.state !== "ready") continue
      const due = held.message.availableAt.getTime()
      if (due > now) nextDue = Math.min(nextDue, due)
      else candidates.push(held)
    }
  }
  candidates.sort((a, b) =>
    a.message.availableAt.getTime() - b.message.availableAt.getTime() ||
    a.message.createdAt.getTime() - b.message.createdAt.getTime() ||
    (a.message.messageId < b.message.messageId ? -1 : a.message.messageId > b.message.messageId ? 1 : 0)
  )
  return { candidates, nextDue }
}

/** Whether records known to exist in a partition have not arrived yet. @internal */
export const expecting = (partitions: Iterable<PartitionState>) => {
  for (const state of partitions) {
    if (state.end > 0n && state.next < state.end) return true
  }
  return false
}

/** Records claimed (in flight), and ready but waiting for their delay. @internal */
export const counts = (held: Iterable<Held>, now: number): { readonly inFlight: number; readonly delayed: number } => {
  let inFlight = 0
  let delayed = 0
  for (const h of held) {
    if (h.state === "claimed") inFlight++
    else if (h.state === "ready" && h.message.availableAt.getTime() > now) delayed++
  }
  return { inFlight, delayed }
}
