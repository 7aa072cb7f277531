#!/usr/bin/env node
// The `outbox` command of the published package (built into dist/ by `npm run build`).
import "../dist/programs/outbox-main.js"
