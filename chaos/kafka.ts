/**
 * What the Kafka scenarios read from the broker with a plain client of their own: a topic's records from the start
 * to its end (the end offsets taken first), and a consumer group's state.
 */
import { Admin, Consumer } from "@platformatic/kafka"

/** A record of the topic, as the checks need it. */
export interface TopicRecord {
  readonly partition: number
  readonly offset: bigint
  readonly key: string
  /** The `id` header: the message id. */
  readonly id: string
}

/**
 * Every record of `topic` up to its end offsets as they are now, each once, in (partition, offset) order, read by a
 * consumer of a group of its own (nothing committed). Fails after `timeoutMs` without them all.
 */
export const readTopic = async (bootstrap: string, topic: string, timeoutMs = 120_000): Promise<Array<TopicRecord>> => {
  const consumer = new Consumer<Buffer, Buffer, Buffer, Buffer>({
    clientId: "chaos-reader",
    groupId: `chaos-reader-${process.pid}-${Date.now()}`,
    bootstrapBrokers: [bootstrap]
  })
  try {
    const ends = (await consumer.listOffsets({ topics: [topic] })).get(topic) ?? []
    const starts = (await consumer.listOffsets({ topics: [topic], timestamp: -2n })).get(topic) ?? []
    const total = ends.reduce((sum, end, p) => sum + Number(end - (starts[p] ?? 0n)), 0)
    const records: Array<TopicRecord> = []
    if (total === 0) return records
    // The stream may hand a record over twice (it fetches again from the start when the reader's group settles).
    const seen = new Set<string>()
    const stream = await consumer.consume({ topics: [topic], mode: "earliest", autocommit: false, maxWaitTime: 200 })
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`read ${records.length} of the ${total} records of ${topic}`)),
          timeoutMs
        )
        stream.on("error", reject)
        stream.on("data", (m) => {
          const at = `${m.partition}:${m.offset}`
          if (m.offset >= ends[m.partition]! || seen.has(at)) return
          seen.add(at)
          let id = ""
          for (const [name, value] of m.headers) if (name.toString() === "id") id = value.toString()
          records.push({ partition: m.partition, offset: m.offset, key: m.key?.toString() ?? "", id })
          if (records.length >= total) {
            clearTimeout(timer)
            resolve()
          }
        })
      })
    } finally {
      await stream.close().catch(() => undefined)
    }
    return records.sort((a, b) => a.partition - b.partition || Number(a.offset - b.offset))
  } finally {
    await consumer.close().catch(() => undefined)
  }
}

/** The state of a consumer group (`Stable`, `PreparingRebalance`, `CompletingRebalance`, `Empty`…), or `unknown`. */
export const groupState = async (bootstrap: string, groupId: string): Promise<string> => {
  const admin = new Admin({ clientId: "chaos-monitor", bootstrapBrokers: [bootstrap], timeout: 5000, retries: 0 })
  try {
    const groups = await admin.describeGroups({ groups: [groupId] })
    return String(groups.get(groupId)?.state ?? "unknown")
  } catch {
    return "unknown"
  } finally {
    await admin.close().catch(() => undefined)
  }
}

/**
 * A consumer group at a glance, for the details of a run that did not drain: its state, each member's partitions,
 * and per partition the committed offset against the end.
 */
export const groupReport = async (bootstrap: string, groupId: string, topic: string): Promise<string> => {
  const admin = new Admin({ clientId: "chaos-monitor", bootstrapBrokers: [bootstrap], timeout: 5000, retries: 0 })
  const consumer = new Consumer({ clientId: "chaos-monitor", groupId, bootstrapBrokers: [bootstrap], timeout: 5000 })
  try {
    const group = (await admin.describeGroups({ groups: [groupId] })).get(groupId)
    const members = [...(group?.members.values() ?? [])].map((m) =>
      `${m.id.slice(-8)}: ${
        [...(m.assignments?.values() ?? [])].flatMap((a) => a.partitions).sort((a, b) => a - b).join(",") || "none"
      }`
    )
    const ends = (await consumer.listOffsets({ topics: [topic] })).get(topic) ?? []
    const partitions = ends.map((_, p) => p)
    const commits = (await consumer.listCommittedOffsets({ topics: [{ topic, partitions }] })).get(topic) ?? []
    const lag = ends.map((end, p) => `${p}: ${commits[p] ?? "?"}/${end}`)
    return `group ${group?.state ?? "unknown"}, members [${members.join("; ")}], committed/end [${lag.join(", ")}]`
  } catch (error) {
    return `group not described: ${String(error)}`
  } finally {
    await admin.close().catch(() => undefined)
    await consumer.close().catch(() => undefined)
  }
}
