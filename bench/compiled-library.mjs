/**
 * Runs the library as it ships: `node --import tsx --import ./bench/compiled-library.mjs …` resolves every import
 * of `src/**\/*.ts` to the tsc-compiled `dist/**\/*.js` (built by `npm run build`) when that file exists. Running
 * the TypeScript sources through tsx is not what users run: its esbuild transform keeps function names by
 * wrapping every named closure in a `__name(…)` call (a property definition per closure created), which costs
 * allocation and time on the worker's hot path that the published JavaScript does not have. The contenders
 * from npm run their published JavaScript too. Child processes inherit the flag (see `tsNodeArgs`).
 */
import { register } from "node:module"

register("./compiled-library-hooks.mjs", import.meta.url)
