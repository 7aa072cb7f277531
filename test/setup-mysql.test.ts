/**
 * Setup of the MySQL transport on MariaDB: a table Symfony's Doctrine transport made is adopted (message ids for its
 * rows, microsecond times, its claim index kept or added), concurrent setups take turns, a missing table is a
 * `StorageNotReadyError`, and a hostile table name never reaches SQL.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as MysqlTransport from "../src/layers/MysqlTransport.js"
import { claimWith } from "./support/harness.js"
import { outgoing } from "./support/messages.js"
import { createTestMysqlDatabase, mysqlLayer } from "./support/mysql.js"

/** An effect on a database of its own (Symfony's table has a fixed name). */
const onFreshDatabase = <A, E>(self: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.flatMap(
    Effect.promise(() => createTestMysqlDatabase("setup_mysql")),
    (url) => Effect.provide(self, Layer.orDie(mysqlLayer(url)))
  )

/** Symfony 7.4's table on MySQL, as Doctrine creates it, holding one message sent by Symfony. */
const symfonyTable = (indexes: "composite" | "single") =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const index = indexes === "composite"
      ? "INDEX IDX_75EA56E0FB7336F0E3BD61CE16BA31DBBF396750 (queue_name, available_at, delivered_at, id)"
      : "INDEX IDX_75EA56E0FB7336F0 (queue_name), INDEX IDX_75EA56E0E3BD61CE (available_at), " +
        "INDEX IDX_75EA56E016BA31DB (delivered_at)"
    yield* sql.unsafe(`CREATE TABLE messenger_messages (id BIGINT AUTO_INCREMENT NOT NULL, body LONGTEXT NOT NULL,
      headers LONGTEXT NOT NULL, queue_name VARCHAR(190) NOT NULL, created_at DATETIME NOT NULL,
      available_at DATETIME NOT NULL, delivered_at DATETIME DEFAULT NULL, ${index}, PRIMARY KEY (id))
      DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci ENGINE = InnoDB`)
    yield* sql.unsafe(`INSERT INTO messenger_messages (body, headers, queue_name, created_at, available_at)
      VALUES ('{"_tag":"Test","n":1}', '{"type":"Test"}', 'outbox', UTC_TIMESTAMP() - INTERVAL 1 MINUTE,
        UTC_TIMESTAMP() - INTERVAL 1 MINUTE)`)
  })

const indexesOf = (table: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ name: string; columns: string }>`SELECT INDEX_NAME AS name,
        GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS columns
      FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ${table}
      GROUP BY INDEX_NAME ORDER BY INDEX_NAME`)

describe("MySQL transport setup", () => {
  for (const indexes of ["composite", "single"] as const) {
    it.live(`adopts Symfony's table (${indexes} indexes): ids for its rows, microsecond times, the claim index`, () =>
      onFreshDatabase(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* symfonyTable(indexes)
        const transport = yield* MysqlTransport.make()
        expect(yield* transport.setup).toEqual(["1_create_messages", "2_crash_count"])
        expect(yield* transport.setup).toEqual([])
        const columns = yield* sql<{ name: string; type: string; nullable: string }>`SELECT COLUMN_NAME AS name,
            COLUMN_TYPE AS type, IS_NULLABLE AS nullable FROM information_schema.COLUMNS
          WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'messenger_messages' ORDER BY ORDINAL_POSITION`
        expect(columns.map((c) => `${c.name} ${c.type} ${c.nullable}`)).toEqual([
          "id bigint(20) NO",
          "body longtext NO",
          "headers longtext NO",
          "queue_name varchar(190) NO",
          "created_at datetime(6) NO",
          "available_at datetime(6) NO",
          "delivered_at datetime(6) YES",
          "message_id char(36) NO",
          "delivery_count int(11) NO",
          "crash_count int(11) NO",
          "lease_state tinyint(4) NO"
        ])
        const claimIndexes = (yield* indexesOf("messenger_messages")).filter((i) =>
          i.columns === "queue_name,available_at,delivered_at,id"
        )
        // Added by the name Doctrine gives it, where Symfony's older schema lacks it.
        expect(claimIndexes.map((i) => i.name)).toEqual(["IDX_75EA56E0FB7336F0E3BD61CE16BA31DBBF396750"])
        const [claimed] = yield* claimWith(transport, "outbox", 10)
        expect(claimed!.body).toBe("{\"_tag\":\"Test\",\"n\":1}")
        expect(claimed!.messageId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
        expect(claimed!.deliveries).toBe(1)
        // A message of ours beside Symfony's.
        yield* transport.send("outbox", [outgoing(2)])
        expect((yield* claimWith(transport, "outbox", 10)).map((m) => m.body)).toEqual(["{\"_tag\":\"Test\",\"n\":2}"])
      })))
  }

  it.live("concurrent setups take turns: one applies the migrations, the others find them applied", () =>
    onFreshDatabase(Effect.gen(function*() {
      const results = yield* Effect.all(
        Array.from({ length: 4 }, () => Effect.flatMap(MysqlTransport.make({ table: "raced" }), (t) => t.setup)),
        { concurrency: "unbounded" }
      )
      expect(results.flat()).toEqual(["1_create_messages", "2_crash_count"])
      const sql = yield* SqlClient.SqlClient
      const recorded = yield* sql<{ n: number }>`SELECT COUNT(*) AS n FROM raced_migrations`
      expect(Number(recorded[0]!.n)).toBe(2)
    })))

  it.live("before setup, send and claim fail with StorageNotReadyError naming the table and what to run", () =>
    onFreshDatabase(Effect.gen(function*() {
      const transport = yield* MysqlTransport.make({ table: "missing" })
      const sent = yield* Effect.flip(transport.send("outbox", [outgoing(1)]))
      expect(sent._tag).toBe("StorageNotReadyError")
      expect(sent.message).toMatch(/missing is not set up.*setup-transports/)
      const claimed = yield* Effect.flip(claimWith(transport, "outbox", 1))
      expect(claimed._tag).toBe("StorageNotReadyError")
      expect(yield* MysqlTransport.queueNames({ table: "missing" })).toEqual([])
    })))

  it.live("a hostile table name is an OutboxConfigError, never SQL", () =>
    onFreshDatabase(Effect.gen(function*() {
      const error = yield* Effect.flip(MysqlTransport.make({ table: "t`; DROP TABLE x; --" }))
      expect(error._tag).toBe("OutboxConfigError")
    })))
})
