import type { TestProject } from "vitest/node"
import * as EmbeddedPostgres from "../../src/programs/EmbeddedPostgres.js"

declare module "vitest" {
  export interface ProvidedContext {
    adminDatabaseUrl: string
  }
}

/** Starts one PostgreSQL cluster for the whole run, unless DATABASE_URL names one. */
export default async function setup(project: TestProject) {
  const fromEnv = process.env.DATABASE_URL
  if (fromEnv !== undefined && fromEnv !== "") {
    project.provide("adminDatabaseUrl", fromEnv)
    return
  }
  const pg = await EmbeddedPostgres.start()
  project.provide("adminDatabaseUrl", pg.url)
  return async () => {
    await pg.stop()
  }
}
