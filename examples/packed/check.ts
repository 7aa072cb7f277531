/**
 * The examples compiled against the packed package, as an application compiles them: `npm pack` (which builds
 * `dist/`), the tarball unpacked as `node_modules/effect-outbox` of a fresh ESM application beside the pinned
 * peer dependencies (linked from this repository's `node_modules`: no network), and `tsc` with `strict`,
 * `exactOptionalPropertyTypes` and NodeNext over examples/http-api, examples/worker-only, examples/testing and
 * examples/packed/handlers.ts: the package's `exports`, its `files` and its declarations are what they resolve to.
 * `skipLibCheck` is on, as in applications: @effect/platform's own declarations need the DOM library and `ws`.
 *
 * Exits non-zero with the compiler's output when anything does not compile.
 */
import * as child from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const examples = [
  "http-api/app.ts",
  "http-api/main.ts",
  "http-api/tracing.ts",
  "worker-only/main.ts",
  "testing/handlers.test.ts"
]

const tsconfig = {
  compilerOptions: {
    target: "ES2022",
    lib: ["ES2022"],
    module: "NodeNext",
    moduleResolution: "NodeNext",
    strict: true,
    exactOptionalPropertyTypes: true,
    noUnusedLocals: true,
    skipLibCheck: true,
    types: ["node"],
    noEmit: true
  },
  include: ["src"]
}

/** Packs the repository and sets up the application; returns its directory. */
const setUp = (): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-outbox-packed-"))
  const packed = child.execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"]
  }).trim().split("\n").pop()!
  const app = path.join(dir, "app")
  const modules = path.join(app, "node_modules")
  fs.mkdirSync(modules, { recursive: true })
  child.execFileSync("tar", ["-xzf", path.join(dir, packed), "-C", modules])
  fs.renameSync(path.join(modules, "package"), path.join(modules, "effect-outbox"))
  for (const entry of fs.readdirSync(path.join(root, "node_modules"))) {
    if (entry.startsWith(".") || entry === "effect-outbox") continue
    fs.symlinkSync(path.join(root, "node_modules", entry), path.join(modules, entry))
  }
  fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ type: "module", private: true }, null, 2))
  fs.writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify(tsconfig, null, 2))
  for (const file of [...examples, "packed/handlers.ts"]) {
    const target = path.join(app, "src", file)
    fs.mkdirSync(path.dirname(target), { recursive: true })
    fs.copyFileSync(path.join(root, "examples", file), target)
  }
  return dir
}

const dir = setUp()
try {
  const tsc = child.spawnSync(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", "app"], {
    cwd: dir,
    encoding: "utf8"
  })
  if (tsc.status !== 0) {
    console.error(`✘ the examples do not compile against the packed package:\n${tsc.stdout}${tsc.stderr}`)
    process.exitCode = 1
  } else {
    console.log(`✔ packed: ${examples.length + 1} example files compile against the tarball under strict settings`)
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
