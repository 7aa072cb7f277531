/**
 * The partition of a record, as Java clients and Kafka Streams pick it: `murmur2(key) & 0x7fffffff` modulo the
 * partition count for a keyed record, so a key lands where a Java producer of the same topic puts it.
 *
 * @internal
 */
import { compatibilityPartitioner, type MessageToProduce } from "@platformatic/kafka"

/** The partitioner looks at the key only. */
const noMessage = { topic: "" } as MessageToProduce

/**
 * The partition Java's `BuiltInPartitioner` picks for a key among `partitions`.
 *
 * @since 0.1.0
 * @category partitioning
 */
export const partitionOf = (key: string | Uint8Array, partitions: number): number =>
  compatibilityPartitioner(noMessage, Buffer.from(key)) % partitions

/**
 * The client's partitioner: Java-compatible for keyed records, round-robin for the others (the client takes the
 * number modulo the partition count).
 *
 * @internal
 */
export const makePartitioner = () => {
  let next = 0
  return (_message: unknown, key?: Buffer): number => {
    if (Buffer.isBuffer(key) && key.length > 0) return compatibilityPartitioner(noMessage, key)
    next = (next + 1) & 0x7fffffff
    return next
  }
}
