/**
 * The Kafka transport's consumers: one consumer-group member per transport and process, shared by the worker
 * sessions open on it, with the records it fetched held in memory until their outcome is durable.
 *
 * Offsets: a partition's committed offset only ever moves to its first record whose outcome is not durable yet
 * (handled and acked, moved to the failure transport), so a crash, a rebalance or a shutdown hands every other
 * record to the next owner. Order: a record is handed out only when no earlier record of its key in its partition
 * is unsettled (claimed, or waiting for its retry), so the records of a key are handled one at a time, in order;
 * records without a key never wait for each other. Retries: a retried record stays where it is, ready again once
 * its delay has passed, holding its key; its offset is not committed until it has an outcome. The wait is held in
 * memory: should the member lose the partition meanwhile, the next owner reads the record again from its original
 * headers (its retry count starts over).
 *
 * @internal
 */
import { Consumer, ListOffsetTimestamps, type MessagesStream } from "@platformatic/kafka"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { ReceivedMessage } from "../../domain/Envelope.js"
import type { TransportError } from "../../domain/Errors.js"
import * as Headers from "../../domain/Headers.js"
import { type Consumed, errorText, toReceived, transportError } from "./codec.js"
import * as Hints from "./hints.js"
import type { ClientOptions, ResolvedTransport } from "./options.js"
import * as Partitions from "./partitions.js"
import type { Held, PartitionState } from "./partitions.js"

/** `listOffsets`' timestamp for a partition's first offset. */
const earliest = ListOffsetTimestamps.EARLIEST

/** The consumer-group member of one transport. */
interface Member {
  readonly transport: ResolvedTransport
  readonly consumer: Consumer<Buffer, Buffer, Buffer, Buffer>
  stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined
  readonly partitions: Map<string, PartitionState>
  /**
   * The partitions (`topic:partition`) of its latest assignment. The stream can still hand over records of others:
   * fetched before a rebalance took them away (buffered while it was paused, or a fetch answered after it).
   */
  owned: ReadonlySet<string>
  readonly byId: Map<string, Held>
  /** Records ready or claimed. */
  unsettled: number
  /** Records claimed. */
  claimed: number
  paused: boolean
  failed: unknown
  /** Reading the partitions' ends after a join; claims wait for it (up to `claimWait`). */
  syncing: Promise<void>
}

/** The consumers of a transport layer. @internal */
export interface Consumers {
  /** Joins the group of each transport (once per process) for the scope's life; returns the session's wait. */
  readonly hold: (
    transports: ReadonlyArray<ResolvedTransport>
  ) => Effect.Effect<(maxWait: Duration.Duration) => Effect.Effect<void>, never, Scope.Scope>
  /**
   * Commits what `acks` settled, then hands out up to `batchSize` ready records, oldest first. When none is ready
   * but records known to exist have not arrived yet, it waits for them, `claimWait` at most.
   */
  readonly claim: (
    transport: ResolvedTransport,
    batchSize: number,
    acks: ReadonlyArray<string>
  ) => Effect.Effect<
    { readonly messages: ReadonlyArray<ReceivedMessage>; readonly nextDue: Option.Option<Duration.Duration> },
    TransportError
  >
  /** Marks claimed records done (their outcome is durable) and commits the offsets that moved. */
  readonly settle: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void>
  /** Makes a claimed record ready again after `delay`, with new headers, keeping its place. */
  readonly retry: (
    transport: string,
    id: string,
    delay: Duration.Duration,
    headers: Headers.Headers
  ) => Effect.Effect<boolean>
  /** Hands claimed records back, ready now. */
  readonly release: (transport: string, ids: ReadonlyArray<string>) => Effect.Effect<void>
  /** Records this process produced exist up to these offsets (a claim waits for them). */
  readonly produced: (
    transport: string,
    offsets: ReadonlyArray<{ readonly topic: string; readonly partition: number; readonly offset: bigint }>
  ) => void
  /** The consumed record behind a claimed message (for a copy to the failure topic). */
  readonly held: (transport: string, id: string) => Consumed | undefined
  /** Records this process holds: claimed, and waiting for their delay. */
  readonly counts: (transport: string) => { readonly inFlight: number; readonly delayed: number }
}

/**
 * Builds the consumers; a member leaves its group when the last session holding it closed and nothing it handed out
 * is unsettled, or with the scope.
 *
 * @internal
 */
export const make = (options: {
  readonly client: ClientOptions
  readonly maxBuffered: number
  readonly sessionTimeout: number
  readonly claimWait: number
  readonly warn: (message: string) => void
}): Effect.Effect<Consumers, never, Scope.Scope> =>
  Effect.gen(function*() {
    /** Joined members, and the joins under way. */
    const members = new Map<string, Member>()
    const joining = new Map<string, Promise<Member>>()
    const { nextHint, wake } = Hints.make()
    /** Sessions open per transport: at 0 its member leaves its group once nothing it handed out is unsettled. */
    const holding = new Map<string, number>()

    /** After a join: drops what the member no longer owns, reads the ends and commits of what it owns. */
    const onJoin = (member: Member) => {
      const owned = new Set<string>()
      const assigned = member.consumer.assignments ?? []
      for (const { topic, partitions } of assigned) {
        for (const p of partitions) owned.add(`${topic}:${p}`)
      }
      member.owned = owned
      for (const [key, state] of member.partitions) {
        if (owned.has(key)) continue
        for (const held of state.records) {
          member.byId.delete(held.id)
          if (held.state !== "done") member.unsettled--
          if (held.state === "claimed") member.claimed--
        }
        member.partitions.delete(key)
      }
      resumeIfRoom(member)
      if (assigned.length === 0) return
      member.syncing = Promise.all([
        member.consumer.listOffsets({ topics: [...member.transport.topics] }),
        member.consumer.listOffsets({ topics: [...member.transport.topics], timestamp: earliest }),
        member.consumer.listCommittedOffsets({ topics: assigned })
      ]).then(([ends, starts, commits]) => {
        for (const { topic, partitions } of assigned) {
          for (const p of partitions) {
            const state = Partitions.stateOf(member.partitions, topic, p)
            const end = ends.get(topic)?.[p] ?? -1n
            const committed = commits.get(topic)?.[p] ?? -1n
            if (state.next < 0n) {
              // Read from the committed offset (the log's start without one), whatever the stream fetched meanwhile.
              state.next = committed >= 0n ? committed : starts.get(topic)?.[p] ?? 0n
              member.stream?.offsetsToFetch.set(`${topic}:${p}`, state.next)
            }
            if (committed > state.committed) state.committed = committed
            if (end > state.end) state.end = end
          }
        }
      }, (error: unknown) => {
        options.warn(`${member.transport.name}: cannot read the partitions' offsets: ${errorText(error)}`)
      }).finally(() => wake(member.transport.name))
    }

    const join = async (transport: ResolvedTransport): Promise<Member> => {
      const consumer = new Consumer<Buffer, Buffer, Buffer, Buffer>({
        ...options.client,
        clientId: `${options.client.clientId}-${transport.name}`,
        groupId: transport.groupId,
        sessionTimeout: options.sessionTimeout,
        heartbeatInterval: Math.max(100, Math.floor(options.sessionTimeout / 4)),
        rebalanceTimeout: options.sessionTimeout * 2,
        autocommit: false
      })
      const member: Member = {
        transport,
        consumer,
        stream: undefined,
        partitions: new Map(),
        owned: new Set(),
        byId: new Map(),
        unsettled: 0,
        claimed: 0,
        paused: false,
        failed: undefined,
        syncing: Promise.resolve()
      }
      consumer.on("consumer:group:join", () => onJoin(member))
      // A rejoin that failed for good (the broker gone past the client's retries) is emitted as `error`: unheard, it
      // would end the process. The member is replaced at the next claim.
      consumer.on("error", (error: unknown) => {
        member.failed = error
        options.warn(
          `${transport.name}: the consumer lost its group; it joins again at the next claim: ${errorText(error)}`
        )
        wake(transport.name)
      })
      const stream = await consumer.consume({
        topics: [...transport.topics],
        mode: "committed",
        fallbackMode: "earliest",
        autocommit: false,
        maxWaitTime: 500
      })
      member.stream = stream
      stream.on("data", (record: Consumed) => {
        // A partition another member owns now: handed out here, its records would be handled beside that member's,
        // out of their key's order, and this member would commit its offset past records nobody handled.
        if (!member.owned.has(`${record.topic}:${record.partition}`)) return
        const state = Partitions.stateOf(member.partitions, record.topic, record.partition)
        // Before its committed offset is known, a partition's records could start past it: read again from there.
        if (state.next < 0n || record.offset < state.next) return
        if (record.offset > state.next && !Partitions.realGap(state, record.offset)) {
          // A fetch answered after a rebalance can start past the offset the stream was set back to: committing after
          // its records would skip those before them. The partition is read again from `next`; a gap met again there
          // is real (compacted records, a transaction's marker).
          member.stream?.offsetsToFetch.set(`${record.topic}:${record.partition}`, state.next)
          return
        }
        state.next = record.offset + 1n
        const id = `${record.topic}:${record.partition}:${record.offset}`
        const message = toReceived(transport.name, id, record)
        const held: Held = { id, offset: record.offset, key: message.orderingKey, record, message, state: "ready" }
        state.records.push(held)
        member.byId.set(id, held)
        member.unsettled++
        if (!member.paused && full(member)) {
          member.paused = true
          stream.pause()
        }
        wake(transport.name)
      })
      stream.on("error", (error: unknown) => {
        member.failed = error
        options.warn(`${transport.name}: the consumer failed; it joins again at the next claim: ${errorText(error)}`)
        wake(transport.name)
      })
      return member
    }

    /**
     * The member stops fetching at `maxBuffered` records not settled, or — behind a record that holds its partition's
     * commit point (a retry waiting) — at four times as many held in all, settled or not: memory stays bounded.
     */
    const full = (member: Member) =>
      member.unsettled >= options.maxBuffered || member.byId.size >= options.maxBuffered * 4

    const resumeIfRoom = (member: Member) => {
      if (member.paused && member.unsettled < options.maxBuffered / 2 && member.byId.size < options.maxBuffered * 2) {
        member.paused = false
        member.stream?.resume()
      }
    }

    const leave = async (member: Member) => {
      if (members.get(member.transport.name) === member) members.delete(member.transport.name)
      await commit(member).catch(() => undefined)
      await member.stream?.close().catch(() => undefined)
      await member.consumer.close().catch(() => undefined)
    }

    /** Leaves once no session holds the member and nothing it handed out is unsettled. */
    const leaveIfIdle = (member: Member) => {
      if ((holding.get(member.transport.name) ?? 0) === 0 && member.claimed === 0) void leave(member)
    }

    const memberOf = (transport: ResolvedTransport): Effect.Effect<Member, TransportError> =>
      Effect.tryPromise({
        try: async () => {
          const joined = members.get(transport.name)
          if (joined !== undefined && joined.failed === undefined) return joined
          if (joined !== undefined) void leave(joined)
          let pending = joining.get(transport.name)
          if (pending === undefined) {
            pending = join(transport).then((member) => {
              members.set(transport.name, member)
              return member
            }).finally(() => joining.delete(transport.name))
            joining.set(transport.name, pending)
          }
          return await pending
        },
        catch: (error) =>
          transportError(
            transport.name,
            "claim",
            `cannot join consumer group ${transport.groupId}: ${errorText(error)}`,
            error
          )
      })

    /**
     * Commits, in one request, the partitions whose first unsettled record moved; a refused commit is tried again
     * at the next one.
     */
    const commit = async (member: Member): Promise<void> => {
      const offsets = Partitions.commitPoints(member.partitions.values(), member.byId)
      if (offsets.length === 0) return
      await member.consumer.commit({ offsets })
      for (const { offset, partition, topic } of offsets) {
        const state = member.partitions.get(`${topic}:${partition}`)
        if (state !== undefined && offset > state.committed) state.committed = offset
      }
    }

    const commitQuietly = (member: Member) =>
      Effect.promise(() =>
        commit(member).catch((error: unknown) =>
          options.warn(
            `${member.transport.name}: offsets not committed yet (the next claim tries again): ${errorText(error)}`
          )
        )
      )

    /** Marks claimed records done or ready; returns how many it found claimed. */
    const settleIn = (member: Member, ids: ReadonlyArray<string>, to: "done" | "ready") => {
      let found = 0
      for (const id of ids) {
        const held = member.byId.get(id)
        if (held === undefined || held.state !== "claimed") continue
        held.state = to
        member.claimed--
        if (to === "done") member.unsettled--
        found++
      }
      return found
    }

    const settle: Consumers["settle"] = (name, ids) =>
      Effect.suspend(() => {
        const member = members.get(name)
        if (member === undefined || settleIn(member, ids, "done") === 0) return Effect.void
        resumeIfRoom(member)
        // A settled record frees its key: the next record of that key is ready now, so a waiting session claims it.
        wake(name)
        return Effect.ensuring(commitQuietly(member), Effect.sync(() => leaveIfIdle(member)))
      })

    const claim: Consumers["claim"] = (transport, batchSize, acks) =>
      Effect.gen(function*() {
        const member = yield* memberOf(transport)
        if (acks.length > 0 && settleIn(member, acks, "done") > 0) {
          resumeIfRoom(member)
          yield* commitQuietly(member)
        }
        const deadline = Date.now() + options.claimWait
        for (;;) {
          const now = Date.now()
          const { candidates, nextDue } = Partitions.ready(member.partitions.values(), now)
          if (candidates.length > 0 || now >= deadline || member.failed !== undefined) {
            const messages = candidates.slice(0, batchSize)
            for (const held of messages) held.state = "claimed"
            member.claimed += messages.length
            return {
              messages: messages.map((held) => held.message),
              nextDue: messages.length === 0 && Number.isFinite(nextDue)
                ? Option.some(Duration.millis(nextDue - now))
                : Option.none()
            }
          }
          const syncing = member.syncing
          const settled = yield* Effect.promise(() =>
            Promise.race([syncing.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 0))])
          )
          if (settled && !Partitions.expecting(member.partitions.values())) {
            return {
              messages: [],
              nextDue: Number.isFinite(nextDue) ? Option.some(Duration.millis(nextDue - now)) : Option.none()
            }
          }
          yield* Effect.promise(() => nextHint([transport.name], deadline - now))
        }
      })

    const hold: Consumers["hold"] = (transports) =>
      Effect.gen(function*() {
        const names = transports.map((t) => t.name)
        for (const name of names) holding.set(name, (holding.get(name) ?? 0) + 1)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            for (const name of names) {
              holding.set(name, (holding.get(name) ?? 1) - 1)
              const member = members.get(name)
              if (member !== undefined) leaveIfIdle(member)
            }
          })
        )
        return (maxWait: Duration.Duration) =>
          Effect.async<void>((resume) => {
            const signal: { cancel?: () => void } = {}
            void nextHint(names, Duration.toMillis(maxWait), signal).then(() => resume(Effect.void))
            return Effect.sync(() => signal.cancel?.())
          })
      })

    const retry: Consumers["retry"] = (name, id, delay, headers) =>
      Effect.sync(() => {
        const member = members.get(name)
        const held = member?.byId.get(id)
        if (member === undefined || held === undefined || held.state !== "claimed") return false
        held.message = {
          ...held.message,
          headers: Headers.encode(headers),
          availableAt: new Date(Date.now() + Duration.toMillis(delay)),
          deliveries: held.message.deliveries + 1
        }
        held.state = "ready"
        member.claimed--
        leaveIfIdle(member)
        return true
      })

    const release: Consumers["release"] = (name, ids) =>
      Effect.sync(() => {
        const member = members.get(name)
        if (member !== undefined && settleIn(member, ids, "ready") > 0) {
          wake(name)
          leaveIfIdle(member)
        }
      })

    const produced: Consumers["produced"] = (name, offsets) => {
      const member = members.get(name)
      if (member === undefined) return
      for (const { offset, partition, topic } of offsets) {
        const state = member.partitions.get(`${topic}:${partition}`)
        if (state !== undefined && offset + 1n > state.end) state.end = offset + 1n
      }
    }

    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        await Promise.all([...joining.values()].map((p) => p.catch(() => undefined)))
        await Promise.all([...members.values()].map(leave))
      })
    )

    return {
      hold,
      claim,
      settle,
      retry,
      release,
      produced,
      held: (name, id) => members.get(name)?.byId.get(id)?.record,
      counts: (name) => Partitions.counts(members.get(name)?.byId.values() ?? [], Date.now())
    }
  })
