import { parseCommand, type Command } from '../commands/arguments.js';
import { BackfillError, ErrorCode } from '../errors.js';

/** The kinds a slash command parses to: the table's Slack commands, with help and start's plan form (test/commands.test.ts keeps them equal). */
export const SLACK_KINDS = ['help', 'plan', 'start', 'start-plan', 'approve', 'stop', 'continue', 'rollback', 'status', 'override', 'cancel', 'paid-against', 'sign', 'log', 'lineage'] as const;

/** A /backfill invocation, parsed and checked before anything runs: the commands the slash command offers. */
export type BackfillCommand = Extract<Command, { kind: (typeof SLACK_KINDS)[number] }>;

function offeredOnSlack(command: Command): command is BackfillCommand {
  return (SLACK_KINDS as readonly string[]).includes(command.kind);
}

/** The slash command's text, parsed by the schemas every surface shares (src/commands/arguments.ts). */
export function parseBackfillCommand(text: string): BackfillCommand {
  const command = parseCommand('slack', text.trim().split(/\s+/).filter(Boolean));
  // The command table already refused what Slack does not offer; this only tells the compiler so.
  if (!offeredOnSlack(command)) throw new BackfillError(ErrorCode.BadInput, `\`${command.kind}\` is not a /backfill command; \`/backfill help\` lists them.`);
  return command;
}
