/**
 * The options of a CDC transport (PgCdcTransport), their defaults and their validation.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import { OutboxConfigError } from "../../domain/Errors.js"
import * as Identifier from "../../domain/Identifier.js"

/**
 * The default name of a CDC transport (`cdc`).
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTransport = "cdc"

/**
 * How events are written: rows inserted and deleted (`table`), or logical decoding messages (`message`).
 *
 * @since 0.1.0
 * @category models
 */
export type Mode = "table" | "message"

/**
 * Options of one CDC transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportOptions {
  /**
   * The events' `aggregatetype`, which the Event Router turns into the topic (`outbox.event.<aggregatetype>` by
   * default): a fixed name, or one derived from the message type. Default: the transport's name.
   */
  readonly aggregateType?: string | ((type: string) => string)
}

/**
 * Options: the transports it serves (default `{ cdc: {} }`), the event table (default `outbox_events`), the
 * publication and the replication slot the connector uses (defaults `<table>_publication`, `<table>_slot`), the
 * mode (default `message`; `table` for PostgreSQL 13 and pipelines without Debezium's decode transform), the logical messages' prefix (default `effect-outbox`) and the role the connector logs
 * in as (default: this client's), whose right to replicate `setup` checks.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly transports?: Readonly<Record<string, TransportOptions>>
  readonly table?: string
  readonly publication?: string
  readonly slot?: string
  readonly mode?: Mode
  readonly messagePrefix?: string
  readonly connectorRole?: string
}

/** The options with their defaults, validated. @internal */
export interface Resolved {
  readonly transports: ReadonlyMap<string, (type: string) => string>
  readonly table: string
  readonly publication: string
  readonly slot: string
  readonly mode: Mode
  readonly messagePrefix: string
  readonly connectorRole: string | undefined
}

const slotPattern = /^[a-z0-9_]{1,63}$/

/**
 * Resolves and validates the options (names as PostgreSQL takes them: a replication slot is lower case).
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (options: Options = {}): Effect.Effect<Resolved, OutboxConfigError> =>
  Effect.gen(function*() {
    const entries = Object.entries(options.transports ?? { [defaultTransport]: {} })
    if (entries.length === 0) return yield* new OutboxConfigError({ message: "PgCdcTransport: no transport to serve" })
    const transports = new Map<string, (type: string) => string>()
    for (const [name, o] of entries) {
      yield* Identifier.validateQueueName(name)
      const aggregateType = o.aggregateType ?? name
      if (typeof aggregateType === "string" && !/^[A-Za-z0-9_.-]{1,200}$/.test(aggregateType)) {
        return yield* new OutboxConfigError({
          message: `PgCdcTransport ${name}: aggregateType ${JSON.stringify(aggregateType)} must be 1-200 letters, ` +
            "digits, '_', '.' or '-' (it names a Kafka topic)"
        })
      }
      transports.set(name, typeof aggregateType === "string" ? () => aggregateType : aggregateType)
    }
    const table = yield* Identifier.validateTableName(options.table ?? "outbox_events")
    const base = table.replace(".", "_")
    const publication = options.publication ?? `${base}_publication`
    const slot = options.slot ?? `${base}_slot`
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(publication)) {
      return yield* new OutboxConfigError({
        message: `PgCdcTransport: invalid publication name ${JSON.stringify(publication)}: letters, digits and ` +
          "underscores, not starting with a digit, at most 63 characters"
      })
    }
    if (!slotPattern.test(slot)) {
      return yield* new OutboxConfigError({
        message: `PgCdcTransport: invalid replication slot name ${JSON.stringify(slot)}: lower-case letters, digits ` +
          "and underscores, at most 63 characters"
      })
    }
    const mode = options.mode ?? "message"
    if (mode !== "table" && mode !== "message") {
      return yield* new OutboxConfigError({
        message: `PgCdcTransport: mode must be "table" or "message", got ${JSON.stringify(mode)}`
      })
    }
    const messagePrefix = options.messagePrefix ?? "effect-outbox"
    if (!/^[A-Za-z0-9_.:-]{1,100}$/.test(messagePrefix)) {
      return yield* new OutboxConfigError({
        message: `PgCdcTransport: invalid messagePrefix ${JSON.stringify(messagePrefix)}: 1-100 letters, digits, ` +
          "'_', '.', ':' or '-'"
      })
    }
    return {
      transports,
      table,
      publication,
      slot,
      mode,
      messagePrefix,
      connectorRole: options.connectorRole
    }
  })
