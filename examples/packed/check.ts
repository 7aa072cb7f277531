/**
 * The package as an application installs it. `npm pack` (which builds `dist/`), then, in an empty folder:
 *
 * 1. the install lines of the README's "Install" section, run as written with the tarball for `effect-outbox`
 *    (npm's cache first, the registry for what it lacks), the README's tsconfig.json and `"type": "module"`;
 * 2. `tsc` over an application (examples/packed/app.ts: a dispatch and a worker), examples/packed/handlers.ts,
 *    examples/http-api/app.ts and examples/worker-only/main.ts;
 * 3. against a PostgreSQL ($DATABASE_URL, or an embedded one it starts and stops), in a database of its own: the
 *    installed `outbox` binary (`--help`, `--version`, `stats` before the table exists, `setup-transports`, `consume`
 *    without handlers), the compiled application, then `stats` and `failed:show` on what it left;
 * 4. the optional peers the other examples use (traces over OTLP, the test helpers), at the repository's versions,
 *    and `tsc` over every example.
 *
 * Only what the README's lines install is in the application's node_modules: an optional peer that the package
 * loads eagerly, or a declaration the README's tsconfig rejects, fails here as it fails for a user.
 * Exits non-zero with a message on the first broken expectation.
 */
import * as child from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import * as EmbeddedPostgres from "../../src/programs/EmbeddedPostgres.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const manifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as {
  readonly version: string
  readonly devDependencies: Record<string, string>
}

/** Compiled and run with the README's install lines only. */
const core = ["packed/app.ts", "packed/handlers.ts", "http-api/app.ts", "worker-only/main.ts"]
/** Compiled once the optional peers they use are installed too. */
const optional = ["http-api/main.ts", "http-api/tracing.ts", "testing/handlers.test.ts"]
const optionalPeers = ["@effect/opentelemetry", "vitest", "@effect/vitest"]

class CheckFailure extends Error {}
const check = (condition: boolean, message: string) => {
  if (!condition) throw new CheckFailure(message)
}

const started = Date.now()
const seconds = () => `${((Date.now() - started) / 1000).toFixed(1)} s`

/** The README's "Install" section: its `npm install` commands (continuation lines joined) and its tsconfig.json. */
const readInstall = () => {
  const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
  const section = /^## Install\n([\s\S]*?)^## /m.exec(readme)?.[1]
  check(section !== undefined, `README.md has no "## Install" section`)
  const block = (lang: string) => new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(section!)?.[1]
  const sh = block("sh")
  const json = block("json")
  check(sh !== undefined && json !== undefined, `README.md's Install section lacks its sh or json block`)
  const commands = sh!.replace(/\\\n\s*/g, " ").split("\n").map((line) => line.trim().split(/\s+/))
    .filter((words) => words[0] === "npm" && words[1] === "install")
  check(commands.length > 0, `README.md's Install section has no npm install line`)
  return { commands, tsconfig: JSON.parse(json!) as unknown }
}

const run = (
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env?: Record<string, string> }
) => {
  const result = child.spawnSync(command, args, {
    cwd: options.cwd,
    encoding: "utf8",
    env: { ...process.env, ...options.env, NO_COLOR: "1" }
  })
  return { status: result.status, stdout: result.stdout ?? "", stderr: result.stderr ?? "" }
}

const npmInstall = (app: string, args: ReadonlyArray<string>) => {
  const result = run("npm", [...args, "--prefer-offline", "--no-audit", "--no-fund"], { cwd: app })
  check(result.status === 0, `npm ${args.join(" ")} failed:\n${result.stdout}${result.stderr}`)
}

/** Packs the repository, installs the tarball as the README says into a fresh application; returns its folder. */
const setUp = (dir: string) => {
  const { commands, tsconfig } = readInstall()
  const packed = child.execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"]
  }).trim().split("\n").pop()!
  const tarball = path.join(dir, packed)
  const app = path.join(dir, "app")
  fs.mkdirSync(app)
  fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ type: "module", private: true }, null, 2))
  fs.writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify(tsconfig, null, 2))
  for (const words of commands) {
    npmInstall(app, words.slice(1).map((word) => (word === "effect-outbox" ? tarball : word)))
  }
  for (const forbidden of ["amqplib", "@effect/sql-mysql2", "@opentelemetry/api", "@effect/opentelemetry"]) {
    check(
      !fs.existsSync(path.join(app, "node_modules", forbidden)),
      `the README's install lines brought the optional peer ${forbidden}: the check would not see it missing`
    )
  }
  copyExamples(app, core)
  return app
}

/** Copies example files into the application's sources (the first folder its tsconfig includes). */
const copyExamples = (app: string, files: ReadonlyArray<string>) => {
  const { include } = JSON.parse(fs.readFileSync(path.join(app, "tsconfig.json"), "utf8")) as {
    readonly include?: ReadonlyArray<string>
  }
  for (const file of files) {
    const target = path.join(app, include?.[0] ?? "src", file)
    fs.mkdirSync(path.dirname(target), { recursive: true })
    fs.copyFileSync(path.join(root, "examples", file), target)
  }
}

const tsc = (app: string, args: ReadonlyArray<string>, what: string) => {
  const result = run(path.join(app, "node_modules/.bin/tsc"), ["-p", ".", ...args], { cwd: app })
  check(
    result.status === 0,
    `${what} do not compile against the installed package under the README's tsconfig:\n${result.stdout}${result.stderr}`
  )
}

/** A database of its own on the server, dropped at the end. */
const withDatabase = async (use: (url: string) => Promise<void>) => {
  const embedded = process.env.DATABASE_URL === undefined ? await EmbeddedPostgres.start() : undefined
  const serverUrl = new URL(process.env.DATABASE_URL ?? embedded!.url)
  const database = `effect_outbox_packed_${process.pid}`
  const admin = new pg.Client({ connectionString: serverUrl.href })
  await admin.connect()
  try {
    await admin.query(`CREATE DATABASE ${database}`)
    await use(Object.assign(new URL(serverUrl.href), { pathname: `/${database}` }).href)
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined)
    await admin.end().catch(() => undefined)
    await embedded?.stop()
  }
}

/** The installed binary and the compiled application, against the database. */
const runInstalled = (app: string, url: string) => {
  const env = { DATABASE_URL: url }
  const outbox = (...args: ReadonlyArray<string>) => {
    const result = run(path.join(app, "node_modules/.bin/outbox"), args, { cwd: app, env })
    return { ...result, shown: `$ outbox ${args.join(" ")} (exit ${result.status})\n${result.stdout}${result.stderr}` }
  }

  const help = outbox("--help")
  check(help.status === 0 && help.stdout.includes("setup-transports") && help.stderr === "", help.shown)
  const wide = help.stdout.split("\n").filter((line) => line.length > 100)
  check(wide.length === 0, `--help has lines wider than 100 columns:\n${wide.join("\n")}`)
  const version = outbox("--version")
  check(version.status === 0 && version.stdout.trim() === manifest.version, version.shown)
  console.log(`✔ packed: outbox --help and --version run from the installed package (${seconds()})`)

  const early = outbox("stats")
  check(
    early.status === 1 && early.stdout === "" &&
      /^error: The outbox table messenger_messages is not set up \(.*\): run `outbox setup-transports`.*--table/
        .test(early.stderr) &&
      early.stderr.trim().split("\n").length === 1,
    `stats before setup-transports should say in one line what to run:\n${early.shown}`
  )
  const setup = outbox("setup-transports")
  check(
    setup.status === 0 && setup.stdout.includes(`[OK] The "outbox" transport was set up successfully.`),
    setup.shown
  )
  const consume = outbox("consume", "outbox")
  check(
    consume.status === 1 && consume.stderr.includes("Cli.make({ handlers })"),
    `consume on the bare binary should say where consuming is:\n${consume.shown}`
  )

  const program = run(process.execPath, ["build/packed/app.js"], { cwd: app, env })
  check(
    program.status === 0 && program.stdout.trim().split("\n").pop() === `{"handled":2,"failed":1}`,
    `the application (dispatch + worker) from the installed package:\n${program.stdout}${program.stderr}`
  )
  console.log(`✔ packed: setup-transports, then an application's dispatch and worker, from the installed package`)

  const stats = outbox("stats", "--format", "json")
  check(stats.status === 0, stats.shown)
  const counts = JSON.parse(stats.stdout) as {
    transports: Record<string, { ready: number; failed: number | null }>
  }
  check(counts.transports.outbox?.ready === 0 && counts.transports.outbox.failed === 1, stats.shown)
  const failed = outbox("failed:show")
  check(
    failed.status === 0 && failed.stdout.includes("a greeting to nobody") && failed.stdout.includes("Greeted"),
    failed.shown
  )
  console.log(`✔ packed: stats and failed:show see what the worker left (${seconds()})`)
}

const main = async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-outbox-packed-"))
  try {
    const app = setUp(dir)
    console.log(`✔ packed: npm pack and the README's install lines in an empty folder (${seconds()})`)
    tsc(app, ["--outDir", "build"], `${core.join(", ")}`)
    console.log(`✔ packed: ${core.length} example files compile under the README's tsconfig (${seconds()})`)
    await withDatabase(async (url) => runInstalled(app, url))
    npmInstall(app, [
      "install",
      "--save-exact",
      ...optionalPeers.map((name) => `${name}@${manifest.devDependencies[name]}`)
    ])
    copyExamples(app, optional)
    tsc(app, ["--noEmit"], "the examples")
    console.log(
      `✔ packed: with ${optionalPeers.join(", ")}, all ${
        core.length + optional.length
      } example files compile (${seconds()})`
    )
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof CheckFailure ? `✘ packed: ${error.message}` : error)
  process.exit(1)
})
