import { fileURLToPath } from "node:url"
import { configDefaults, defineConfig } from "vitest/config"
import { ensureKafkaClient } from "./test/kafka-client/install.js"

/**
 * Tests that start nothing (no PostgreSQL, no RabbitMQ, no child process): the `unit` project, which has no
 * global setup. Every other test file belongs to the `integration` project, whose global setup boots the embedded
 * PostgreSQL and finds or starts a RabbitMQ broker (test/support/global-setup.ts).
 *
 * Vitest runs the global setup of a project only when the run holds at least one of its files (and always the root
 * config's, which is why the root config has none): `vitest run --project unit` and `vitest run test/domain.test.ts`
 * start no server.
 */
const unit = [
  "test/domain.test.ts",
  "test/memory-layers.test.ts",
  "test/idempotency-memory.test.ts",
  "test/transport-router.test.ts",
  "test/outcome.test.ts",
  "test/unit/**/*.test.ts",
  "examples/**/*.test.ts"
]

// The Kafka client is installed apart; every vitest run (a single file too) finds it linked.
ensureKafkaClient()

/** `effect-outbox` imports (the examples') resolve to the sources, as tsconfig's `paths` do for `tsc`. */
const alias = [
  { find: /^effect-outbox$/, replacement: fileURLToPath(new URL("src/index.ts", import.meta.url)) },
  { find: /^effect-outbox\/Cli$/, replacement: fileURLToPath(new URL("src/programs/Cli.ts", import.meta.url)) },
  {
    find: /^effect-outbox\/Dashboard$/,
    replacement: fileURLToPath(new URL("src/programs/dashboard/Dashboard.ts", import.meta.url))
  }
]

export default defineConfig({
  resolve: { alias },
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    fileParallelism: true,
    maxWorkers: 2,
    minWorkers: 1,
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: unit
        }
      },
      {
        extends: true,
        test: {
          name: "integration",
          include: ["test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, ...unit],
          globalSetup: ["test/support/global-setup.ts"]
        }
      }
    ]
  }
})
