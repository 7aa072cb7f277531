/**
 * The README's code blocks marked `<!-- snippet: <file>#<region> -->` are copies of regions of the examples
 * (`// #region <name>` … `// #endregion`), which are compiled by `tsc` and run (`npm test`, `npm run examples`):
 * a snippet that drifts from its example fails here.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")
const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")

/** Each marker with the code block right after it (blank lines between them allowed). */
const snippets = [...readme.matchAll(/<!-- snippet: ([^#\s]+)#([\w-]+) -->\n(?:\s*\n)*```\w*\n([\s\S]*?)```/g)].map((
  [, file, region, code]
) => ({ file: file!, region: region!, code: code! }))

/** The lines between `// #region name` and its `// #endregion`, or undefined when the file has no such region. */
const regionOf = (text: string, name: string): string | undefined => {
  const lines = text.split("\n")
  const start = lines.findIndex((line) => line.trim() === `// #region ${name}`)
  if (start === -1) return undefined
  const end = lines.findIndex((line, i) => i > start && line.trim() === "// #endregion")
  return end === -1 ? undefined : lines.slice(start + 1, end).join("\n") + "\n"
}

describe("README snippets", () => {
  it("every marker names a code block (none left without one)", () => {
    expect(snippets.length).toBe([...readme.matchAll(/<!-- snippet: /g)].length)
    expect(snippets.map((s) => `${s.file}#${s.region}`)).toEqual(
      expect.arrayContaining(["examples/http-api/app.ts#using-it", "examples/testing/handlers.test.ts#testing"])
    )
  })

  for (const { code, file, region } of snippets) {
    it(`${file}#${region} is the README's copy`, () => {
      const source = path.join(root, file)
      expect(fs.existsSync(source), `${file} does not exist`).toBe(true)
      const text = regionOf(fs.readFileSync(source, "utf8"), region)
      expect(text, `${file} has no region ${region}`).toBeDefined()
      expect(code).toBe(text)
    })
  }
})
