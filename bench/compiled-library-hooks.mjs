/** Module resolution hooks of bench/compiled-library.mjs: `src/**\/*.ts` → `dist/**\/*.js` when compiled. */
import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"

const src = new URL("../src/", import.meta.url).href
const dist = new URL("../dist/", import.meta.url).href

export async function resolve(specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context)
  if (resolved.url.startsWith(src) && resolved.url.endsWith(".ts")) {
    const compiled = `${dist}${resolved.url.slice(src.length, -".ts".length)}.js`
    if (existsSync(fileURLToPath(compiled))) return { ...resolved, url: compiled, format: "module" }
  }
  return resolved
}
