#!/usr/bin/env node
// The `outbox` command of the published package (built into dist/ by `npm run build`). Its optional peers are
// loaded by the commands that need them; a required peer that is not installed (npm installs them, pnpm and
// `--legacy-peer-deps` do not) is named in one line with the line that installs it, instead of Node's stack.
import { readFileSync } from "node:fs"

import("../dist/programs/outbox-main.js").catch((error) => {
  const missing = error?.code === "ERR_MODULE_NOT_FOUND"
    ? /Cannot find package '([^']+)'/.exec(String(error.message))?.[1]
    : undefined
  if (missing === undefined) throw error
  const { peerDependencies = {} } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"))
  const range = peerDependencies[missing]
  const install = range === undefined ? missing : `${missing}@${String(range).replace(/^\^/, "")}`
  console.error(
    `error: the outbox command needs the package ${missing}, which is not installed: ` +
      `npm install --save-exact ${install} (the README's "Install" section lists every peer)`
  )
  process.exit(1)
})
