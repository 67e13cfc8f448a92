import { afterEach, describe, expect, it } from 'vitest';
import { NIGHT_15, OWNERS } from '../../dev/demo/constants.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const state = async (h: SlackHarness, id = 1) => (await h.engine.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = $1', [id])).rows[0]?.state as string;
const channelTexts = (h: SlackHarness) => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === INCIDENT_CHANNEL).map((c) => `${String(c.params.text)} ${JSON.stringify(c.params.blocks ?? [])}`);

async function acknowledgeBoth(h: SlackHarness, id = 1): Promise<void> {
  await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length >= 2 * id, 'announcements');
  await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: id, consumer: 'settlement_report' }), OWNERS.settlementLead);
  await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: id, consumer: 'payout_export' }), OWNERS.payouts);
}

describe('recovering a backfill from Slack', () => {
  let h: SlackHarness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it('runs exactly a frozen plan, and refuses one whose inputs changed', async () => {
    h = await createSlackHarness({ BACKFILL_OPERATORS: 'U07ONCALL,U07LEAD' });
    const harness = h;
    const planned = await harness.command('plan orders 2026-11-15');
    expect(planned.reply).toBe('Plan: orders, 6 partitions');
    const planId = /Plan #(\d+)/.exec(JSON.stringify(harness.slack.responses.at(-1)?.body))?.[1];
    expect(planId).toBeDefined();
    await harness.engine.ctx.pool.query(`UPDATE backfill.consumers SET owner = 'U07NEWLEAD' WHERE name = 'payout_export'`);
    const refused = await harness.command(`start plan ${planId} currency parsed as text`);
    expect(refused.reply).toMatch(/Plan #\d+ is out of date: its consumers changed since it was previewed/);
    expect(await countRows(harness.engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
    await harness.engine.ctx.pool.query(`UPDATE backfill.consumers SET owner = 'U07PAYOUTS' WHERE name = 'payout_export'`);
    const started = await harness.command(`start plan ${planId} currency parsed as text`);
    expect(started.reply).toMatch(/Backfill #1 created from plan #\d+, exactly as previewed: 6 partitions/);
  });

  it('a backfill above the capacity limit runs only after a second operator approves it', async () => {
    h = await createSlackHarness({ BACKFILL_OPERATORS: 'U07ONCALL,U07LEAD', CAPACITY_LIMIT: '4' });
    const harness = h;
    await harness.command('start orders 2026-11-15 currency parsed as text');
    await acknowledgeBoth(harness);
    expect(await state(harness)).toBe('announced');
    expect((await harness.command('approve 1')).reply).toMatch(/cannot also be its second approval/);
    expect((await harness.command('approve 1', 'U07VISITOR')).reply).toMatch(/not a backfill operator/);
    expect((await harness.command('approve 1', 'U07LEAD')).reply).toMatch(/Approved; every gate is open/);
    await waitUntil(async () => (await state(harness)) === 'done', 'the run', 30_000);
    await waitUntil(() => channelTexts(harness).some((t) => t.includes('<@U07LEAD> approved the size of backfill #1 as the second operator')), 'the approval notice');
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'capacity_approved' AND actor = 'U07LEAD'`)).toBe(1);
  });

  it('stop fences a backfill, removes its queued jobs and says so in the incident channel', async () => {
    h = await createSlackHarness({ ANNOUNCE_REMINDER_MS: '3600000' });
    const harness = h;
    await harness.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => harness.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'announcements');
    // The reminders wait in the queue as delayed jobs (next to the retention job's next run, which is not the backfill's).
    const delayedReminders = async () => (await harness.bot.workers?.queue.getDelayed())?.filter((job) => job.name === 'remind').length;
    await waitUntil(async () => (await delayedReminders()) === 2, 'the delayed reminders');
    // So do the steps of the settlement report's escalation path (dev/demo/catalog.yml): the stop removes them too.
    const steps = Number((await harness.engine.ctx.pool.query<{ n: string }>('SELECT count(*) AS n FROM backfill.escalations WHERE backfill_id = 1')).rows[0]?.n);
    const delayedSteps = async () => (await harness.bot.workers?.queue.getDelayed())?.filter((job) => job.name === 'escalate').length;
    await waitUntil(async () => steps > 0 && (await delayedSteps()) === steps, 'the delayed escalation steps');
    expect((await harness.command('stop 1')).reply).toMatch(/Usage: `\/backfill stop <id> <reason>`/);
    expect((await harness.command('stop 1 the owners want the whole week redone instead')).reply).toBe('Backfill #1 stopped and fenced.');
    await waitUntil(() => channelTexts(harness).some((t) => t.includes('stopped backfill #1: the owners want the whole week redone instead. It is fenced')), 'the stop notice');
    expect(channelTexts(harness).find((t) => t.includes('It is fenced'))).toContain(`${2 + steps} queued job(s) removed`);
    expect(await delayedReminders()).toBe(0);
    expect(await delayedSteps()).toBe(0);
    expect(await state(harness)).toBe('stopped');
    const row = await harness.engine.ctx.pool.query('SELECT stopped_by FROM backfill.backfills WHERE id = 1');
    expect(row.rows[0]).toEqual({ stopped_by: 'U07ONCALL' });
    // Acknowledging a stopped backfill changes nothing.
    const late = await harness.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    expect(late.reply).toMatch(/stopped \(fenced\); acknowledgements are taken only while it is announced or held/);
  });

  it('rolls back a finished backfill: prior rows restored, consumers replayed and told, all in the channel', async () => {
    h = await createSlackHarness();
    const harness = h;
    await harness.command('start orders 2026-11-15 currency parsed as text');
    await acknowledgeBoth(harness);
    await waitUntil(async () => (await state(harness)) === 'done', 'the backfill', 30_000);
    expect((await harness.command('rollback 1', 'U07VISITOR')).reply).toMatch(/not a backfill operator, so cannot roll back/);
    const rolled = await harness.command('rollback 1');
    expect(rolled.reply).toBe('Backfill #1 rolled back: 6 partition(s) restored.');
    await waitUntil(async () => (await state(harness)) === 'rolled_back', 'the rollback replays', 30_000);
    const total = await harness.engine.ctx.pool.query(`SELECT total::text FROM warehouse.settlement_report WHERE report_date = '2026-11-15'`);
    expect(total.rows[0].total).toBe(NIGHT_15.signedTotal);
    await waitUntil(() => channelTexts(harness).some((t) => t.includes('Backfill #1 rolled back:')), 'the rollback report');
    await waitUntil(() => h?.slack.callsTo('chat.postMessage').filter((c) => String(c.params.text).includes('was rolled back')).length === 3, 'owners told');
    expect((await harness.command('rollback 1')).reply).toMatch(/is rolled back; only a finished, failed, stopped or paused backfill can be rolled back/);
  });
});
