/**
 * Chromium for the dashboard's tests: Debian's `chromium` (installed when missing and the tests run as root, like
 * RabbitMQ and MariaDB), launched headless by playwright-core and tracked (support/leftovers.ts): the browser's
 * process group and profile directory go when the test process ends, however it ends.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type Browser, chromium } from "playwright-core"
import { ensurePackage } from "./debian.js"
import { track } from "./leftovers.js"

const executablePath = "/usr/bin/chromium"

/** A browser of the test file's own; `close` stops it and removes its profile. */
export interface RunningChromium {
  readonly browser: Browser
  readonly close: () => Promise<void>
}

/** Installs `chromium` from Debian when it is missing and we are root. */
export const ensureInstalled = (): void => ensurePackage("chromium", [executablePath], "apt-get install chromium")

/** Launches headless Chromium (no sandbox: the tests may run as root). */
export const launchChromium = async (): Promise<RunningChromium> => {
  ensureInstalled()
  // The browser's own temporary files, which a killed browser leaves, go to a folder of its own. A short name: its
  // singleton socket's path must fit in 108 bytes.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "outbox-chromium-"))
  const tracked = track({ label: "chromium", processes: [], dirs: [tmp] })
  // A browser server, for its process: playwright keeps the pid of a plain `launch` to itself.
  const server = await chromium.launchServer({
    executablePath,
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking"],
    env: { ...process.env, TMPDIR: tmp }
  })
  const pid = server.process().pid!
  const profile = /--user-data-dir=(\S+)/.exec(fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " "))
  tracked.update({
    label: `chromium ${pid}`,
    processes: [{ pid, group: true }],
    dirs: profile === null ? [tmp] : [tmp, profile[1]!]
  })
  const browser = await chromium.connect(server.wsEndpoint())
  return {
    browser,
    close: async () => {
      await browser.close()
      await server.close()
      fs.rmSync(tmp, { recursive: true, force: true })
      tracked.release()
    }
  }
}
