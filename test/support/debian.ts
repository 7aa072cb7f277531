/**
 * Debian packages the tests need (servers they start themselves), installed when missing and the tests run as root.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"

/**
 * Ensures `binaries` exist: when one is missing, installs `pkg` with apt (root only; otherwise fails with `hint`,
 * what to install or set instead). It waits for a concurrent apt or dpkg (another worktree's tests) to finish.
 */
export const ensurePackage = (pkg: string, binaries: ReadonlyArray<string>, hint: string): void => {
  if (binaries.every((binary) => fs.existsSync(binary))) return
  if (process.getuid?.() !== 0) {
    throw new Error(`${pkg} is not installed (${binaries.join(", ")} missing): ${hint}`)
  }
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
  const install = () =>
    execFileSync("apt-get", ["install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", pkg], { env, stdio: "ignore" })
  try {
    install()
  } catch {
    execFileSync("apt-get", ["update", "-q"], { env, stdio: "ignore" })
    install()
  }
}
