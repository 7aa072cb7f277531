/**
 * The package's public surface (package.json `exports`): an explicit, flat map of subpaths, each to a compiled
 * module of dist/ whose source is in src/ (dist/ mirrors src/, see tsconfig.build.json), none of them internal or
 * a demo, and a package without side effects.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/** Modules that must never be exported: demos and the `outbox` binary's entry point. */
const notPublic = /(^|\/)([Dd]emo[^/]*|outbox-main|EmbeddedPostgres)\.js$/

interface Conditions {
  readonly types?: string
  readonly import?: string
}

const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as {
  readonly exports: Record<string, string | Conditions>
  readonly sideEffects: unknown
}
const modules = Object.entries(pkg.exports).filter(([key]) => key !== "./package.json") as Array<
  [string, Conditions]
>

/** `./dist/layers/PgTransport.js` → `src/layers/PgTransport.ts`. */
const sourceOf = (file: string) => file.replace(/^\.\/dist\//, "src/").replace(/\.js$/, ".ts")

describe("package.json", () => {
  it("has no side effects", () => {
    expect(pkg.sideEffects).toEqual([])
  })

  it("exports an explicit, flat map of subpaths (no patterns) and its package.json", () => {
    expect(modules.length).toBeGreaterThan(0)
    expect(pkg.exports["."]).toBeDefined()
    expect(pkg.exports["./package.json"]).toBe("./package.json")
    for (const [key, target] of Object.entries(pkg.exports)) {
      expect(key, key).not.toContain("*")
      expect(JSON.stringify(target), key).not.toContain("*")
    }
    for (const [key] of modules) if (key !== ".") expect(key, key).toMatch(/^\.\/[A-Za-z][A-Za-z0-9-]*$/)
  })

  it("points every export at a compiled module of dist/ and its declarations", () => {
    for (const [key, target] of modules) {
      expect(typeof target, key).toBe("object")
      expect(Object.keys(target).sort(), key).toEqual(["import", "types"])
      expect(target.import, key).toMatch(/^\.\/dist\/.+\.js$/)
      expect(target.types, key).toBe(target.import!.replace(/\.js$/, ".d.ts"))
    }
  })

  it("exports only modules whose source exists", () => {
    const missing = modules
      .map(([key, target]) => [key, sourceOf(target.import!)] as const)
      .filter(([, source]) => !fs.existsSync(path.join(root, source)))
    expect(missing).toEqual([])
  })

  it("exports every folder-internal module only through its public module", () => {
    for (const [key, target] of modules) {
      expect(target.import, key).not.toMatch(/\/(cli|pg|amqp|worker)\/(?!Worker|AmqpTransport)[^/]+\.js$/)
    }
  })

  it("exports nothing internal, no demo and not the binary's entry point", () => {
    for (const [key, target] of modules) {
      expect(target.import, key).not.toMatch(/(^|\/)internal\//)
      expect(target.import, key).not.toMatch(notPublic)
    }
  })
})
