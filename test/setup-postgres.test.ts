/**
 * Explicit, idempotent, versioned setup of the PostgreSQL transport; validated identifiers.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as MessageId from "../src/domain/MessageId.js"
import { claimFunctionV11 } from "../src/layers/pg/sql/claimFunctionV11.js"
import { claimCall } from "../src/layers/pg/sql/transport.js"
import * as PgTransport from "../src/layers/PgTransport.js"
import { testDatabase } from "./support/database.js"
import { claimWith, uniqueTable } from "./support/harness.js"

const { withPg } = testDatabase("setup")

const message = () => ({ messageId: MessageId.make(), type: "T", body: "{}", headers: `{"type":"T"}`, delayMs: 0 })

describe("PostgreSQL setup", () => {
  it.live("creates nothing implicitly: without setup a send fails with a typed StorageNotReadyError", () =>
    withPg(Effect.gen(function*() {
      const table = uniqueTable("nosetup")
      const transport = yield* PgTransport.make({ table })
      const error = yield* Effect.flip(transport.send("outbox", [message()]))
      expect(error._tag).toBe("StorageNotReadyError")
      expect(error.message).toContain("does not exist")
      expect(error.message).toContain("outbox setup-transports")
      expect(error._tag === "StorageNotReadyError" && error.storage).toBe(table)
    })))

  it.live("is idempotent and versioned, with the Symfony columns plus message_id", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("setup")
      const transport = yield* PgTransport.make({ table })
      yield* transport.setup
      yield* transport.send("outbox", [message()])
      yield* transport.setup
      yield* Effect.all([transport.setup, transport.setup], { concurrency: 2 })
      const migrations = yield* sql<{ migration_id: number; name: string }>`
        SELECT migration_id, name FROM ${sql(`${table}_migrations`)}`
      expect(migrations.map((m) => [m.migration_id, m.name])).toEqual([
        [1, "create_messages"],
        [2, "claim_fillfactor"],
        [3, "claim_function"],
        [4, "claim_next_due"],
        [5, "claim_extreme_values"],
        [6, "ordering_keys"],
        [7, "claim_acked_keys_first"],
        [8, "waiting_workers"],
        [9, "claim_floor"],
        [10, "autovacuum"],
        [11, "claim_plans"],
        [12, "wake_trigger"],
        [13, "crash_count"],
        [14, "producer_insert_only"],
        [15, "bounded_keys"]
      ])
      // Each table a message passes through is vacuumed after a fixed count of dead row versions, unthrottled.
      const settings = yield* sql<{ name: string; options: ReadonlyArray<string> }>`
        SELECT relname AS name, reloptions AS options FROM pg_class
        WHERE relname IN (${table}, ${`${table}_key_seq`}, ${`${table}_keys`}, ${`${table}_waiting`})
          AND relkind = 'r'`
      expect(settings.map((row) => row.name).sort()).toEqual(
        [table, `${table}_key_seq`, `${table}_keys`, `${table}_waiting`].sort()
      )
      for (const row of settings) {
        expect(row.options).toEqual(expect.arrayContaining([
          "autovacuum_vacuum_scale_factor=0",
          "autovacuum_vacuum_threshold=10000",
          "autovacuum_vacuum_cost_delay=0"
        ]))
      }
      const columns = yield* sql<{ column_name: string; data_type: string; is_nullable: string }>`
        SELECT column_name, data_type, is_nullable FROM information_schema.columns
        WHERE table_name = ${table} ORDER BY ordinal_position`
      expect(columns.map((c) => c.column_name)).toEqual([
        "id",
        "message_id",
        "body",
        "headers",
        "queue_name",
        "created_at",
        "available_at",
        "delivered_at",
        "delivery_count",
        "ordering_key",
        "ordering_seq",
        "crash_count",
        "lease_state"
      ])
      expect(columns.find((c) => c.column_name === "message_id")!.data_type).toBe("uuid")
      expect(columns.find((c) => c.column_name === "delivered_at")!.is_nullable).toBe("YES")
      const count = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`
      expect(count[0]!.n).toBe(1)
    })))

  it.live("claims through the table's claim function; its commit is relaxed only outside a caller's transaction", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("claimfn")
      const transport = yield* PgTransport.make({ table })
      yield* transport.setup
      yield* transport.send("outbox", [message(), message()])
      // Inside a caller's transaction the claim keeps the caller's durability.
      const inside = yield* sql.withTransaction(Effect.gen(function*() {
        const claimed = yield* claimWith(transport, "outbox", 1)
        const [setting] = yield* sql<{ value: string }>`SELECT current_setting('synchronous_commit') AS value`
        return { claimed: claimed.length, value: setting!.value }
      }))
      expect(inside).toEqual({ claimed: 1, value: "on" })
      // Asked for it ($5, as a worker's session sends the call), the function relaxes the commit of its own
      // transaction only.
      const relaxed = yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(claimCall(table), ["outbox", 30000, 1, [], true, null])
        const [setting] = yield* sql<{ value: string }>`SELECT current_setting('synchronous_commit') AS value`
        return setting!.value
      }))
      expect(relaxed).toBe("off")
      const [after] = yield* sql<{ value: string }>`SELECT current_setting('synchronous_commit') AS value`
      expect(after!.value).toBe("on")
      // Both claims committed: nothing is left to claim.
      expect(yield* claimWith(transport, "outbox", 10)).toEqual([])
    })))

  it.live("an upgrade through migration 13 keeps the claim function's grants (PUBLIC's revoked stays revoked)", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("regrant")
      const worker = `${table}_worker`
      const other = `${table}_other`
      const signature = `"${table}_claim"(text, float8, int, bigint[], boolean, float8)`
      const transport = yield* PgTransport.make({ table })
      yield* transport.setup
      // The table as migration 12 left it, its claim function granted as the README says.
      yield* sql.unsafe(`DROP FUNCTION ${signature}`)
      yield* sql.unsafe(claimFunctionV11(`"${table}"`, `"${table}_claim"`, `"${table}_key_seq"`, `"${table}_keys"`))
      yield* sql.unsafe(`DELETE FROM "${table}_migrations" WHERE migration_id >= 13`)
      for (const role of [worker, other]) yield* sql.unsafe(`CREATE ROLE "${role}"`)
      yield* sql.unsafe(`REVOKE EXECUTE ON FUNCTION ${signature} FROM PUBLIC`)
      yield* sql.unsafe(`GRANT EXECUTE ON FUNCTION ${signature} TO "${worker}"`)
      const may = (role: string) =>
        Effect.map(
          sql<{ may: boolean }>`SELECT has_function_privilege(${role}, ${signature}, 'EXECUTE') AS may`,
          (rows) => rows[0]!.may
        )
      expect([yield* may(worker), yield* may(other)]).toEqual([true, false])
      expect(yield* transport.setup).toEqual(["13_crash_count", "14_producer_insert_only", "15_bounded_keys"])
      expect([yield* may(worker), yield* may(other)]).toEqual([true, false])
      const [result] = yield* sql<{ columns: ReadonlyArray<string> }>`
        SELECT proargnames[7:] AS columns FROM pg_proc WHERE oid = to_regprocedure(${signature})`
      expect(result!.columns).toContain("crash_count")
      for (const role of [worker, other]) {
        yield* sql.unsafe(`DROP OWNED BY "${role}"`)
        yield* sql.unsafe(`DROP ROLE "${role}"`)
      }
    })))

  it.live("works in another schema: table, claim function and claims", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const schema = uniqueTable("schema")
      yield* sql`CREATE SCHEMA ${sql(schema)}`
      const table = `${schema}.messages`
      const transport = yield* PgTransport.make({ table })
      yield* transport.setup
      yield* transport.send("outbox", [message(), message()])
      const [first] = yield* claimWith(transport, "outbox", 1)
      // The ack rides on the next claim: first is deleted, second leased, in one call.
      const [second] = yield* claimWith(transport, "outbox", 1, [first!.id])
      expect(second!.id).not.toBe(first!.id)
      const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`
      expect(left[0]!.n).toBe(1)
    })))

  it.live("adopts a table created by Symfony's Doctrine transport", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const table = uniqueTable("symfony")
      yield* sql`CREATE TABLE ${sql(table)} (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY NOT NULL, body TEXT NOT NULL, headers TEXT NOT NULL,
        queue_name VARCHAR(190) NOT NULL, created_at TIMESTAMP(0) WITHOUT TIME ZONE NOT NULL,
        available_at TIMESTAMP(0) WITHOUT TIME ZONE NOT NULL, delivered_at TIMESTAMP(0) WITHOUT TIME ZONE DEFAULT NULL,
        PRIMARY KEY (id))`
      yield* sql`INSERT INTO ${sql(table)} (body, headers, queue_name, created_at, available_at)
        VALUES ('{}', '[]', 'default', (now() AT TIME ZONE 'UTC')::timestamp(0), '2026-01-01 12:00:00')`
      const transport = yield* PgTransport.make({ table, autoSetup: true })
      yield* transport.send("outbox", [message()])
      expect((yield* claimWith(transport, "outbox", 5)).length).toBe(1)
      const [old] = yield* sql<{ available_at: Date; message_id: string }>`
        SELECT available_at, message_id::text FROM ${sql(table)} WHERE queue_name = 'default'`
      expect(old!.available_at.toISOString()).toBe("2026-01-01T12:00:00.000Z")
      expect(old!.message_id).toMatch(/^[0-9a-f-]{36}$/)
    })))

  it.live("uses a schema-qualified table", () =>
    withPg(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE SCHEMA IF NOT EXISTS app`
      const transport = yield* PgTransport.make({ table: "app.outbox_messages", autoSetup: true })
      yield* transport.send("outbox", [message()])
      const rows = yield* sql`SELECT 1 FROM app.outbox_messages`
      expect(rows.length).toBe(1)
    })))

  it.live("rejects hostile or invalid configuration before touching the database", () =>
    withPg(Effect.gen(function*() {
      const bad: ReadonlyArray<PgTransport.Options> = [
        { table: "messages; DROP TABLE users" },
        { table: "a\"b" },
        { transports: { "out box": {} } },
        { transports: { outbox: { queueName: "x'; --" } } },
        { transports: { outbox: { redeliverTimeout: -1 } } },
        { transports: {} }
      ]
      for (const options of bad) {
        const error = yield* Effect.flip(PgTransport.make(options))
        expect(error._tag).toBe("OutboxConfigError")
      }
    })))
})
