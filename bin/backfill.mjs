#!/usr/bin/env node
// `npx backfill …`: the compiled CLI (dist/, which `npm run build` makes and `npm install` runs), loaded into this
// process rather than spawned, so a start costs one Node and a Ctrl-C or a SIGTERM reaches the CLI itself.
import { existsSync } from 'node:fs';

const main = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(main)) {
  console.error('The backfill CLI is not built yet (there is no dist/ in this checkout): run npm run build, then run the command again.');
  process.exit(1);
}
// What `node --enable-source-maps` does, for the modules loaded from here on: a stack names src/*.ts lines, not dist's.
process.setSourceMapsEnabled(true);
await import(main.href);
