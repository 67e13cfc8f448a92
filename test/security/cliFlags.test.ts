// The CLI's flags are text like the command's words: a reason given with --reason or --override-limit is held
// to the same maximum length, and no flag may carry a control character or half of a UTF-16 pair. Refused with a
// sentence before anything is opened.

import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { checkFlags } from '../../src/commands/arguments.js';
import { MAX_REASON_LENGTH } from '../../src/commands/schemas.js';
import { CLI } from '../support/cli.js';

/** Runs the real CLI with no database to reach: a refusal that comes before opening anything is all it can give. */
function runCliOffline(...args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', CLI, ...args], { env: { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' } },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, out: stdout + stderr }));
  });
}

const tooLong = (flag: string) => `The reason of --${flag} is ${MAX_REASON_LENGTH + 1} characters long; at most ${MAX_REASON_LENGTH} are taken.`;

describe("the CLI's flags", () => {
  it('refuses a --reason or --override-limit one character over the maximum, and takes one at it', () => {
    for (const flag of ['reason', 'override-limit']) {
      expect(() => checkFlags({ [flag]: 'z'.repeat(MAX_REASON_LENGTH + 1) })).toThrowError(tooLong(flag));
      expect(() => checkFlags({ [flag]: 'z'.repeat(MAX_REASON_LENGTH) })).not.toThrow();
    }
  });

  it('refuses NUL, other control characters and lone surrogates in any flag, naming the flag and the character', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ reason: 'owner\u0000away' }, /^Character 6 of --reason is U\+0000, a control character or half of a UTF-16 pair/],
      [{ 'override-limit': 'finance\u001b[2J' }, /^Character 8 of --override-limit is U\+001B/],
      [{ as: 'U07SETTLE\u202e' }, /^Character 10 of --as is U\+202E/],
      [{ consumer: 'settle\ud800' }, /^Character 7 of --consumer is U\+D800/],
    ];
    for (const [values, refusal] of cases) expect(() => checkFlags(values)).toThrowError(refusal);
    // Tab and newline are text; a boolean flag is no text at all.
    expect(() => checkFlags({ reason: 'line one\n\tline two', wait: true })).not.toThrow();
  });

  it('the real CLI says so and exits 1 before reaching PostgreSQL', async () => {
    const long = await runCliOffline('cancel', '1', '--as', 'U07SETTLE', '--reason', 'z'.repeat(MAX_REASON_LENGTH + 1));
    expect(long.code).toBe(1);
    expect(long.out).toContain(tooLong('reason'));
    const control = await runCliOffline('start', 'orders', '2026-11-15', 'late', '--override-limit', 'finance\u001b[2J');
    expect(control.code).toBe(1);
    expect(control.out).toMatch(/Character 8 of --override-limit is U\+001B/);
    for (const { out } of [long, control]) expect(out).not.toMatch(/PostgreSQL did not answer/);
  }, 60_000);
});
