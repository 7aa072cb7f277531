/**
 * The benchmark's smoke mode (`npm run bench -- --quick`), run against the test server so that the
 * benchmark cannot rot: every contender runs, prints a positive figure, and the raw-SQL contender still
 * runs the transport's own statements. It never rewrites BENCHMARKS.md (`--no-write`).
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { adminUrl } from "./support/database.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

interface Figure {
  readonly median: number
  readonly rounds: number
}

interface BenchJson {
  readonly statementsMatch: boolean
  readonly shapeOk: boolean
  readonly burnDown: ReadonlyArray<{ readonly id: string; readonly label: string; readonly rates: Figure }>
  readonly dispatch: ReadonlyArray<{ readonly id: string; readonly label: string; readonly with: Figure; readonly without: Figure }>
  readonly memory: ReadonlyArray<{ readonly id: string; readonly rssFirst: Figure; readonly rssTotal: Figure }>
  readonly latency: ReadonlyArray<{ readonly id: string; readonly label: string; readonly ms: Percentiles; readonly startup: Percentiles }>
  readonly delayed: { readonly delayMs: number; readonly ms: Percentiles }
  readonly recovery: { readonly leaseMs: number; readonly rounds: ReadonlyArray<number>; readonly summary: Figure }
  readonly targets: ReadonlyArray<{ readonly name: string }>
}

interface Percentiles {
  readonly count: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
}

const runQuick = () =>
  new Promise<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", path.join(root, "bench", "main.ts"), "--quick", "--no-write", "--json"],
      { cwd: root, env: { ...process.env, DATABASE_URL: adminUrl() }, stdio: ["ignore", "pipe", "pipe"] }
    )
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    child.on("error", reject)
    child.on("exit", (code) => resolve({ code, stdout, stderr }))
  })

describe("benchmark (--quick)", () => {
  it("runs every contender and prints positive figures", async () => {
    const { code, stderr, stdout } = await runQuick()
    expect(code, stderr).toBe(0)

    const line = stdout.split("\n").find((l) => l.startsWith("BENCH_JSON "))
    expect(line, stdout).toBeDefined()
    const result = JSON.parse(line!.slice("BENCH_JSON ".length)) as BenchJson

    expect(result.statementsMatch).toBe(true)
    expect(result.shapeOk).toBe(true)

    const burnDownIds = result.burnDown.map((r) => r.id).sort()
    expect(burnDownIds).toEqual(["graphile-default", "graphile-fast", "ours-1", "ours-50", "ours-500", "pgboss", "raw"])
    for (const r of result.burnDown) expect(r.rates.median, r.id).toBeGreaterThan(0)

    expect(result.dispatch.map((r) => r.id).sort()).toEqual(["graphile", "ours", "pgboss"])
    for (const r of result.dispatch) {
      expect(r.with.median, r.id).toBeGreaterThan(0)
      expect(r.without.median, r.id).toBeGreaterThan(0)
    }

    expect(result.memory.map((r) => r.id).sort()).toEqual(["graphile-fast", "ours"])
    for (const r of result.memory) {
      expect(r.rssFirst.median, r.id).toBeGreaterThan(0)
      expect(r.rssTotal.median, r.id).toBeGreaterThan(0)
    }
    // The producer in the worker's process, and in a process of its own.
    expect(result.latency.map((r) => r.id).sort()).toEqual(
      ["graphile-default", "graphile-default-own-process", "ours", "ours-own-process"]
    )
    for (const r of result.latency) {
      expect(r.ms.count, r.id).toBeGreaterThan(0)
      expect(r.ms.p50, r.id).toBeGreaterThan(0)
      expect(r.ms.p50, r.id).toBeLessThanOrEqual(r.ms.p99)
      expect(r.ms.p99, r.id).toBeLessThanOrEqual(r.ms.max)
      // The warm-up is measured too, apart (the start-up tail).
      expect(r.startup.count, r.id).toBeGreaterThan(0)
      expect(r.startup.p99, r.id).toBeLessThanOrEqual(r.startup.max)
    }
    // Delayed messages are handled after they are due (database clock), not before.
    expect(result.delayed.ms.count).toBeGreaterThan(0)
    expect(result.delayed.ms.p50).toBeGreaterThanOrEqual(0)
    expect(Number.isFinite(result.delayed.ms.max)).toBe(true)
    // A killed worker's messages come back no earlier than a lease fraction and within a bounded time.
    expect(result.recovery.rounds.length).toBeGreaterThan(0)
    for (const ms of result.recovery.rounds) {
      expect(ms).toBeGreaterThan(0)
      expect(ms).toBeLessThan(result.recovery.leaseMs * 5)
    }
    expect(result.targets.length).toBe(10)

    // The printed tables name every contender.
    for (const label of [...result.burnDown, ...result.dispatch, ...result.latency].map((r) => r.label)) {
      expect(stdout).toContain(`| ${label}`)
    }
    for (const heading of ["### Burn-down", "### Dispatch cost", "### Memory", "### Latency", "### Recovery", "### Targets"]) {
      expect(stdout).toContain(heading)
    }
  }, 240_000)
})

describe("benchmark: the library as published (bench/compiled-library.mjs)", () => {
  type Resolve = (
    specifier: string,
    context: unknown,
    next: (specifier: string, context: unknown) => Promise<{ readonly url: string; readonly format?: string }>
  ) => Promise<{ readonly url: string; readonly format?: string }>
  const hooks = () => import(path.join(root, "bench", "compiled-library-hooks.mjs")) as Promise<{ readonly resolve: Resolve }>
  const inRoot = (file: string) => pathToFileURL(path.join(root, file)).href

  it("resolves a source module to its compiled file, and keeps the source when there is none", async () => {
    const { resolve } = await hooks()
    const compiled = path.join(root, "dist", "__compiled-library-test.js")
    fs.mkdirSync(path.dirname(compiled), { recursive: true })
    fs.writeFileSync(compiled, "export {}\n")
    try {
      const to = (url: string) => () => Promise.resolve({ url, format: "module-typescript" })
      const mapped = await resolve("../src/__compiled-library-test.js", {}, to(inRoot("src/__compiled-library-test.ts")))
      expect(mapped.url).toBe(inRoot("dist/__compiled-library-test.js"))
      expect(mapped.format).toBe("module")
      const kept = await resolve("../src/__not-compiled.js", {}, to(inRoot("src/__not-compiled.ts")))
      expect(kept.url).toBe(inRoot("src/__not-compiled.ts"))
      const other = await resolve("effect", {}, to("file:///somewhere/node_modules/effect/dist/esm/index.js"))
      expect(other.url).toBe("file:///somewhere/node_modules/effect/dist/esm/index.js")
    } finally {
      fs.rmSync(compiled, { force: true })
    }
  })
})
