import { hostname, userInfo } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBackfill } from '../src/core/announce/start.js';
import { runCli } from './support/cli.js';
import { countRows, createTestEngine, type TestEngine } from './support/engine.js';
import { createSlackHarness, type SlackHarness } from './support/slackApp.js';

const me = `cli:${userInfo().username}@${hostname()}`;

describe('the backfill CLI', () => {
  let engine: TestEngine;
  const cliWith = (env: Record<string, string>, ...args: string[]) => runCli(engine, env, ...args);
  const cli = (...args: string[]) => cliWith({}, ...args);

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

describe('the CLI acts with the rights of whoever it names, and one person is one person on both front ends', () => {
  let engine: TestEngine;
  // Six partitions over a limit of three: each backfill waits for a second operator. U07LEAD is a Slack operator.
  const env = { CAPACITY_LIMIT: '3', BACKFILL_OPERATORS: 'U07LEAD', BACKFILL_CLI_OPERATORS: '' };
  const cliAs = (operators: string, ...args: string[]) => runCli(engine, { ...env, BACKFILL_CLI_OPERATORS: operators }, ...args);
  const state = async (id: number) => (await engine.ctx.pool.query<{ state: string }>('SELECT state FROM backfill.backfills WHERE id = $1', [id])).rows[0]?.state;
  const approvals = () => countRows(engine.ctx, 'SELECT 1 FROM backfill.capacity_approvals');
  const refused = (action: string) => countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = $1 AND detail->>'action' = $2`, [me, action]);

  beforeAll(async () => {
    engine = await createTestEngine('month-end', { CAPACITY_LIMIT: '3', BACKFILL_OPERATORS: 'U07LEAD' });
  });
  afterAll(async () => engine.close());

  it('refuses cancel --as someone who is not an operator, saying who may, and changes nothing', async () => {
    const started = await runCli(engine, env, 'start', 'orders', '2026-11-15', 'currency parsed as text');
    expect(started.out).toContain('Backfill #1 created (announced).');
    const cancel = await runCli(engine, env, 'cancel', '1', '--as', 'U0RANDOM1', '--reason', 'x');
    expect(cancel.code).toBe(1);
    expect(cancel.out).toContain(`@U0RANDOM1 is not a backfill operator the CLI knows of, so ${me} cannot cancel a backfill on their behalf`);
    expect(cancel.out).toContain('the Slack users in BACKFILL_OPERATORS and the Slack ids in BACKFILL_CLI_OPERATORS (dana=U07DANA), not the operators\' user group');
    expect(await state(1)).toBe('announced');
    expect(await refused('cancel')).toBe(1);
  });

  it('refuses the requester\'s approval through --as, for a non-operator or for another operator', async () => {
    const forRandom = await runCli(engine, env, 'approve', '1', '--as', 'U0RANDOM1', '--reason', 'x');
    expect(forRandom.code).toBe(1);
    expect(forRandom.out).toContain('@U0RANDOM1 is not a backfill operator the CLI knows of');
    const forLead = await runCli(engine, env, 'approve', '1', '--as', 'U07LEAD', '--reason', 'lead agreed by phone');
    expect(forLead.code).toBe(1);
    expect(forLead.out).toContain(`${me} asked for backfill #1, so cannot be its second approval on behalf of @U07LEAD either: another operator must approve it, as themselves.`);
    expect(await approvals()).toBe(0);
    expect(await refused('approve')).toBe(2);
    expect(await state(1)).toBe('announced');
    expect((await runCli(engine, env, 'cancel', '1', 'making room')).code).toBe(0);
  });

  it('counts a mapped CLI user (user=U07DANA) and U07DANA on Slack as one person for the two-operator rule', async () => {
    const user = userInfo().username;
    // U07DANA starts it as Slack would: the core, with the Slack user as the actor.
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: 'U07DANA' });
    expect(backfill.needsSecondApproval).toBe(true);
    const byDana = await cliAs(`${user}=U07DANA`, 'approve', String(backfill.id));
    expect(byDana.code).toBe(1);
    expect(byDana.out).toContain(`@U07DANA asked for backfill #${backfill.id}, so cannot also be its second approval: another operator must approve it.`);
    expect(await approvals()).toBe(0);
    // Another operator, mapped too: the approval is the person's, the timeline says it came from the CLI.
    const byLead = await cliAs(`someone_else,${user}=U07LEAD`, 'approve', String(backfill.id));
    expect(byLead.code).toBe(0);
    const { rows } = await engine.ctx.pool.query(
      `SELECT a.operator, e.actor, e.actor_person, e.on_behalf_of FROM backfill.capacity_approvals a
       JOIN backfill.events e ON e.backfill_id = a.backfill_id AND e.kind = 'capacity_approved' WHERE a.backfill_id = $1`, [backfill.id]);
    expect(rows).toEqual([{ operator: 'U07LEAD', actor: me, actor_person: 'U07LEAD', on_behalf_of: null }]);
  });

  it('refuses a malformed BACKFILL_CLI_OPERATORS entry with a sentence and an example', async () => {
    const bad = await cliAs('dana=not-a-slack-id', 'status');
    expect(bad.code).not.toBe(0);
    expect(bad.out).toContain('BACKFILL_CLI_OPERATORS: "dana=not-a-slack-id" is neither an OS user name (dana) nor an OS user and their Slack user id (dana=U07DANA)');
  });
});

describe('one person on the CLI and on Slack', () => {
  let harness: SlackHarness;
  beforeAll(async () => {
    harness = await createSlackHarness({ BACKFILL_OPERATORS: 'U07DANA,U07LEAD', CAPACITY_LIMIT: '3' });
  });
  afterAll(async () => harness.close());

  it('refuses U07DANA\'s second approval on Slack of the backfill dana started on the CLI (dana=U07DANA); another operator gives it', async () => {
    const env = { CAPACITY_LIMIT: '3', BACKFILL_OPERATORS: 'U07DANA,U07LEAD', BACKFILL_CLI_OPERATORS: `${userInfo().username}=U07DANA` };
    const started = await runCli(harness.engine, env, 'start', 'orders', '2026-11-15', 'currency parsed as text');
    expect(started.out).toContain('Backfill #1 created (announced).');
    expect((await harness.command('approve 1', 'U07DANA')).reply).toBe('<@U07DANA> asked for backfill #1, so cannot also be its second approval: another operator must approve it.');
    expect(await countRows(harness.engine.ctx, 'SELECT 1 FROM backfill.capacity_approvals')).toBe(0);
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = 'U07DANA' AND detail->>'action' = '/backfill approve'`)).toBe(1);
    expect((await harness.command('approve 1', 'U07LEAD')).reply).toMatch(/^Approved/);
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.capacity_approvals WHERE operator = 'U07LEAD'`)).toBe(1);
  });
});
