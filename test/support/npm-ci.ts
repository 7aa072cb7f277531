/**
 * Tool installs kept apart from the project's own (`bench/`, `test/kafka-client/`): each folder has its
 * `package.json` and lock file, and `npm ci` runs there only when its `node_modules` does not hold exactly what the
 * lock file pins.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

type Packages = Record<
  string,
  { readonly version?: string; readonly integrity?: string; readonly optional?: boolean }
>

const packagesOf = (file: string): Packages | undefined => {
  try {
    const { packages } = JSON.parse(fs.readFileSync(file, "utf8")) as { readonly packages: Packages }
    const { [""]: _root, ...rest } = packages
    return rest
  } catch {
    return undefined
  }
}

/**
 * Whether npm's record of what it installed (node_modules/.package-lock.json) holds the lock's packages, same
 * versions, and nothing else (optional ones, such as other platforms' binaries, may be missing).
 */
export const installed = (dir: string): boolean => {
  const wanted = packagesOf(path.join(dir, "package-lock.json"))!
  const present = packagesOf(path.join(dir, "node_modules", ".package-lock.json"))
  if (present === undefined) return false
  const same = (name: string) =>
    present[name]?.version === wanted[name]?.version && present[name]?.integrity === wanted[name]?.integrity
  return Object.keys(present).every(same) &&
    Object.keys(wanted).every((name) => wanted[name]!.optional === true || same(name))
}

/**
 * Runs `npm ci` in `dir` unless its lock file is installed already. `quiet`: npm's output is shown only when it
 * fails (a tool install inside a test command says one line, not npm's warnings about the tool's engines).
 */
export const ensureInstalled = (dir: string, what: string, quiet = false): void => {
  if (installed(dir)) return
  console.log(`Installing ${what} (${path.relative(process.cwd(), dir) || "."}/package-lock.json)`)
  try {
    execFileSync("npm", ["ci", "--no-audit", "--no-fund"], {
      cwd: dir,
      stdio: quiet ? ["ignore", "pipe", "pipe"] : "inherit"
    })
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: Buffer; stderr?: Buffer }
    if (stdout !== undefined) process.stdout.write(stdout)
    if (stderr !== undefined) process.stderr.write(stderr)
    throw error
  }
}
