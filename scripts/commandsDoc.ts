import type { Rule } from '../src/core/authorization.js';
import { MAX_REASON_LENGTH } from '../src/commands/schemas.js';
import { COMMANDS, usageOf, type CommandSpec, type Surface } from '../src/commands/table.js';

// docs/commands.md lists every command from the command table itself (src/commands/table.ts), so the page
// cannot say a command takes other words, or another rule, than the slash command and the CLI apply. The page's
// prose is written by hand around the tables; the lines between its two markers are made here, and
// test/docs.test.ts fails when they differ from what this makes.

export const BEGIN = '<!-- commands:begin: made by `npm run docs:commands` from src/commands/table.ts; change the table, not these lines -->';
export const END = '<!-- commands:end -->';

/** Who may run a command under each rule, as the page says it (the refusal's own words are in the core). */
const WHO: Record<Rule, string> = { anyone: 'anyone', operator: 'operators', owner: 'the owner or a delegate', signer: "the report's signers" };

/** A table cell: GitHub's tables split on `|` even inside code, so it is escaped. */
const cell = (text: string) => text.replaceAll('|', '\\|');

function row(command: CommandSpec, surface: Surface): string {
  const usage = surface === 'slack' ? usageOf(command, surface) : `backfill ${usageOf(command, surface)}`;
  const example = surface === 'slack' && command.example ? `, e.g. \`/backfill ${command.example}\`` : '';
  return `| \`${cell(usage)}\` | ${WHO[command.rule]} | ${cell(command.does)}${cell(example)} |`;
}

function table(surface: Surface): string[] {
  // `help` is no entry of the table: both front ends answer it (and nothing at all) with their list.
  const help = surface === 'slack' ? '/backfill help' : 'backfill help';
  return [
    '| command | who may | what it does |',
    '| --- | --- | --- |',
    ...COMMANDS.filter((command) => command.surfaces.includes(surface)).map((command) => row(command, surface)),
    `| \`${help}\` | anyone | this list, with who may run each command |`,
  ];
}

/** The lines between the markers: the slash command's table, the CLI's, and the limit both put on a reason. */
export function commandTables(): string {
  return [
    BEGIN,
    '',
    '### `/backfill`, in Slack',
    '',
    ...table('slack'),
    '',
    '### `backfill`, the CLI',
    '',
    'Every command also takes `--as <Slack user id> --reason "<why>"` (below).',
    '',
    ...table('cli'),
    '',
    `A reason (a command's own, \`--reason\` or \`--override-limit\`) is at most ${MAX_REASON_LENGTH} characters on both front ends.`,
    '',
    END,
  ].join('\n');
}

/** The page with its tables made again from the command table; refused when its markers are not there once each, in order. */
export function withCommandTables(page: string): string {
  const begin = page.indexOf(BEGIN);
  const end = page.indexOf(END);
  if (begin < 0 || end < begin || page.indexOf(BEGIN, begin + 1) >= 0 || page.indexOf(END, end + 1) >= 0) {
    throw new Error(`docs/commands.md must hold the markers ${BEGIN} and ${END}, once each and in that order`);
  }
  return `${page.slice(0, begin)}${commandTables()}${page.slice(end + END.length)}`;
}
