import { execFile } from 'node:child_process';
import { hostname, userInfo } from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countRows, createTestEngine, type TestEngine } from './support/engine.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

describe('the backfill CLI', () => {
  let engine: TestEngine;
  const cliWith = async (env: Record<string, string>, ...args: string[]) => {
    try {
      const { stdout } = await run(process.execPath, ['--import', 'tsx', CLI, ...args], {
        env: { ...process.env, DATABASE_URL: engine.ctx.config.DATABASE_URL, QUEUE_PREFIX: engine.ctx.config.QUEUE_PREFIX, ...env },
      });
      return { code: 0, out: stdout };
    } catch (error) {
      const failed = error as { code: number; stdout: string; stderr: string };
      return { code: failed.code, out: failed.stdout + failed.stderr };
    }
  };
  const cli = (...args: string[]) => cliWith({}, ...args);
  const me = `cli:${userInfo().username}@${hostname()}`;

  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('plans night 15 as a dry run', async () => {
    const { code, out } = await cli('plan', 'orders', '2026-11-15', 'currency parsed as text');
    expect(code).toBe(0);
    expect(out).toContain('Watermark: 2026-11-30 23:00 → 2026-11-15 04:00');
    expect(out).toContain('settlement_report 2026-11-15: 1,284,310.55 signed by Settlement lead');
    // A terminal gets names (backfill.people), never Slack's markup.
    expect(out).not.toMatch(/<@U/);
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
  });

  it('exits 1 with the reason on bad input', async () => {
    const { code, out } = await cli('start', 'orders', '2026-11-04', 'late');
    expect(code).toBe(1);
    expect(out).toMatch(/No backfill needed for the night of 2026-11-04/);
  });

  it('starts, is acknowledged by the owners and runs to the diff with --wait', async () => {
    const started = await cli('start', 'orders', '2026-11-15', 'currency', 'parsed', 'as', 'text');
    expect(started.out).toContain('Backfill #1 created (announced).');
    // The announcements, composed once in Slack's markup, read on a terminal with names.
    expect(started.out).toContain('signed by Settlement lead at 2026-11-16 07:00 UTC');
    expect(started.out).not.toContain('<@');
    expect((await cli('ack', '1', '--as', 'U07SETTLE', '--reason', 'Dana is on a plane; she agreed by phone')).out).toContain('Still waiting for: payout_export Payouts owner');
    const finished = await cli('ack', '1', '--as', 'U07PAYOUTS', '--reason', 'payouts team asked in #payouts', '--wait');
    expect(finished.code).toBe(0);
    expect(finished.out).toContain('difference −12,408.45');
    const log = await cli('log', '1');
    // jsonb orders keys by length, so "to" comes before "from".
    expect(log.out).toMatch(/watermark_moved\s+\{"to":"2026-11-15 04:00","from":"2026-11-30 23:00"\}/);
  });

  it('records its OS user and host on every event, and --as as on behalf of, with the reason', async () => {
    const { rows } = await engine.ctx.pool.query<{ actor: string; on_behalf_of: string | null; on_behalf_reason: string | null }>(
      `SELECT actor, on_behalf_of, on_behalf_reason FROM backfill.events WHERE backfill_id = 1 AND kind IN ('requested', 'acknowledged') ORDER BY id`);
    expect(rows).toEqual([
      { actor: me, on_behalf_of: null, on_behalf_reason: null },
      { actor: me, on_behalf_of: 'U07SETTLE', on_behalf_reason: 'Dana is on a plane; she agreed by phone' },
      { actor: me, on_behalf_of: 'U07PAYOUTS', on_behalf_reason: 'payouts team asked in #payouts' },
    ]);
    // The gate counted the owners themselves.
    const { rows: acks } = await engine.ctx.pool.query<{ acknowledged_by: string }>('SELECT owner AS acknowledged_by FROM backfill.acknowledgements WHERE backfill_id = 1 ORDER BY owner');
    expect(acks.map((a) => a.acknowledged_by)).toEqual(['U07PAYOUTS', 'U07SETTLE']);
    const log = await cli('log', '1');
    expect(log.out).toContain(`${me} on behalf of Settlement lead (Dana is on a plane; she agreed by phone)`);
    const exported = await cli('export', '1', '--format', 'md');
    expect(exported.out).toContain(`| ${me} on behalf of Settlement lead (U07SETTLE): Dana is on a plane; she agreed by phone | acknowledged |`);
  });

  it('refuses to act for someone else without a reason, or for a user who is not an operator, and changes nothing', async () => {
    const before = await countRows(engine.ctx, 'SELECT 1 FROM backfill.signoffs');
    const refusals = () => countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = $1`, [me]);
    const refusedBefore = await refusals();
    const noReason = await cli('sign', 'settlement_report', '2026-11-15', '--as', 'U07SETTLE');
    expect(noReason.code).toBe(1);
    expect(noReason.out).toContain('Acting on behalf of Settlement lead needs a reason, kept in the timeline: add --reason "<why they cannot sign a report themselves>".');
    // Refusals are written once in Slack's markup; a terminal shows names, never <@U…>.
    expect(noReason.out).not.toContain('<@');
    const notOperator = await cliWith({ BACKFILL_CLI_OPERATORS: 'someone-else' }, 'sign', 'settlement_report', '2026-11-15', '--as', 'U07SETTLE', '--reason', 'asked me to');
    expect(notOperator.code).toBe(1);
    expect(notOperator.out).toContain(`${me} is not an operator, so cannot sign a report on behalf of Settlement lead. Only an operator may act for someone else`);
    const planNotOperator = await cliWith({ BACKFILL_CLI_OPERATORS: 'someone-else' }, 'plan', 'orders', '2026-11-16');
    expect(planNotOperator.out).toContain(`${me} is not a backfill operator, so cannot plan a backfill.`);
    // Acting for someone uses their rights, no more: a visitor owns nothing and signs nothing.
    const notOwner = await cli('hold', '1', '--as', 'U07VISITOR', '--reason', 'testing');
    expect(notOwner.code).toBe(1);
    expect(notOwner.out).toMatch(/@U07VISITOR does not own any consumer in backfill #1/);
    expect(notOwner.out).not.toContain('<@');
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.signoffs')).toBe(before);
    // Each refusal is in the timeline, under the CLI user.
    expect(await refusals()).toBe(refusedBefore + 4);
  });
});
