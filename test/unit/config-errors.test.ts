/**
 * Every `layerConfig` fails with `OutboxConfigError` — never Effect's `ConfigError` — naming the setting.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PgIdempotencyStore from "../../src/layers/PgIdempotencyStore.js"
import * as PgTransport from "../../src/layers/PgTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"

/** Never queried: the configuration (or the table name) fails before any statement. */
const fake = { withoutTransforms: () => fake } as unknown as SqlClient.SqlClient
const noDatabase = Layer.succeed(SqlClient.SqlClient, fake)

const failureOf = <A, E>(layer: Layer.Layer<A, E, SqlClient.SqlClient>, env: Record<string, string>) =>
  Layer.build(layer).pipe(
    Effect.scoped,
    Effect.provide(noDatabase),
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)), { pathDelim: "_" })),
    Effect.flip
  )

describe("layerConfig errors", () => {
  it.effect("ScheduleRetryStrategy.layerConfig: an invalid value is an OutboxConfigError naming the variable", () =>
    Effect.gen(function*() {
      const error = yield* failureOf(ScheduleRetryStrategy.layerConfig(), { OUTBOX_RETRY_DELAY: "soon" })
      expect(error._tag).toBe("OutboxConfigError")
      expect(error.message).toContain("OUTBOX_RETRY_DELAY")
      const negative = yield* failureOf(ScheduleRetryStrategy.layerConfig(), { OUTBOX_RETRY_MAX_RETRIES: "-1" })
      expect(negative._tag).toBe("OutboxConfigError")
    }))

  it.effect("PgTransport.layerConfig: a missing or invalid setting is an OutboxConfigError", () =>
    Effect.gen(function*() {
      const missing = yield* failureOf(PgTransport.layerConfig({ table: Config.string("OUTBOX_TABLE") }), {})
      expect(missing._tag).toBe("OutboxConfigError")
      expect(missing.message).toContain("OUTBOX_TABLE")
      const invalid = yield* failureOf(
        PgTransport.layerConfig({ notify: Config.boolean("OUTBOX_NOTIFY") }),
        { OUTBOX_NOTIFY: "perhaps" }
      )
      expect(invalid._tag).toBe("OutboxConfigError")
      expect(invalid.message).toContain("OUTBOX_NOTIFY")
      const hostile = yield* failureOf(
        PgTransport.layerConfig({ table: Config.string("OUTBOX_TABLE") }),
        { OUTBOX_TABLE: "x; DROP TABLE y" }
      )
      expect(hostile._tag).toBe("OutboxConfigError")
      expect(hostile.message).toContain("Invalid table name")
    }))

  it.effect("PgIdempotencyStore.layerConfig: an invalid retention is an OutboxConfigError", () =>
    Effect.gen(function*() {
      const error = yield* failureOf(PgIdempotencyStore.layerConfig(), { OUTBOX_IDEMPOTENCY_RETENTION: "forever" })
      expect(error._tag).toBe("OutboxConfigError")
      expect(error.message).toContain("OUTBOX_IDEMPOTENCY_RETENTION")
    }))
})
