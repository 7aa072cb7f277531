/**
 * The migrations of the MySQL transport table, each frozen in its own entry: editing one can never change what an
 * earlier one means on a fresh install. Every step is idempotent, so a table made by Symfony's Doctrine transport
 * is adopted and completed rather than replaced. Only the validated, quoted table name and names derived from it
 * are interpolated.
 *
 * @internal
 */
import { addColumn, columnExists, type Migration, type Step } from "../migrate.js"
import { indexName, nameOf, quote, schemaOf } from "./identifiers.js"

/**
 * The claim index's name: on `messenger_messages`, the name Doctrine gives Symfony's (since 6.4.31 / 7.3.9), so
 * that a Symfony application sharing the table finds its schema as it expects it.
 */
const claimIndex = (table: string): string =>
  nameOf(table) === "messenger_messages"
    ? "IDX_75EA56E0FB7336F0E3BD61CE16BA31DBBF396750"
    : indexName(table, "_claim_idx")

/** Finds an index of the table that begins with `queue_name, available_at, delivered_at` (Symfony's, or ours). */
const claimIndexExists = (table: string): readonly [string, ReadonlyArray<unknown>] => [
  `SELECT INDEX_NAME FROM information_schema.STATISTICS
   WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?
   GROUP BY INDEX_NAME
   HAVING GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) LIKE 'queue_name,available_at,delivered_at%'`,
  [schemaOf(table), nameOf(table)]
]

/** Finds a time column of the table that is not yet `DATETIME(6)`. */
const secondPrecisionTimes = (table: string): readonly [string, ReadonlyArray<unknown>] => [
  `SELECT 1 FROM information_schema.COLUMNS
   WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?
     AND COLUMN_NAME IN ('created_at', 'available_at', 'delivered_at')
     AND NOT (DATA_TYPE = 'datetime' AND DATETIME_PRECISION = 6)`,
  [schemaOf(table), nameOf(table)]
]

/** A step that runs when `query` finds a row (the opposite of `unless`). */
const when = (query: readonly [string, ReadonlyArray<unknown>], run: string): Step => ({
  unless: [`SELECT 1 FROM DUAL WHERE NOT EXISTS (${query[0]})`, query[1]],
  run
})

/** The migrations of a table, in order. @internal */
export const migrations = (table: string): ReadonlyArray<Migration> => {
  const t = quote(table)
  return [{
    id: 1,
    name: "create_messages",
    steps: [
      // Symfony's shape (LONGTEXT bodies and headers, a 190-character queue name, its claim index) with
      // microsecond times, a stable message id and a delivery count.
      `CREATE TABLE IF NOT EXISTS ${t} (
        id BIGINT AUTO_INCREMENT NOT NULL,
        body LONGTEXT NOT NULL,
        headers LONGTEXT NOT NULL,
        queue_name VARCHAR(190) NOT NULL,
        created_at DATETIME(6) NOT NULL,
        available_at DATETIME(6) NOT NULL,
        delivered_at DATETIME(6) DEFAULT NULL,
        message_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        delivery_count INT NOT NULL DEFAULT 0,
        PRIMARY KEY (id),
        INDEX ${quote(claimIndex(table))} (queue_name, available_at, delivered_at, id),
        INDEX ${quote(indexName(table, "_message_id_idx"))} (message_id)
      ) ENGINE = InnoDB DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`,
      // A table Symfony made: its rows get message ids (UUIDs of the server), its times microseconds (they hold
      // UTC, as ours), its indexes the claim's.
      addColumn(table, "message_id", "CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL"),
      `UPDATE ${t} SET message_id = UUID() WHERE message_id IS NULL`,
      when(
        [`${columnExists(table, "message_id")[0]} AND IS_NULLABLE = 'YES'`, columnExists(table, "message_id")[1]],
        `ALTER TABLE ${t} MODIFY message_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL`
      ),
      addColumn(table, "delivery_count", "INT NOT NULL DEFAULT 0"),
      when(
        secondPrecisionTimes(table),
        `ALTER TABLE ${t} MODIFY created_at DATETIME(6) NOT NULL, MODIFY available_at DATETIME(6) NOT NULL,
          MODIFY delivered_at DATETIME(6) DEFAULT NULL`
      ),
      {
        unless: claimIndexExists(table),
        run: `CREATE INDEX ${quote(claimIndex(table))} ON ${t} (queue_name, available_at, delivered_at, id)`
      },
      {
        unless: [
          `SELECT 1 FROM information_schema.STATISTICS
           WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = 'message_id'
             AND SEQ_IN_INDEX = 1`,
          [schemaOf(table), nameOf(table)]
        ],
        run: `CREATE INDEX ${quote(indexName(table, "_message_id_idx"))} ON ${t} (message_id)`
      }
    ]
  }, {
    // Crashes charged only to the message that caused them (see `claimTexts`): added in place, no row rewritten
    // (an instant ADD COLUMN on MySQL ≥ 8.0.12 and MariaDB ≥ 10.3).
    id: 2,
    name: "crash_count",
    steps: [
      addColumn(table, "crash_count", "INT NOT NULL DEFAULT 0"),
      addColumn(table, "lease_state", "TINYINT NOT NULL DEFAULT 0")
    ]
  }]
}
