import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OWNERS } from '../../dev/demo/constants.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

describe('who may do what, and forged requests', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness({ BACKFILL_OPERATORS: 'U07ONCALL,U07LEAD', BACKFILL_CHANNELS: 'C0INCIDENT,C0DATAOPS' });
  });
  afterAll(async () => h.close());

  const nothingChanged = async () => {
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
    expect(h.slack.callsTo('chat.postMessage')).toHaveLength(0);
  };

  it('answers a forged signature with 401 and changes nothing', async () => {
    const { status } = await h.command('start orders 2026-11-15 forged', 'U07ONCALL', 'C0INCIDENT', { signature: 'v0=' + 'ab'.repeat(32) });
    expect(status).toBe(401);
    await nothingChanged();
  });

  it('answers a stale signature (older than five minutes) with 401 and changes nothing', async () => {
    const { status } = await h.command('start orders 2026-11-15 replayed', 'U07ONCALL', 'C0INCIDENT', { timestamp: Math.floor(Date.now() / 1000) - 6 * 60 });
    expect(status).toBe(401);
    await nothingChanged();
  });

  it('refuses a start by someone who is not an operator, and records the refusal', async () => {
    const { status, reply } = await h.command('start orders 2026-11-15 curious', 'U07VISITOR');
    expect(status).toBe(200);
    expect(reply).toMatch(/<@U07VISITOR> is not a backfill operator, so cannot start a backfill/);
    await nothingChanged();
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = 'U07VISITOR'`)).toBe(1);
  });

  it('refuses a start outside the configured channels, naming them', async () => {
    const { reply } = await h.command('start orders 2026-11-15 wrong room', 'U07ONCALL', 'C0RANDOM');
    expect(reply).toMatch(/only from <#C0INCIDENT>, <#C0DATAOPS>/);
    await nothingChanged();
  });

  it('explains unknown subcommands, malformed arguments and unknown pipelines', async () => {
    expect((await h.command('rerun orders')).reply).toMatch(/`rerun` is not a \/backfill command/);
    expect((await h.command('start orders 2026-11-15')).reply).toMatch(/Usage: `\/backfill start <pipeline>/);
    expect((await h.command('start orders 2026-11-15T10..2026-11-15T05 oops')).reply).toMatch(/runs backwards/);
    expect((await h.command('start ordrs 2026-11-15 typo')).reply).toMatch(/no pipeline called "ordrs".*Known pipelines: orders/);
    expect((await h.command('status abc')).reply).toMatch(/`abc` is not a backfill id/);
    await nothingChanged();
  });

  it('lets anyone ask for status', async () => {
    expect((await h.command('status', 'U07VISITOR')).reply).toBe('No backfills yet.');
  });

  it('refuses a button whose value was tampered with, and a hold by a non-owner', async () => {
    expect((await h.press(ActionId.Acknowledge, '{"b":"1; drop"}', OWNERS.settlementLead)).reply).toMatch(/does not belong to a backfill announcement/);
    const started = await h.command('start orders 2026-11-15 currency parsed as text', 'U07LEAD', 'C0DATAOPS');
    expect(started.reply).toMatch(/Backfill #1 created/);
    const refused = await h.press(ActionId.Hold, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.payouts);
    expect(refused.reply).toMatch(/<@U07PAYOUTS> does not own settlement_report in backfill #1, so cannot hold it/);
    const state = await h.engine.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = 1');
    expect(state.rows[0].state).toBe('announced');
  });
});

describe('hold, override and the operators user group', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness({ BACKFILL_OPERATORS: 'U07ONCALL', BACKFILL_OPERATOR_GROUP: 'S0OPS' });
    h.slack.setUsergroup('S0OPS', ['U07GROUPOP']);
  });
  afterAll(async () => h.close());

  it('a member of the operators group may start', async () => {
    const { reply } = await h.command('start orders 2026-11-15 currency parsed as text', 'U07GROUPOP');
    expect(reply).toMatch(/Backfill #1 created/);
  });

  it('a Hold pauses the backfill and says so in the incident channel; override does not overrule it', async () => {
    await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'announcements');
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    await h.press(ActionId.Hold, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    const channelPosts = () => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === 'C0INCIDENT').map((c) => String(c.params.text));
    await waitUntil(() => channelPosts().some((t) => t.includes('<@U07SETTLE> held backfill #1')), 'the hold notice');
    await waitUntil(() => h.slack.callsTo('chat.update').some((c) => c.params.channel === 'C0INCIDENT' && String(c.params.text).includes('held by an owner')), 'held status');
    const override = await h.command('override 1 we are in a hurry');
    expect(override.reply).toMatch(/<@U07SETTLE> asked to wait/);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE kind <> 'announce'`)).toBe(0);
  });

  it('the holder\'s acknowledgement releases it and it runs', async () => {
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await waitUntil(async () => (await h.engine.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = 1')).rows[0].state === 'done', 'the run', 30_000);
    const kinds = await h.engine.ctx.pool.query(`SELECT kind FROM backfill.events WHERE backfill_id = 1 AND kind IN ('held', 'released', 'approved', 'finished') ORDER BY id`);
    expect(kinds.rows.map((r) => r.kind)).toEqual(['held', 'released', 'approved', 'finished']);
  });

  it('an operator overrides a missing acknowledgement only with a reason, and it is posted', async () => {
    const started = await h.command('start orders 2026-11-27 shard 3 landed late');
    expect(started.reply).toMatch(/Backfill #2 created/);
    expect((await h.command('override 2')).reply).toMatch(/Usage: `\/backfill override <id> <reason>`/);
    const overridden = await h.command('override 2 settlement lead on a flight; finance director approved by phone');
    expect(overridden.reply).toMatch(/proceeds without the missing acknowledgements/);
    await waitUntil(async () => (await h.engine.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = 2')).rows[0].state === 'done', 'the override run', 30_000);
    const reasons = await h.engine.ctx.pool.query(`SELECT DISTINCT detail->>'reason' AS reason FROM backfill.events WHERE backfill_id = 2 AND kind = 'overridden'`);
    expect(reasons.rows).toEqual([{ reason: 'settlement lead on a flight; finance director approved by phone' }]);
  });
});
