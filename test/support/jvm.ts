/**
 * What the tests' Java servers (the Kafka broker, Kafka Connect) share: Java and Maven on PATH, classpaths resolved
 * by Maven into a staging folder, commands run in a process group of their own, and a server JVM that lives in one
 * temporary folder — its configuration, log and temporary files — tracked by support/leftovers.ts from its first
 * start, so it goes when the test process ends, however it ends.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { ensurePackage } from "./debian.js"
import { alive, sleep, track } from "./leftovers.js"

/** Whether an executable named `name` is on PATH. */
export const onPath = (name: string): boolean =>
  (process.env.PATH ?? "").split(path.delimiter).some((dir) => {
    try {
      fs.accessSync(path.join(dir, name), fs.constants.X_OK)
      return true
    } catch {
      return false
    }
  })

/** Java and Maven, installed from Debian when missing and we are root (Debian's maven brings Java 17). */
export const ensureJavaAndMaven = (): void => {
  if (onPath("java") && onPath("mvn")) return
  const hint = "the Kafka and CDC tests need Java 17 or later (java) and Maven (mvn) on PATH: apt-get install maven " +
    "openjdk-17-jre-headless, or set KAFKA_BOOTSTRAP (and KAFKA_CONNECT_URL) to servers of yours"
  ensurePackage("maven", ["/usr/bin/java", "/usr/bin/mvn"], hint)
  const missing = ["java", "mvn"].filter((name) => !onPath(name))
  if (missing.length > 0) throw new Error(`${missing.join(" and ")} not found: ${hint}`)
}

/** Runs a command in a process group of its own, tracked until it exits; rejects with its output's tail. */
export const run = async (
  label: string,
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly output: string; readonly env?: NodeJS.ProcessEnv }
): Promise<void> => {
  const out = fs.openSync(options.output, "a")
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ["ignore", out, out],
    detached: true
  })
  fs.closeSync(out)
  const tracked = child.pid === undefined
    ? undefined
    : track({ label, processes: [{ pid: child.pid, group: true }], dirs: [] })
  try {
    const code = await new Promise<number | string>((resolve, reject) => {
      child.once("error", reject)
      child.once("exit", (code, signal) => resolve(code ?? signal ?? "?"))
    })
    if (code !== 0) {
      const tail = fs.readFileSync(options.output, "utf8").split("\n").slice(-30).join("\n")
      throw new Error(`${label} failed (${code}):\n${tail}`)
    }
  } finally {
    tracked?.release()
  }
}

/** A pom whose only purpose is its dependencies, for `mvn dependency:copy-dependencies`. */
export const pom = (artifact: string, dependencies: ReadonlyArray<readonly [string, string, string]>): string =>
  `<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local</groupId>
  <artifactId>${artifact}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
${
    dependencies.map(([group, name, version]) =>
      `    <dependency>\n      <groupId>${group}</groupId>\n      <artifactId>${name}</artifactId>\n` +
      `      <version>${version}</version>\n    </dependency>`
    ).join("\n")
  }
  </dependencies>
</project>
`

/** Removes the staging folders under `parent` whose resolving process is gone (`resolve-<pid>-…`). */
export const sweepStaging = (parent: string): void => {
  fs.mkdirSync(parent, { recursive: true })
  for (const name of fs.readdirSync(parent)) {
    const owner = /^resolve-(\d+)-/.exec(name)
    if (owner !== null && !alive(Number(owner[1]))) fs.rmSync(path.join(parent, name), { recursive: true, force: true })
  }
}

/** Copies the runtime dependencies of `pomText` into `outputDirectory` with Maven, working in `dir`. */
export const copyDependencies = (label: string, dir: string, pomText: string, outputDirectory: string) => {
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(path.join(dir, "pom.xml"), pomText)
  return run(label, "nice", [
    "-n",
    "19",
    "mvn",
    "-q",
    "-B",
    "dependency:copy-dependencies",
    `-DoutputDirectory=${outputDirectory}`,
    "-DincludeScope=runtime"
  ], {
    cwd: dir,
    output: path.join(dir, "mvn.log"),
    // No hsperfdata file in /tmp, which a killed Maven would leave.
    env: { ...process.env, MAVEN_OPTS: `${process.env.MAVEN_OPTS ?? ""} -XX:-UsePerfData`.trim() }
  })
}

const readFrom = (file: string, from: number): string => {
  const fd = fs.openSync(file, "r")
  try {
    const size = fs.fstatSync(fd).size
    const buffer = Buffer.alloc(Math.max(0, size - from))
    fs.readSync(fd, buffer, 0, buffer.length, from)
    return buffer.toString("utf8")
  } finally {
    fs.closeSync(fd)
  }
}

/** What `file` got after byte `from` (a start's own lines), or "" when it cannot be read. */
export const logSince = (file: string, from: number): string => {
  try {
    return readFrom(file, from)
  } catch {
    return ""
  }
}

/** The last `lines` lines `file` got after byte `from`, for error messages. */
export const tail = (file: string, from: number, lines = 30): string => {
  try {
    return readFrom(file, from).split("\n").slice(-lines).join("\n")
  } catch {
    return "(no log)"
  }
}

/** Whether a TCP connection to 127.0.0.1:`port` succeeds (closed at once). */
export const accepts = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port })
    const done = (ok: boolean) => {
      socket.destroy()
      resolve(ok)
    }
    socket.setTimeout(1000, () => done(false))
    socket.once("connect", () => done(true))
    socket.once("error", () => done(false))
  })

/** What a test does with a server it started: its folder, its pid, and its life (the data stays across restarts). */
export interface RunningServer {
  /** The server's folder (configuration, data, log). */
  readonly dir: string
  /** The JVM's pid while it runs. */
  readonly pid: () => number | undefined
  /** Stops it cleanly (SIGTERM), keeping its data; resolves when the process is gone. */
  readonly stop: () => Promise<void>
  /** Starts it again on the same ports and data; resolves when it is ready. */
  readonly start: () => Promise<void>
  /** Kills it (SIGKILL), keeping its data; resolves when the process is gone. */
  readonly kill: () => Promise<void>
  /** Kills it and removes its folder. */
  readonly destroy: () => Promise<void>
}

/** A server JVM of the tests (see `jvmServer`). */
export interface JvmServer {
  /** The JVM options of a java command in the server's folder, with this heap (another tool run there too). */
  readonly javaOptions: (heap: ReadonlyArray<string>) => Array<string>
  readonly pid: () => number | undefined
  /** Starts the server unless it runs, and waits until `ready` holds; rejects with its log's tail. */
  readonly launch: () => Promise<void>
  /** Sends `signal` to its process group and waits until it is gone (SIGKILL after 60 s for another signal). */
  readonly halt: (signal: NodeJS.Signals) => Promise<void>
  /** Kills it and removes its folder. */
  readonly destroy: () => Promise<void>
}

/**
 * A server JVM living in `dir` (tracked under `label` from now on): `log4j` is its logging configuration, its
 * output goes to `log`; `main` is its main class and arguments, run on the jars of `lib`. It is ready when
 * `ready(from)` holds, `from` the log's size when this start began.
 */
export const jvmServer = (options: {
  readonly label: string
  readonly what: string
  readonly dir: string
  readonly lib: string
  readonly log: string
  readonly log4j: string
  readonly heap: ReadonlyArray<string>
  readonly main: ReadonlyArray<string>
  readonly timeoutMs: number
  readonly ready: (from: number) => Promise<boolean>
}): JvmServer => {
  const { dir, log, what } = options
  let child: { readonly process: ChildProcess; exited: boolean } | undefined
  const leftover = (pids: ReadonlyArray<number>) => ({
    label: options.label,
    processes: pids.map((pid) => ({ pid, group: true })),
    dirs: [dir]
  })
  const tracked = track(leftover([]))
  const javaTmp = path.join(dir, "tmp")
  const logConfig = path.join(dir, "log4j2.properties")
  fs.mkdirSync(javaTmp, { recursive: true })
  fs.writeFileSync(logConfig, options.log4j)
  // The JVM's own files stay in the folder: native libraries unpacked by the compression codecs (java.io.tmpdir),
  // and no hsperfdata file in /tmp, which a killed JVM would leave.
  const javaOptions = (heap: ReadonlyArray<string>) => [
    ...heap,
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    `-Djava.io.tmpdir=${javaTmp}`,
    `-Dlog4j2.configurationFile=${logConfig}`,
    "-cp",
    path.join(options.lib, "*")
  ]

  const launch = async () => {
    if (child !== undefined && !child.exited) return
    const from = fs.existsSync(log) ? fs.statSync(log).size : 0
    const out = fs.openSync(log, "a")
    // `nice` executes java: the pid is the JVM's, and it leads its own group.
    const spawned = spawn("nice", ["-n", "10", "java", ...javaOptions(options.heap), ...options.main], {
      cwd: dir,
      stdio: ["ignore", out, out],
      detached: true
    })
    fs.closeSync(out)
    spawned.unref()
    spawned.once("error", () => undefined)
    const current = { process: spawned, exited: false }
    spawned.once("exit", () => {
      current.exited = true
    })
    child = current
    tracked.update(leftover(spawned.pid === undefined ? [] : [spawned.pid]))
    const deadline = Date.now() + options.timeoutMs
    while (Date.now() < deadline) {
      if (current.exited) throw new Error(`${what} exited while starting:\n${tail(log, from)}`)
      if (await options.ready(from)) return
      await sleep(200)
    }
    throw new Error(`${what} was not ready within ${options.timeoutMs} ms:\n${tail(log, from)}`)
  }

  const halt = async (signal: NodeJS.Signals): Promise<void> => {
    const current = child
    if (current === undefined || current.exited || current.process.pid === undefined) return
    try {
      process.kill(-current.process.pid, signal)
    } catch {
      // gone already
    }
    // Polled, not awaited on the exit event alone: the child is unref'ed, and a timer keeps this process waiting.
    const deadline = Date.now() + 60_000
    while (!current.exited) {
      if (signal !== "SIGKILL" && Date.now() > deadline) return halt("SIGKILL")
      await sleep(50)
    }
  }

  const destroy = async () => {
    await halt("SIGKILL")
    fs.rmSync(dir, { recursive: true, force: true })
    tracked.release()
  }

  return {
    javaOptions,
    pid: () => (child === undefined || child.exited ? undefined : child.process.pid),
    launch,
    halt,
    destroy
  }
}
