/**
 * Hostile rows: what a worker must survive when it finds them in its table among valid messages — inserted by raw
 * SQL, as a buggy producer, a manual fix or another application could leave them. Each is either handled (its body
 * is a valid `ChaosPaid`, with a hostile field the schema allows) or must end in the failure queue with a reason of
 * bounded length; the worker must never stop. `available_at = 'infinity'` ("never due") is parked on purpose and
 * counted apart.
 */
import * as Effect from "effect/Effect"
import { randomUUID } from "node:crypto"
import type { InsertedHostile } from "./harness.js"
import { withClient } from "./harness.js"
import { queue, table } from "./model.js"

/** One hostile row: its columns as text (PostgreSQL casts them). */
interface HostileSpec {
  readonly label: string
  readonly headers: string
  readonly body: string
  readonly availableAt?: string
  readonly deliveredAt?: string
  readonly deliveryCount?: number
  readonly crashCount?: number
  readonly parked?: boolean
}

const depth = 5000
const deepArray = "[".repeat(depth) + "]".repeat(depth)
const deepObject = "{\"a\":".repeat(depth) + "1" + "}".repeat(depth)
const headers = (type = "ChaosPaid") => JSON.stringify({ type })
const body = (n: number, extra = "") => `{"_tag":"ChaosPaid","n":${n}${extra}}`

/** The rows, with negative business numbers (valid messages have positive ones). */
export const specs = (): ReadonlyArray<HostileSpec> => [
  {
    label: "headers nested 5 000 deep",
    headers: `{"type":"ChaosPaid","custom":{"deep":${deepArray}}}`,
    body: body(-1)
  },
  { label: "body nested 5 000 deep (arrays)", headers: headers(), body: body(-2, `,"note":${deepArray}`) },
  {
    label: "body nested 5 000 deep (objects)",
    headers: headers(),
    body: `{"_tag":"ChaosPaid","n":-3,"x":${deepObject}}`
  },
  { label: "NUL escape in a string field", headers: headers(), body: body(-4, `,"note":"nul\\u0000here"`) },
  { label: "NUL escape in the type", headers: `{"type":"Chaos\\u0000Paid"}`, body: body(-5) },
  { label: "lone surrogate in a string field", headers: headers(), body: body(-6, `,"note":"\\ud800"`) },
  { label: "lone surrogate in the type", headers: `{"type":"\\udfffChaosPaid"}`, body: body(-7) },
  { label: "5 MB string field", headers: headers(), body: body(-8, `,"note":"${"x".repeat(5 * 1024 * 1024)}"`) },
  {
    label: "5 MB string where a number belongs",
    headers: headers(),
    body: `{"_tag":"ChaosPaid","n":"${"9".repeat(5 * 1024 * 1024)}"}`
  },
  { label: "1 MB type name", headers: headers("T".repeat(1024 * 1024)), body: body(-10) },
  { label: "unknown type", headers: headers("NoSuchMessage"), body: "{}" },
  { label: "available_at = '-infinity'", headers: headers(), body: body(-12), availableAt: "-infinity" },
  { label: "delivered_at = 'infinity'", headers: headers(), body: body(-13), deliveredAt: "infinity" },
  { label: "delivery_count = 2147483647", headers: headers(), body: body(-14), deliveryCount: 2147483647 },
  { label: "crash_count = 2147483647", headers: headers(), body: body(-18), crashCount: 2147483647 },
  { label: "non-JSON headers", headers: "type=ChaosPaid; not json {", body: body(-15) },
  { label: "non-JSON body", headers: headers(), body: "{\"_tag\":\"ChaosPaid\",\"n\":" },
  { label: "available_at = 'infinity'", headers: headers(), body: body(-17), availableAt: "infinity", parked: true }
]

/** Inserts one hostile row into the main queue and returns what identifies it. */
export const insert = (url: string, spec: HostileSpec): Effect.Effect<InsertedHostile, unknown> =>
  Effect.tryPromise(async () => {
    const messageId = randomUUID()
    await withClient(url, (c) =>
      c.query(
        `INSERT INTO ${table}
           (message_id, body, headers, queue_name, available_at, delivered_at, delivery_count, crash_count)
         VALUES ($1, $2, $3, '${queue}', coalesce($4::timestamptz, now()), $5::timestamptz, coalesce($6::int, 0),
           coalesce($7::int, 0))`,
        [
          messageId,
          spec.body,
          spec.headers,
          spec.availableAt ?? null,
          spec.deliveredAt ?? null,
          spec.deliveryCount ?? null,
          spec.crashCount ?? null
        ]
      ))
    return { label: spec.label, messageId, parked: spec.parked === true }
  })
