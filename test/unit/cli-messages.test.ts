/**
 * The command line's messages that need no database: a missing optional peer named with the line that installs it
 * (at the versions this repository tests), the nearest option or command to a typo, where options before the
 * command go, and the dashboard's header in each mode.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fs from "node:fs"
import * as Cli from "../../src/programs/Cli.js"
import * as Argv from "../../src/programs/cli/argv.js"
import * as Optional from "../../src/programs/cli/optional.js"
import { html } from "../../src/programs/dashboard/html.js"
import { layout, modeBanner } from "../../src/programs/dashboard/views.js"

const manifest = JSON.parse(fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
  readonly devDependencies: Record<string, string>
  readonly peerDependencies: Record<string, string>
  readonly peerDependenciesMeta: Record<string, { readonly optional?: boolean }>
}

describe("optional peers", () => {
  it("each install line names an optional peer at the version this repository tests", () => {
    for (const peers of [Optional.amqp, Optional.mysql, Optional.metrics]) {
      for (const spec of peers.packages) {
        const at = spec.lastIndexOf("@")
        const [name, version] = [spec.slice(0, at), spec.slice(at + 1)]
        expect(manifest.devDependencies[name], spec).toBe(version)
        if (name in manifest.peerDependencies) expect(manifest.peerDependenciesMeta[name]?.optional, spec).toBe(true)
      }
    }
  })

  it.effect("a missing one: which feature needs which package, and the line that installs it", () =>
    Effect.gen(function*() {
      const missing = "effect-outbox-no-such-package"
      const peers = { feature: "The test feature", packages: ["nope@1.2.3", "other@4.5.6"] }
      const error = yield* Effect.flip(Optional.load(peers, () => import(missing)))
      expect(error.message).toBe(
        `The test feature needs the package ${missing}, which is not installed: ` +
          "npm install --save-exact nope@1.2.3 other@4.5.6"
      )
      const broken = yield* Effect.flip(Optional.load(peers, () => Promise.reject(new Error("boom"))))
      expect(broken.message).toBe(
        "The test feature: cannot load its module (boom); it needs npm install --save-exact nope@1.2.3 other@4.5.6"
      )
    }))
})

describe("the command line as given", () => {
  const tree = Argv.treeOf(Cli.make())
  const prepare = (...args: ReadonlyArray<string>) => Either.getOrElse(Argv.prepare(tree, args), (error) => error)

  it("options before the command follow it; the built-in ones stay where they are", () => {
    expect(prepare("--dsn", "postgres://x", "--table=t", "stats", "outbox")).toEqual([
      "stats",
      "--dsn",
      "postgres://x",
      "--table=t",
      "outbox"
    ])
    expect(prepare("--log-level", "debug", "--dsn", "u", "stats")).toEqual([
      "--log-level",
      "debug",
      "stats",
      "--dsn",
      "u"
    ])
    expect(prepare("--version")).toEqual(["--version"])
    expect(prepare("--dsn", "postgres://x")).toBe(
      "--dsn goes with a command, and none is given: `outbox <command> --dsn …` (`outbox --help` lists the commands)"
    )
    expect(prepare("stats", "--", "--fromat")).toEqual(["stats", "--", "--fromat"])
  })

  it("a typo gets the nearest option or command; one far from all gets none", () => {
    expect(Argv.nearest("--fromat", ["--format", "--dsn", "--table"])).toBe("--format")
    expect(Argv.nearest("--tabel", ["--format", "--dsn", "--table"])).toBe("--table")
    expect(Argv.nearest("--zzzzzz", ["--format", "--dsn", "--table"])).toBeUndefined()
    expect(prepare("failed:show", "--verbos")).toBe(
      "Unknown option --verbos for failed:show (did you mean --verbose?): `outbox failed:show --help` lists its options"
    )
    expect(prepare("--fromat", "json")).toBe(
      "Unknown option --fromat: `outbox --help` lists the commands, and each its options"
    )
    expect(prepare("failed:shwo")).toMatch(/^Unknown command "failed:shwo" \(did you mean failed:show\?\)/)
  })
})

describe("dashboard header", () => {
  it("says read-only without a token, and that the actions are on (asking for it) with one", () => {
    expect(modeBanner({ base: "", readOnly: true })).toBe("read-only: no operator token is configured")
    expect(modeBanner({ base: "", readOnly: false })).toBe(
      "retry and remove enabled: each asks for the operator token"
    )
    const page = layout({ base: "", readOnly: false }, "Overview", html`<p>counts</p>`).toString()
    expect(page).toContain(`<span class="mode">retry and remove enabled: each asks for the operator token</span>`)
  })
})
