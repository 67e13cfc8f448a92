import type { z } from 'zod';
import type { Rule } from '../core/authorization.js';
import { SCHEMAS, type Command } from './schemas.js';

// Every command a person can give, once: its name, its arguments (as a zod schema), who may run it
// (src/core/authorization.ts), what it does, and where it is offered. Both front ends parse by its schemas and
// authorize by its rules, and the slash command's help and the CLI's usage are made from it, so the two cannot
// drift apart.

export type Surface = 'slack' | 'cli';

export interface CommandSpec {
  name: string;
  /** The arguments after the name, as a person writes them on the slash command (or everywhere). */
  args: string;
  /** The CLI's form, where its flags differ from the slash command's words. */
  cliArgs?: string;
  /** The words after the name, checked and turned into a typed command (src/commands/schemas.ts). */
  schema: z.ZodType<Command, unknown>;
  /** What it does, in one line. */
  does: string;
  rule: Rule;
  /** What the rule's refusal says the person cannot do ("start a backfill"). */
  action: string;
  surfaces: readonly Surface[];
  /** One example, shown in the slash command's help. */
  example?: string;
}

const BOTH = ['slack', 'cli'] as const;

export const COMMANDS: readonly CommandSpec[] = [
  { name: 'plan', schema: SCHEMAS.plan, args: '<pipeline> <night|from..to> [reason]', does: 'dry run: partitions, readers, signed figures, watermark move; frozen as a plan id',
    rule: 'operator', action: 'plan a backfill', surfaces: BOTH, example: 'plan orders 2026-11-15' },
  { name: 'start', schema: SCHEMAS.start, args: '<pipeline> <night|from..to> <reason>  |  start plan <plan-id> <reason>',
    cliArgs: '<pipeline> <night|from..to> <reason> [--plan <id>] [--override-limit "<why>"] [--wait]',
    does: 'create the backfill, capture the before-total, announce to the owners', rule: 'operator', action: 'start a backfill', surfaces: BOTH,
    example: 'start orders 2026-11-15 currency parsed as text' },
  { name: 'ack', schema: SCHEMAS.ack, args: '<id> [--consumer <name>] [--wait]', does: 'acknowledge as the owner (Slack: the Acknowledge button in the DM)',
    rule: 'owner', action: 'acknowledge', surfaces: ['cli'] },
  { name: 'hold', schema: SCHEMAS.hold, args: '<id> [--consumer <name>] [reason]', does: 'ask the backfill to wait, as the owner (Slack: the Hold button)',
    rule: 'owner', action: 'hold', surfaces: ['cli'] },
  { name: 'override', schema: SCHEMAS.override, args: '<id> <reason>', cliArgs: '<id> <reason> [--wait]', does: 'proceed without the missing acknowledgements',
    rule: 'operator', action: 'override an acknowledgement', surfaces: BOTH },
  { name: 'cancel', schema: SCHEMAS.cancel, args: '<id> [reason]', does: 'stop a backfill that has not started running', rule: 'operator', action: 'cancel a backfill', surfaces: BOTH },
  { name: 'approve', schema: SCHEMAS.approve, args: '<id>', does: "the second operator's approval of a backfill above the capacity limit",
    rule: 'operator', action: 'approve a large backfill', surfaces: BOTH },
  { name: 'stop', schema: SCHEMAS.stop, args: '<id> <reason>', does: 'fence it: queued jobs removed, no write of it commits any more', rule: 'operator', action: 'stop a backfill', surfaces: BOTH },
  { name: 'continue', schema: SCHEMAS.continue, args: '<id> [partition hours] <reason>', does: 'accept the difference that paused a canary or wave',
    rule: 'operator', action: 'continue a paused backfill', surfaces: BOTH },
  { name: 'rollback', schema: SCHEMAS.rollback, args: '<id> [reason]', does: 'restore the rows it replaced; the consumers replay', rule: 'operator', action: 'roll back a backfill', surfaces: BOTH },
  { name: 'status', schema: SCHEMAS.status, args: '[id]', does: 'one backfill, or the recent ones', rule: 'anyone', action: 'see a status', surfaces: BOTH },
  { name: 'log', schema: SCHEMAS.log, args: '<id>', cliArgs: '[id]', does: 'the incident package (Slack: in the incident thread); CLI: the backfill log, or one diff and timeline',
    rule: 'anyone', action: 'read the log', surfaces: BOTH },
  { name: 'paid-against', schema: SCHEMAS['paid-against'], args: '[report] <YYYY-MM-DD>', does: 'the signed figure, every correction since, and the current one',
    rule: 'anyone', action: 'ask what was paid against', surfaces: BOTH, example: 'paid-against settlement_report 2026-11-15' },
  { name: 'sign', schema: SCHEMAS.sign, args: '<report> <YYYY-MM-DD>', does: "sign the report's current total (its signers only)", rule: 'signer', action: 'sign a report', surfaces: BOTH },
  { name: 'lineage', schema: SCHEMAS.lineage, args: 'list  |  lineage confirm <id> as <consumer> [reads <N>h-to-watermark]  |  lineage confirm <id> <owner U…> report|export|model [name] [reads <N>h-to-watermark]  |  lineage reject <id> [reason]',
    does: 'decide a proposal for an unknown OpenLineage job: map it to a consumer, register it as one, or reject it (`reads`: the hours its runs that name none read)',
    rule: 'operator', action: 'confirm lineage', surfaces: BOTH, example: 'lineage confirm 1 U07SETTLE report finance_daily reads 24h-to-watermark' },
  { name: 'signer', schema: SCHEMAS.signer, args: 'add|remove <report> <user>  |  signer list [report]', does: 'who may sign which report',
    rule: 'operator', action: 'change who may sign', surfaces: ['cli'] },
  { name: 'delegate', schema: SCHEMAS.delegate, args: 'add|remove <owner> <user>  |  delegate list', does: 'who may acknowledge or hold for an owner',
    rule: 'operator', action: 'change delegates', surfaces: ['cli'] },
  { name: 'export', schema: SCHEMAS.export, args: '<id> [--format md|json] [--out <file>]', does: 'the incident package: the log row and the whole timeline',
    rule: 'anyone', action: 'export the incident package', surfaces: ['cli'] },
  { name: 'costs', schema: SCHEMAS.costs, args: '<YYYY-MM-DD>', cliArgs: '--since <YYYY-MM-DD>',
    does: 'what backfills cost per pipeline and quarter: rows, partitions, replays, people told, ack wait, compute, signed figures moved',
    rule: 'anyone', action: 'see what backfills cost', surfaces: ['cli'] },
  { name: 'retention', schema: SCHEMAS.retention, args: '[id] [--prune]', does: 'stored rows past RETENTION_DAYS (--prune drops them: operators)',
    rule: 'anyone', action: 'see retention', surfaces: ['cli'] },
  { name: 'tick', schema: SCHEMAS.tick, args: '<pipeline> [--until <hour>]', does: 'the normal run: process the hours after the watermark', rule: 'operator', action: 'run a tick', surfaces: ['cli'] },
  { name: 'worker', schema: SCHEMAS.worker, args: '', does: 'run the step workers until interrupted', rule: 'operator', action: 'run the workers', surfaces: ['cli'] },
  { name: 'catalog', schema: SCHEMAS.catalog, args: 'plan|apply <file.yml>', does: 'the catalog as code: plan shows what the file adds, changes and removes; apply makes it so, in one transaction',
    rule: 'operator', action: 'change the catalog', surfaces: ['cli'] },
  { name: 'migrate', schema: SCHEMAS.migrate, args: '[--create]', does: 'apply database migrations (--create: create the database first)', rule: 'operator', action: 'migrate the database', surfaces: ['cli'] },
];

export function findCommand(name: string, surface: Surface): CommandSpec | undefined {
  return COMMANDS.find((command) => command.name === name && command.surfaces.includes(surface));
}

/** The usage line of a command on a surface: `/backfill stop <id> <reason>` or `stop <id> <reason>`. */
export function usageOf(command: CommandSpec, surface: Surface): string {
  const args = surface === 'cli' ? (command.cliArgs ?? command.args) : command.args;
  return `${surface === 'slack' ? '/backfill ' : ''}${command.name}${args ? ` ${args}` : ''}`;
}

const RULE_NOTE: Record<Rule, string> = { anyone: '', operator: ' (operators)', owner: ' (the owner or a delegate)', signer: " (the report's signers)" };

/** The slash command's help, in Slack's markup. */
export function slackHelp(): string {
  return [
    '*/backfill* runs a safe backfill: announced to the readers first, run only after their owners acknowledge.',
    ...COMMANDS.filter((c) => c.surfaces.includes('slack')).map((c) =>
      `\`${usageOf(c, 'slack')}\`: ${c.does}${RULE_NOTE[c.rule]}${c.example ? `, e.g. \`/backfill ${c.example}\`` : ''}`),
    'Owners acknowledge or hold with the buttons in the announcement they are sent. Ranges are UTC and include both ends: `2026-11-15T05:00..2026-11-15T10:00`.',
  ].join('\n');
}

/** The CLI's usage text. */
export function cliUsage(): string {
  const lines = COMMANDS.filter((c) => c.surfaces.includes('cli')).map((c) => {
    const usage = `  ${usageOf(c, 'cli')}`;
    return usage.length < 48 ? `${usage.padEnd(48)}${c.does}${RULE_NOTE[c.rule]}` : `${usage}\n${' '.repeat(48)}${c.does}${RULE_NOTE[c.rule]}`;
  });
  return [
    'backfill <command> [arguments] [--as <slack user> --reason "<why>"]',
    '',
    ...lines,
    '',
    'A night is YYYY-MM-DD; a range is 2026-11-15T05:00..2026-11-15T10:00 (UTC, both ends included).',
    '--wait runs the steps in this process until the backfill settles (no separate worker needed).',
    'Every event records who ran the command (cli:<os user>@<host>). --as <U…> acts on behalf of that Slack user',
    '(an owner who cannot acknowledge, say), with their rights only: only for operators (BACKFILL_CLI_OPERATORS;',
    'empty: every CLI user), only with --reason, which the timeline keeps beside both names, and operators\' commands',
    'only for a person BACKFILL_OPERATORS or BACKFILL_CLI_OPERATORS (dana=U07DANA) names.',
  ].join('\n');
}
