// One command table and one set of argument schemas for the slash command and the CLI: the same words mean the
// same command on both, a command one surface does not offer is refused there, and a malformed argument is
// refused with the surface's own usage line before anything is opened.

import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parseCommand } from '../src/commands/arguments.js';
import { cliUsage, COMMANDS, slackHelp, usageOf } from '../src/commands/table.js';
import { ErrorCode, isBackfillError } from '../src/errors.js';
import { SLACK_KINDS } from '../src/slack/commandText.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

function refusal(surface: 'slack' | 'cli', words: string[]): string {
  try {
    parseCommand(surface, words);
  } catch (error) {
    expect(isBackfillError(error, ErrorCode.BadInput)).toBe(true);
    return (error as Error).message;
  }
  throw new Error(`${words.join(' ')} was not refused on ${surface}`);
}

describe('the command table and its argument schemas', () => {
  it('parses the same words to the same command on Slack and on the CLI', () => {
    for (const words of [['stop', '12', 'wrong', 'step', 'deployed'], ['rollback', '#3'], ['continue', '4', '2026-11-15T07:00', 'three orders cancelled'],
      ['paid-against', 'settlement_report', '2026-11-15'], ['start', 'orders', '2026-11-15', 'currency', 'parsed'], ['cancel', '5', 'owner', 'asked']]) {
      expect(parseCommand('slack', words), words.join(' ')).toEqual(parseCommand('cli', words));
    }
    expect(parseCommand('cli', ['stop', '12', 'wrong', 'step'])).toEqual({ kind: 'stop', backfillId: 12, reason: 'wrong step' });
    expect(parseCommand('slack', ['rollback', '3', 'finance', 'asked'])).toEqual({ kind: 'rollback', backfillId: 3, reason: 'finance asked' });
  });

  it('refuses on a surface what only the other offers, and a malformed argument with that surface\'s usage', () => {
    expect(refusal('slack', ['ack', '1'])).toMatch(/^`ack` is not a \/backfill command\. Try one of: help, plan, start, /);
    expect(refusal('cli', ['frobnicate'])).toMatch(/^"frobnicate" is not a backfill command\. The commands are: plan, start, ack, /);
    expect(refusal('slack', ['stop', 'twelve', 'because'])).toBe('`twelve` is not a backfill id; ids are whole numbers such as 12. Usage: `/backfill stop <id> <reason>`');
    expect(refusal('cli', ['stop', 'twelve', 'because'])).toBe('`twelve` is not a backfill id; ids are whole numbers such as 12. Usage: backfill stop <id> <reason>');
    expect(refusal('cli', ['stop', '12'])).toBe('Missing or extra arguments. Usage: backfill stop <id> <reason>');
    expect(refusal('cli', ['signer', 'promote', 'x', 'y'])).toMatch(/Usage: backfill signer add\|remove <report> <user>/);
  });

  it('lists for the slash command\'s type exactly the commands the table offers on Slack', () => {
    const offered = COMMANDS.filter((command) => command.surfaces.includes('slack')).map((command) => command.name);
    expect([...SLACK_KINDS].sort()).toEqual([...offered, 'help', 'start-plan'].sort());
  });

  it('makes both help texts from the table, each listing every command it offers', () => {
    const help = slackHelp();
    const usage = cliUsage();
    for (const command of COMMANDS) {
      if (command.surfaces.includes('slack')) expect(help).toContain(usageOf(command, 'slack'));
      else expect(help).not.toContain(`/backfill ${command.name} `);
      if (command.surfaces.includes('cli')) expect(usage).toContain(`  ${usageOf(command, 'cli')}`);
    }
  });

  it('the CLI refuses a malformed command before it opens any database', async () => {
    const failed = await run(process.execPath, ['--import', 'tsx', CLI, 'stop', 'twelve', 'because'], {
      env: { ...process.env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' },
    }).then(() => undefined, (error: unknown) => error as { code: number; stderr: string });
    expect(failed?.code).toBe(1);
    expect(failed?.stderr.trim()).toBe('`twelve` is not a backfill id; ids are whole numbers such as 12. Usage: backfill stop <id> <reason>');
    const notAUser = await run(process.execPath, ['--import', 'tsx', CLI, 'ack', '1', '--as', 'dana', '--reason', 'on a plane'], {
      env: { ...process.env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' },
    }).then(() => undefined, (error: unknown) => error as { code: number; stderr: string });
    expect(notAUser?.code).toBe(1);
    expect(notAUser?.stderr.trim()).toBe('--as takes the Slack user id of the person acted for, such as U07SETTLE; "dana" is not one.');
  });
});
