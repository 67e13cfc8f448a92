// npm run docs:commands [-- --check]: makes docs/commands.md's tables of commands again from the command table
// (scripts/commandsDoc.ts). With --check it changes nothing and exits 1 when the page differs, saying how to fix it.

import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { withCommandTables } from './commandsDoc.js';

const COMMANDS_PAGE = fileURLToPath(new URL('../docs/commands.md', import.meta.url));

const page = readFileSync(COMMANDS_PAGE, 'utf8');
const made = withCommandTables(page);
if (process.argv.includes('--check')) {
  if (made !== page) {
    console.error('docs/commands.md differs from the command table (src/commands/table.ts): run `npm run docs:commands`');
    process.exit(1);
  }
} else if (made !== page) {
  writeFileSync(COMMANDS_PAGE, made);
  console.log('docs/commands.md: the tables of commands made again from src/commands/table.ts');
} else {
  console.log('docs/commands.md is up to date');
}
