/**
 * The monitoring files of `examples/observability` stay true to what the library exports. The exported names are
 * not a list kept here: a worker run over the in-memory layers exercises every metric of `OutboxMetrics` (handled,
 * retried and failed messages, a storage failure that restarts the loop, leases renewed under a slow handler, the
 * sampled queue gauges) and its `MetricsServer` is scraped over HTTP. Every `outbox_…` name in the dashboard's
 * queries and the rules' expressions must be a series of that text, with labels and `state` values it has — a
 * renamed metric or label breaks this test. The dashboard must chart every exported family, filter by the
 * `$transport` variable wherever the series has the label, and lay its panels out without overlap; the rules must be
 * well-formed, and the README must list each panel's and each rule's query as they are.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { TransportError } from "../../src/domain/Errors.js"
import * as MemoryTransport from "../../src/layers/MemoryTransport.js"
import * as ScheduleRetryStrategy from "../../src/layers/ScheduleRetryStrategy.js"
import * as MetricsServer from "../../src/programs/observability/MetricsServer.js"
import * as Worker from "../../src/programs/worker/Worker.js"
import * as Handlers from "../../src/services/Handlers.js"
import * as Outbox from "../../src/services/Outbox.js"
import { Transport, type TransportShape } from "../../src/services/Transport.js"
import { TransportAdmin } from "../../src/services/TransportAdmin.js"
import { OrderPaid, OrderShipped } from "../support/messages.js"
import { parseYaml, type YamlValue } from "../support/yamlSubset.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")
const read = (file: string) => fs.readFileSync(path.join(root, file), "utf8")
const dashboardFile = "examples/observability/grafana-dashboard.json"
const alertsFile = "examples/observability/alerts.yml"
const readmeFile = "examples/observability/README.md"

// ---------------------------------------------------------------------------------------------------------------
// What the library exports
// ---------------------------------------------------------------------------------------------------------------

/** The memory transport, whose sessions' first claim fails as a database that went away does. */
const failingOnce = (memory: TransportShape): TransportShape => ({
  ...memory,
  open: (names) =>
    Effect.map(memory.open(names), (session) => {
      let failures = 1
      return {
        ...session,
        claim: (transport, batchSize, acks) =>
          failures-- > 0
            ? Effect.fail(new TransportError({ transport, operation: "claim", message: "connection terminated" }))
            : session.claim(transport, batchSize, acks)
      }
    })
})

const stack = Layer.mergeAll(
  Outbox.layer(),
  Handlers.layer([
    // Slower than a third of the lease: the heartbeat renews it.
    Handlers.handler(OrderPaid, () => Effect.sleep("450 millis")),
    Handlers.handler(OrderShipped, () => Effect.fail("carrier down"))
  ]),
  ScheduleRetryStrategy.layer({ default: { maxRetries: 1, delay: "10 millis" } })
).pipe(Layer.provideMerge(Layer.effectContext(
  Effect.map(
    MemoryTransport.make({ transports: { outbox: { redeliverTimeout: "600 millis" } } }),
    (memory) => Context.make(Transport, failingOnce(memory)).pipe(Context.add(TransportAdmin, memory))
  )
)))

/**
 * The Prometheus text of a worker run that updates every metric: two messages handled, one retried and then moved
 * to the failure queue (4 outcomes: the limit), a first claim that fails (a loop restart), the queue gauges
 * sampled at the start.
 */
const scrapeAfterWorkerRun = Effect.gen(function*() {
  const server = yield* MetricsServer.make({
    host: "127.0.0.1",
    port: 0,
    resource: { serviceName: "observability-files-test" }
  })
  yield* Effect.gen(function*() {
    yield* Outbox.dispatch(new OrderPaid({ orderId: 1, amount: 1 }))
    yield* Outbox.dispatch(new OrderPaid({ orderId: 2, amount: 1 }))
    yield* Outbox.dispatch(new OrderShipped({ orderId: 3, carrier: "post" }))
    const summary = yield* Worker.run({ transports: ["outbox"], limit: 4, sampleQueues: "1 hour" })
    expect(summary).toMatchObject({ handled: 2, retried: 1, failed: 1 })
  }).pipe(
    Effect.provide(stack),
    Logger.withMinimumLogLevel(LogLevel.None),
    Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => new Error("the worker run did not end") })
  )
  return yield* Effect.promise(() =>
    fetch(`http://127.0.0.1:${server.address.port}/metrics`).then((response) => response.text())
  )
}).pipe(Effect.scoped)

/** What a scrape exports: each series name with its labels and their values, each family with its type. */
interface Exported {
  readonly series: ReadonlyMap<string, ReadonlyMap<string, ReadonlySet<string>>>
  readonly families: ReadonlyMap<string, string>
}

const parseExposition = (text: string): Exported => {
  const series = new Map<string, Map<string, Set<string>>>()
  const families = new Map<string, string>()
  for (const line of text.split("\n")) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (type !== null) families.set(type[1]!, type[2]!)
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/.exec(line)
    if (sample === null) continue
    const labels = series.get(sample[1]!) ?? new Map<string, Set<string>>()
    series.set(sample[1]!, labels)
    for (const [, name, value] of (sample[2] ?? "").matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) {
      const values = labels.get(name!) ?? new Set<string>()
      labels.set(name!, values.add(value!))
    }
  }
  return { series, families }
}

/** The metrics `OutboxMetrics.ts` declares, by their names in the source. */
const declaredMetrics = [
  ...read("src/programs/OutboxMetrics.ts").matchAll(/Metric\.(counter|gauge|histogram)\(\s*"(\w+)"/g)
]
  .map(([, kind, name]) => ({ kind: kind!, name: name! }))

let exported: Exported

/**
 * Families only a Kafka transport's stats report (a consumer group's lag per partition) or a CDC transport's (its
 * replication slot), with the labels their update in `OutboxMetrics.sampleQueues` gives them: the memory run cannot
 * export them.
 */
const kafkaOnly: ReadonlyArray<{ readonly name: string; readonly labels: ReadonlyArray<string> }> = [
  { name: "outbox_consumer_lag", labels: ["transport", "topic", "partition"] },
  { name: "outbox_cdc_slot_retained_bytes", labels: ["transport", "slot"] },
  { name: "outbox_cdc_slot_active", labels: ["transport", "slot"] }
]

beforeAll(async () => {
  const scraped = parseExposition(await Effect.runPromise(scrapeAfterWorkerRun))
  const series = new Map(scraped.series)
  const families = new Map(scraped.families)
  for (const { labels, name } of kafkaOnly) {
    expect(families.has(name)).toBe(false)
    families.set(name, "gauge")
    series.set(name, new Map(labels.map((label) => [label, new Set<string>()])))
  }
  exported = { series, families }
})

// ---------------------------------------------------------------------------------------------------------------
// The files
// ---------------------------------------------------------------------------------------------------------------

interface Panel {
  readonly id: number
  readonly type: string
  readonly title: string
  readonly description?: string
  readonly datasource?: { readonly type: string; readonly uid: string }
  readonly gridPos: { readonly h: number; readonly w: number; readonly x: number; readonly y: number }
  readonly targets?: ReadonlyArray<
    {
      readonly refId: string
      readonly expr: string
      readonly legendFormat?: string
      readonly datasource?: { readonly type: string; readonly uid: string }
    }
  >
  readonly panels?: ReadonlyArray<Panel>
}

interface Variable {
  readonly name: string
  readonly type: string
  readonly query: string | { readonly query: string }
  readonly definition?: string
  readonly datasource?: { readonly type: string; readonly uid: string }
  readonly includeAll?: boolean
  readonly allValue?: string
}

interface Dashboard {
  readonly uid: string
  readonly title: string
  readonly schemaVersion: number
  readonly panels: ReadonlyArray<Panel>
  readonly templating: { readonly list: ReadonlyArray<Variable> }
}

const dashboard = JSON.parse(read(dashboardFile)) as Dashboard
const allPanels = dashboard.panels.flatMap((panel) => [panel, ...(panel.panels ?? [])])
const charts = allPanels.filter((panel) => panel.type !== "row")
const variableQuery = (variable: Variable) => typeof variable.query === "string" ? variable.query : variable.query.query

/** Every PromQL query of the dashboard: the panels' targets and the variables' queries. */
const dashboardQueries = [
  ...charts.flatMap((panel) => (panel.targets ?? []).map((target) => ({ where: panel.title, expr: target.expr }))),
  ...dashboard.templating.list.filter((variable) => variable.type === "query").map((variable) => ({
    where: `variable ${variable.name}`,
    expr: variableQuery(variable)
  }))
]

interface Rule {
  readonly alert: string
  readonly expr: string
  readonly for?: string
  readonly labels: { readonly severity: string }
  readonly annotations: { readonly summary: string; readonly description: string }
}

const alerts = parseYaml(read(alertsFile)) as unknown as {
  readonly groups: ReadonlyArray<{ readonly rules: ReadonlyArray<Rule> }>
}
const rules = alerts.groups.flatMap((group) => group.rules)
const ruleQueries = rules.map((rule) => ({ where: rule.alert, expr: rule.expr }))

/** Each `outbox_…` series a query selects, with its label matchers. */
const selectors = (expr: string) =>
  [...expr.matchAll(/(?<![\w:])(outbox_[a-z_]+)(?:\{([^}]*)\})?/g)].map(([, name, matchers]) => ({
    name: name!,
    matchers: [...(matchers ?? "").matchAll(/([a-zA-Z_]\w*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"/g)].map((
      [, label, op, value]
    ) => ({ label: label!, op: op!, value: value! }))
  }))

/** The labels a query groups by (`by (…)`, `without (…)`) or asks the values of (`label_values(metric, label)`). */
const groupingLabels = (expr: string) => [
  ...[...expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)].flatMap(([, list]) =>
    list!.split(",").map((label) => label.trim()).filter((label) => label !== "")
  ),
  ...[...expr.matchAll(/label_values\(\s*[\w:]+(?:\{[^}]*\})?\s*,\s*(\w+)\s*\)/g)].map(([, label]) => label!)
]

/** Labels Prometheus adds to every scraped series. */
const targetLabels = ["instance", "job"]

const labelsOf = (name: string) => exported.series.get(name) ?? new Map<string, ReadonlySet<string>>()

/** What is wrong with a query against the exported text (nothing: an empty list). */
const problems = (expr: string): Array<string> => {
  const found: Array<string> = []
  const used = selectors(expr)
  if (used.length === 0) found.push("names no outbox_ metric")
  for (const { matchers, name } of used) {
    if (!exported.series.has(name)) {
      found.push(`${name} is not exported`)
      continue
    }
    for (const { label, op, value } of matchers) {
      const values = labelsOf(name).get(label)
      if (values === undefined && !targetLabels.includes(label)) found.push(`${name} has no label ${label}`)
      else if (values !== undefined && op === "=" && !values.has(value)) {
        found.push(`${name}{${label}="${value}"}: ${label} is one of ${[...values].sort().join(", ")}`)
      }
    }
  }
  const available = new Set([...targetLabels, ...used.flatMap(({ name }) => [...labelsOf(name).keys()])])
  for (const label of groupingLabels(expr)) {
    if (!available.has(label)) found.push(`groups by ${label}, a label none of its series has`)
  }
  for (const [open, close] of [["(", ")"], ["[", "]"], ["{", "}"]] as const) {
    if (expr.split(open).length !== expr.split(close).length) found.push(`unbalanced ${open}${close}`)
  }
  return found
}

// ---------------------------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------------------------

describe("examples/observability", () => {
  it("the worker run exports every metric OutboxMetrics declares (else the checks below would miss one)", () => {
    expect(declaredMetrics.length).toBeGreaterThanOrEqual(11)
    for (const { kind, name } of declaredMetrics) {
      const family = kind === "counter" ? `${name}_total` : name
      expect(exported.families.get(family), `${family} (${kind}) in the scrape`).toBe(kind)
    }
    expect([...labelsOf("outbox_queue_messages").get("state") ?? []].sort()).toEqual(
      ["delayed", "failed", "in_flight", "ready"]
    )
  })

  it("every query of the dashboard uses only exported series, labels and state values", () => {
    expect(dashboardQueries.length).toBeGreaterThan(10)
    const wrong = dashboardQueries.flatMap(({ expr, where }) => problems(expr).map((p) => `${where}: ${p} in ${expr}`))
    expect(wrong).toEqual([])
  })

  it("every expression of the rules uses only exported series, labels and state values", () => {
    const wrong = ruleQueries.flatMap(({ expr, where }) => problems(expr).map((p) => `${where}: ${p} in ${expr}`))
    expect(wrong).toEqual([])
  })

  it("the dashboard charts every exported outbox family", () => {
    const used = new Set(dashboardQueries.flatMap(({ expr }) => selectors(expr).map(({ name }) => name)))
    const families = [...exported.families.keys()].filter((family) => family.startsWith("outbox_"))
    const unused = families.filter((family) =>
      !["", "_bucket", "_sum", "_count"].some((suffix) => used.has(family + suffix))
    )
    expect(unused).toEqual([])
  })

  it("the dashboard: a Prometheus ${datasource} variable, a transport variable, every panel on them", () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36)
    expect(dashboard.uid).toMatch(/^[\w-]{1,40}$/)
    const byName = new Map(dashboard.templating.list.map((variable) => [variable.name, variable]))
    expect(byName.get("datasource")).toMatchObject({ type: "datasource", query: "prometheus" })
    const transport = byName.get("transport")!
    expect(transport).toMatchObject({
      type: "query",
      datasource: { type: "prometheus", uid: "${datasource}" },
      includeAll: true,
      allValue: ".*"
    })
    expect(variableQuery(transport)).toBe("label_values(outbox_queue_messages, transport)")

    const ids = allPanels.map((panel) => panel.id)
    expect(new Set(ids).size).toBe(ids.length)
    for (const panel of charts) {
      expect(panel.datasource, panel.title).toEqual({ type: "prometheus", uid: "${datasource}" })
      expect(panel.description, panel.title).toBeTruthy()
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0)
      const refIds = panel.targets!.map((target) => target.refId)
      expect(new Set(refIds).size, panel.title).toBe(refIds.length)
      for (const target of panel.targets!) {
        expect(target.datasource, panel.title).toEqual({ type: "prometheus", uid: "${datasource}" })
        // The variable filters every series that has a transport label.
        for (const { matchers, name } of selectors(target.expr)) {
          if (!labelsOf(name).has("transport")) continue
          expect(matchers, `${panel.title}: ${name}`).toContainEqual({
            label: "transport",
            op: "=~",
            value: "$transport"
          })
        }
      }
    }
  })

  it("the dashboard's panels fit the 24-column grid without overlapping", () => {
    const taken = new Map<string, string>()
    for (const panel of allPanels) {
      const { h, w, x, y } = panel.gridPos
      expect(x + w, panel.title).toBeLessThanOrEqual(24)
      for (let row = y; row < y + h; row++) {
        for (let column = x; column < x + w; column++) {
          const cell = `${column},${row}`
          expect(taken.get(cell), `${panel.title} overlaps at ${cell}`).toBeUndefined()
          taken.set(cell, panel.title)
        }
      }
    }
  })

  it("the rules: the outbox's alerts, each with a severity and what to do", () => {
    expect(Object.keys(alerts)).toEqual(["groups"])
    expect(rules.map((rule) => rule.alert)).toEqual([
      "OutboxOldestReadyAgeHigh",
      "OutboxOldestReadyAgeGrowing",
      "OutboxFailureQueueGrowing",
      "OutboxOrderingKeysBlocked",
      "OutboxWorkerLoopRestarts",
      "OutboxQueueMetricsAbsent",
      "OutboxCdcSlotRetainsWal",
      "OutboxCdcSlotInactive"
    ])
    for (const rule of rules) {
      expect(Object.keys(rule).filter((key) => !["alert", "expr", "for", "labels", "annotations"].includes(key)))
        .toEqual([])
      expect(typeof rule.expr, rule.alert).toBe("string")
      if (rule.for !== undefined) expect(rule.for, rule.alert).toMatch(/^(\d+[smhdwy])+$/)
      expect(["critical", "warning"], rule.alert).toContain(rule.labels.severity)
      expect(rule.annotations.summary, rule.alert).toBeTruthy()
      expect(rule.annotations.description, rule.alert).toMatch(/`outbox (stats|failed:show)/)
    }
  })

  it("the README lists every panel and every rule with its query as it is", () => {
    const readme = read(readmeFile)
    /** A query in a table cell: in backticks, its pipes escaped. */
    const cell = (expr: string) => `\`${expr.replaceAll("|", "\\|")}\``
    for (const panel of charts) {
      expect(readme, panel.title).toContain(panel.title)
      for (const target of panel.targets!) expect(readme, panel.title).toContain(cell(target.expr))
    }
    for (const rule of rules) {
      expect(readme, rule.alert).toContain(rule.alert)
      expect(readme, rule.alert).toContain(cell(rule.expr))
    }
  })
})

describe("the YAML subset reader", () => {
  it("reads mappings, sequences, quoted, plain and block scalars", () => {
    const value: YamlValue = parseYaml(
      "a: plain # comment\nb: 'it''s'\nc: \"q\\\"\"\nd:\n  - x\n  - k: v\n    l: |\n      one\n       two\ne: >-\n  f\n  g\n"
    )
    expect(value).toEqual({ a: "plain", b: "it's", c: "q\"", d: ["x", { k: "v", l: "one\n two\n" }], e: "f g" })
  })

  it("refuses what it does not read rather than reading it wrongly", () => {
    for (
      const text of [
        "a: [1]\n",
        "a: {b: c}\n",
        "a: &x b\n",
        "a: b\na: c\n",
        "a: b: c\n",
        "---\na: b\n",
        "a: b\n  c: d\n"
      ]
    ) {
      expect(() => parseYaml(text), text).toThrow(/YAML subset/)
    }
  })
})
