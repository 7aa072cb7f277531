/**
 * bench/compiled-library.mjs runs the benchmark on the library as it ships: its resolve hook maps a source module
 * `src/**\/*.ts` to the tsc-compiled `dist/**\/*.js` when that file exists. The hook finds src/ and dist/ next to its
 * own folder, so it is tested on a copy laid out in a temporary directory: nothing is written into the project's
 * dist/. (The benchmark's smoke run itself is `npm run bench:smoke`, bench/smoke.ts.)
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

type Resolved = { readonly url: string; readonly format?: string }
type Resolve = (
  specifier: string,
  context: unknown,
  next: (specifier: string, context: unknown) => Promise<Resolved>
) => Promise<Resolved>

describe("benchmark: the library as published (bench/compiled-library.mjs)", () => {
  let dir: string
  let resolve: Resolve
  const inDir = (file: string) => pathToFileURL(path.join(dir, file)).href

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "compiled-library-"))
    fs.mkdirSync(path.join(dir, "bench"))
    fs.mkdirSync(path.join(dir, "src", "layers"), { recursive: true })
    fs.mkdirSync(path.join(dir, "dist", "layers"), { recursive: true })
    fs.copyFileSync(
      path.join(root, "bench", "compiled-library-hooks.mjs"),
      path.join(dir, "bench", "compiled-library-hooks.mjs")
    )
    fs.writeFileSync(path.join(dir, "dist", "compiled.js"), "export {}\n")
    fs.writeFileSync(path.join(dir, "dist", "layers", "Nested.js"), "export {}\n")
    const hooks = await import(inDir("bench/compiled-library-hooks.mjs")) as { readonly resolve: Resolve }
    resolve = hooks.resolve
  })

  afterAll(() => {
    if (dir !== undefined) fs.rmSync(dir, { recursive: true, force: true })
  })

  const to = (url: string) => () => Promise.resolve({ url, format: "module-typescript" })

  it("resolves a source module to its compiled file", async () => {
    const mapped = await resolve("../src/compiled.js", {}, to(inDir("src/compiled.ts")))
    expect(mapped.url).toBe(inDir("dist/compiled.js"))
    expect(mapped.format).toBe("module")
    const nested = await resolve("./layers/Nested.js", {}, to(inDir("src/layers/Nested.ts")))
    expect(nested.url).toBe(inDir("dist/layers/Nested.js"))
  })

  it("keeps the source when there is no compiled file, and leaves other modules alone", async () => {
    const kept = await resolve("../src/not-compiled.js", {}, to(inDir("src/not-compiled.ts")))
    expect(kept.url).toBe(inDir("src/not-compiled.ts"))
    expect(kept.format).toBe("module-typescript")
    const other = await resolve("effect", {}, to("file:///somewhere/node_modules/effect/dist/esm/index.js"))
    expect(other.url).toBe("file:///somewhere/node_modules/effect/dist/esm/index.js")
  })
})
