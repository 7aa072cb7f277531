/**
 * The engines of change data capture, end to end and without the library: PostgreSQL's logical decoding, Debezium's
 * PostgreSQL connector with its Outbox Event Router on the run's Kafka Connect worker (support/connect.ts), and the
 * run's Kafka broker, read by a plain `@platformatic/kafka` consumer. Business transactions insert an event into a
 * table of the router's default shape and delete it in the same transaction: the table stays empty, and the WAL
 * still carries the inserts of the committed transactions, which reach Kafka in commit order per key.
 */
import { Admin, Consumer } from "@platformatic/kafka"
import { randomBytes, randomUUID } from "node:crypto"
import pg from "pg"
import { afterEach, describe, expect, it } from "vitest"
import { dropSlot, eventually } from "./support/cdc.js"
import { awaitConnectorRunning, createConnector, deleteConnector } from "./support/connect.js"
import { createDatabase, query } from "./support/database.js"
import { kafkaBootstrap, kafkaConnectUrl } from "./support/kafka-transport.js"

/** An event row as the Event Router reads it by default, plus the header columns. */
interface Event {
  readonly id: string
  readonly aggregatetype: string
  readonly aggregateid: string
  readonly type: string
  readonly payload: { readonly n: number; readonly key: string }
  readonly traceparent: string
}

/** A record of the routed topic, with its headers as text. */
interface Read {
  readonly partition: number
  readonly offset: bigint
  readonly key: string | undefined
  readonly value: string
  readonly headers: Record<string, string>
}

/** Names unique to one test (and run): slot, publication, connector, topic prefix, aggregate type. */
const unique = (prefix: string) => `${prefix}_${process.pid}_${randomBytes(4).toString("hex")}`

/** The connector's configuration for the database at `url` (see the issue: the Event Router's defaults). */
const connectorConfig = (
  url: string,
  names: { readonly slot: string; readonly publication: string; readonly prefix: string }
) => {
  const db = new URL(url)
  return {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": 1,
    "plugin.name": "pgoutput",
    "database.hostname": db.hostname,
    "database.port": db.port,
    "database.user": decodeURIComponent(db.username),
    "database.password": decodeURIComponent(db.password),
    "database.dbname": db.pathname.slice(1),
    "topic.prefix": names.prefix,
    "table.include.list": "public.outbox_event",
    "publication.name": names.publication,
    "publication.autocreate.mode": "disabled",
    "slot.name": names.slot,
    "snapshot.mode": "no_data",
    "tombstones.on.delete": false,
    // Debezium 3 adds __debezium.context.* headers to every record by default.
    "extended.headers.enabled": false,
    // The broker creates no topic implicitly: the connector creates the routed topics.
    "topic.creation.default.replication.factor": 1,
    "topic.creation.default.partitions": 3,
    "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.table.fields.additional.placement": "type:header:type,traceparent:header:traceparent"
  }
}

/** Reads `topic` from its start until every id of `ids` was read; returns every record read. */
const readUntil = async (topic: string, ids: ReadonlySet<string>): Promise<Array<Read>> => {
  const consumer = new Consumer({
    clientId: "cdc-reader",
    groupId: unique("reader"),
    bootstrapBrokers: [kafkaBootstrap()]
  })
  const stream = await consumer.consume({ topics: [topic], mode: "earliest", autocommit: false, maxWaitTime: 200 })
  const read: Array<Read> = []
  const missing = new Set(ids)
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${missing.size} of ${ids.size} records not read`)), 60_000)
      stream.on("data", (m) => {
        const headers: Record<string, string> = {}
        for (const [k, v] of m.headers) headers[k.toString()] = v.toString()
        read.push({
          partition: m.partition,
          offset: m.offset,
          key: m.key?.length ? m.key.toString() : undefined,
          value: m.value.toString(),
          headers
        })
        missing.delete(headers.id ?? "")
        if (missing.size === 0) {
          clearTimeout(timer)
          resolve()
        }
      })
    })
  } finally {
    await stream.close().catch(() => undefined)
    await consumer.close().catch(() => undefined)
  }
  return read
}

/** What a test left to remove when it failed half-way (the connector and the slot). */
const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined)
})

describe("CDC engines: PostgreSQL → Debezium's Outbox Event Router on Kafka Connect → Kafka", () => {
  it(
    "committed transactions' events reach outbox.event.<aggregatetype> in commit order per key, rolled-back ones " +
      "never, and the table stays empty",
    async () => {
      const connect = kafkaConnectUrl()
      const url = await createDatabase("cdc")
      const { wal_level } = (await query<{ wal_level: string }>(url, "SHOW wal_level"))[0]!
      expect(wal_level, "the test server runs with wal_level = logical (support/postgres.ts)").toBe("logical")
      const slot = unique("cdc_slot")
      const publication = unique("cdc_pub")
      const connector = unique("cdc-engine")
      const aggregatetype = unique("Order")
      const topic = `outbox.event.${aggregatetype}`
      await query(
        url,
        `CREATE TABLE outbox_event (
           id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
           payload jsonb, traceparent text)`
      )
      await query(url, `CREATE PUBLICATION ${publication} FOR TABLE outbox_event WITH (publish = 'insert')`)

      cleanups.push(() => dropSlot(url, slot), () => deleteConnector(connect, connector))
      await createConnector(connect, connector, connectorConfig(url, { slot, publication, prefix: unique("cdc") }))
      await awaitConnectorRunning(connect, connector)
      await eventually(
        `slot ${slot} created`,
        async () => (await query(url, "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", [slot])).length > 0
      )

      const clients = [new pg.Client({ connectionString: url }), new pg.Client({ connectionString: url })] as const
      await Promise.all(clients.map((client) => client.connect()))
      let n = 0
      const event = (key: string): Event => ({
        id: randomUUID(),
        aggregatetype,
        aggregateid: key,
        type: "OrderPlaced",
        payload: { n: ++n, key },
        traceparent: `00-${randomBytes(16).toString("hex")}-${randomBytes(8).toString("hex")}-01`
      })
      const insert = (client: pg.Client, e: Event) =>
        client.query(
          `INSERT INTO outbox_event (id, aggregatetype, aggregateid, type, payload, traceparent)
           VALUES ($1, $2, $3, $4, $5, $6)`,
          [e.id, e.aggregatetype, e.aggregateid, e.type, JSON.stringify(e.payload), e.traceparent]
        )
      const remove = (client: pg.Client, events: ReadonlyArray<Event>) =>
        client.query("DELETE FROM outbox_event WHERE id = ANY($1::uuid[])", [events.map((e) => e.id)])
      /** Every event that must arrive, in commit order. */
      const committed: Array<Event> = []
      const keys = ["order-1", "order-2", "order-3"]
      try {
        const [a, b] = clients
        // Business transactions: a business row would be written here; the events go in and out of the table.
        for (let tx = 0; tx < 10; tx++) {
          const events = [...keys, keys[tx % keys.length]!].map(event)
          await a.query("BEGIN")
          for (const e of events) await insert(a, e)
          await remove(a, events)
          if (tx === 4) {
            await a.query("ROLLBACK")
          } else {
            await a.query("COMMIT")
            committed.push(...events)
          }
        }
        // Two overlapping transactions on one key: the first to insert commits last, and comes last.
        const first = event("order-2")
        const second = event("order-2")
        await a.query("BEGIN")
        await insert(a, first)
        await b.query("BEGIN")
        await insert(b, second)
        await remove(b, [second])
        await b.query("COMMIT")
        await remove(a, [first])
        await a.query("COMMIT")
        committed.push(second, first)
      } finally {
        await Promise.all(clients.map((client) => client.end()))
      }
      expect((await query(url, "SELECT 1 FROM outbox_event")).length).toBe(0)

      const admin = new Admin({ clientId: "cdc-admin", bootstrapBrokers: [kafkaBootstrap()] })
      try {
        await eventually(
          `topic ${topic} created by the connector`,
          async () => (await admin.listTopics()).includes(topic)
        )
      } finally {
        await admin.close()
      }
      const read = await readUntil(topic, new Set(committed.map((e) => e.id)))

      // Exactly the committed events (a rolled-back one would come before the later ones of its key, and be read).
      expect(read.map((r) => r.headers.id).sort()).toEqual(committed.map((e) => e.id).sort())
      const byId = new Map(committed.map((e) => [e.id, e]))
      for (const r of read) {
        const e = byId.get(r.headers.id!)!
        expect(r.key).toBe(e.aggregateid)
        expect(r.headers).toEqual({ id: e.id, type: e.type, traceparent: e.traceparent })
        expect(JSON.parse(r.value)).toEqual(e.payload)
      }
      for (const key of keys) {
        const inKafka = read.filter((r) => r.key === key).sort((x, y) => Number(x.offset - y.offset))
        expect(new Set(inKafka.map((r) => r.partition)).size).toBe(1)
        expect(inKafka.map((r) => r.headers.id)).toEqual(
          committed.filter((e) => e.aggregateid === key).map((e) => e.id)
        )
      }

      await deleteConnector(connect, connector)
      await dropSlot(url, slot)
      expect(await query(url, "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", [slot])).toEqual([])
    },
    240_000
  )
})
