/**
 * `npm run bench:install`, the first step of `npm run bench`, `bench:smoke` and `bench:runtimes`: installs the
 * benchmark's peers (graphile-worker, pg-boss) in bench/node_modules exactly as bench/package-lock.json pins them
 * (`npm ci`), unless that is what is installed already. They live apart from the project's install because their
 * current releases need Node.js ≥ 22.18, while the library supports 20.19.
 *
 * The peers' own copy of `pg` is removed: they, and the benchmark's hooks on `pg.Client.prototype` (the commit and
 * latency clocks), must use the project's `pg`, the one @effect/sql-pg runs on — with two copies the hooks see none
 * of our commits. Node finds the project's by looking up from bench/node_modules.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const dir = path.dirname(fileURLToPath(import.meta.url))

type Packages = Record<string, { readonly version?: string; readonly integrity?: string }>

const packagesOf = (file: string): Packages | undefined => {
  try {
    const { packages } = JSON.parse(fs.readFileSync(file, "utf8")) as { readonly packages: Packages }
    const { [""]: _root, ...rest } = packages
    return rest
  } catch {
    return undefined
  }
}

/** npm's record of what it installed (node_modules/.package-lock.json) names the lock's packages, same versions. */
const installed = (): boolean => {
  const wanted = packagesOf(path.join(dir, "package-lock.json"))!
  const present = packagesOf(path.join(dir, "node_modules", ".package-lock.json"))
  if (present === undefined) return false
  const names = Object.keys(wanted)
  return names.length === Object.keys(present).length &&
    names.every((name) =>
      present[name]?.version === wanted[name]!.version && present[name]?.integrity === wanted[name]!.integrity
    )
}

if (!installed()) {
  console.log("Installing the benchmark's peers (bench/package-lock.json) in bench/node_modules")
  execFileSync("npm", ["ci", "--no-audit", "--no-fund"], { cwd: dir, stdio: "inherit" })
}
fs.rmSync(path.join(dir, "node_modules", "pg"), { recursive: true, force: true })
