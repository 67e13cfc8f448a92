import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument, stringify } from 'yaml';
import { OWNERS } from '../../dev/demo/constants.js';
import { readDemoCatalog } from '../../dev/demo/seed.js';
import type { RecordedCall } from '../../dev/slack-emulator/index.js';
import { applyCatalog } from '../../src/core/catalog/apply.js';
import type { Catalog } from '../../src/core/catalog/schema.js';
import { insertDelegate } from '../../src/db/delegates.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, OPERATOR, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const SETTLE_DEPUTY = 'U07DEPUTY';
const PAYOUTS_DEPUTY = 'U07PAYDEPUTY';
const FINOPS = ['U07FINOPS1', 'U07FINOPS2'];
const FINANCE_CHANNEL = 'C0FINANCE';
const PAYOUTS_CHANNEL = 'C0PAYOUTS';

const blocksText = (call: RecordedCall | undefined) => JSON.stringify(call?.params.blocks ?? []);
const postsTo = (h: SlackHarness, channel: string) => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === channel && !c.params.thread_ts);
const latestStatus = (h: SlackHarness) => {
  const updates = h.slack.callsTo('chat.update').filter((c) => c.params.channel === INCIDENT_CHANNEL);
  return blocksText(updates.at(-1) ?? postsTo(h, INCIDENT_CHANNEL)[0]);
};

/** The demo catalog with an escalation path for both owners who must acknowledge, without working hours. */
async function escalatingCatalog(): Promise<{ text: string; source: string }> {
  const document = parseDocument((await readDemoCatalog()).text).toJS() as Catalog;
  const paths: Record<string, Catalog['consumers'][number]['escalation']> = {
    settlement_report: [{ after: '30m', to: 'delegates' }, { after: '1h', to: 'channel', channel: FINANCE_CHANNEL }, { after: '2h', to: 'oncall', usergroup: 'S0FINOPS' }],
    payout_export: [{ after: '30m', to: 'delegates' }, { after: '1h', to: 'channel', channel: PAYOUTS_CHANNEL }],
  };
  for (const consumer of document.consumers) consumer.escalation = paths[consumer.name] ?? [];
  return { text: stringify(document), source: 'catalog.yml' };
}

describe('an owner who does not answer, escalated through Slack', () => {
  let h: SlackHarness;
  /**
   * `minutes` pass (see test/core/escalation.test.ts): in the database, and for the queue's delayed jobs, which
   * come now. A step not due yet sends nothing, and the sweep schedules it again for what is left.
   */
  const passes = async (minutes: number) => {
    const back = [1, `${minutes} minutes`];
    await h.engine.ctx.pool.query(`UPDATE backfill.backfill_steps SET finished_at = finished_at - $2::interval WHERE backfill_id = $1 AND kind = 'announce'`, back);
    await h.engine.ctx.pool.query(`UPDATE backfill.escalations SET due_at = due_at - $2::interval, sent_at = sent_at - $2::interval WHERE backfill_id = $1`, back);
    const queue = h.bot.workers?.queue;
    for (const job of (await queue?.getJobs(['delayed'])) ?? []) if (job.id?.startsWith('bf1-escalate-')) await job.promote().catch(() => undefined);
    await h.bot.workers?.kick(1);
  };
  const status = async (consumer: string) => (await h.engine.ctx.pool.query<{ step: number; status: string }>(
    'SELECT step, status FROM backfill.escalations WHERE backfill_id = 1 AND consumer = $1 ORDER BY step', [consumer])).rows.map((r) => r.status);

  beforeAll(async () => {
    // Reminders stay out of the way: the clock is moved by hours here.
    h = await createSlackHarness({ ANNOUNCE_REMINDER_MS: String(7 * 24 * 3_600_000) });
    await applyCatalog(h.engine.ctx.pool, await escalatingCatalog(), OPERATOR);
    await insertDelegate(h.engine.ctx.pool, OWNERS.settlementLead, SETTLE_DEPUTY);
    await insertDelegate(h.engine.ctx.pool, OWNERS.payouts, PAYOUTS_DEPUTY);
    h.slack.setUsergroup('S0FINOPS', FINOPS);
  });
  afterAll(async () => h.close());

  it('says in the status message since when each owner is waited on, and which step comes next', async () => {
    const { reply } = await h.command('start orders 2026-11-15 currency parsed as text');
    expect(reply).toMatch(/Backfill #1 created/);
    await waitUntil(() => postsTo(h, `D${OWNERS.settlementLead}`).length === 1 && postsTo(h, `D${OWNERS.payouts}`).length === 1, 'two announcements');
    await waitUntil(() => /settlement_report, since [^;]+ UTC; next: the delegates at /.test(latestStatus(h)), 'the status naming the next step');
    expect(latestStatus(h)).toMatch(/<@U07SETTLE> \(settlement_report, since \d{4}-\d\d-\d\d \d\d:\d\d UTC; next: the delegates at \d{4}-\d\d-\d\d \d\d:\d\d UTC\)/);
  });

  it('after the first wait DMs each owner\'s delegates the announcement with its buttons, once', async () => {
    await passes(31);
    await waitUntil(() => postsTo(h, `D${SETTLE_DEPUTY}`).length === 1 && postsTo(h, `D${PAYOUTS_DEPUTY}`).length === 1, 'the delegates told');
    const dm = postsTo(h, `D${SETTLE_DEPUTY}`)[0];
    expect(String(dm?.params.text)).toMatch(/^The backfill #1 of orders is waiting for <@U07SETTLE> to acknowledge it for settlement_report since .* UTC \(escalation step 1 of 3\)\. You are their delegate/);
    expect(blocksText(dm)).toContain(ActionId.Acknowledge);
    expect(blocksText(dm)).toContain('1,284,310.55, signed by <@U07SETTLE>');
    await waitUntil(() => /escalated to the delegates at [^;]+; next: #C0FINANCE at /.test(latestStatus(h)), 'the status naming the channel next');
    // Another sweep sends nothing again.
    await h.bot.workers?.kick(1);
    expect(postsTo(h, `D${SETTLE_DEPUTY}`)).toHaveLength(1);
  });

  it('an owner\'s acknowledgement between steps stops the rest of their path', async () => {
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    await waitUntil(async () => (await status('payout_export')).join() === 'sent,stopped', 'the payouts path stopped');
    expect(await status('settlement_report')).toEqual(['sent', 'waiting', 'waiting']);
  });

  it('posts the next step in the channel once although Slack\'s answer to the post was lost; the stopped path posts nothing', async () => {
    // The next post is made and its answer lost, as when a worker dies between Slack's answer and its commit.
    h.slack.dropAnswer('chat.postMessage', 1);
    await passes(30);
    await waitUntil(async () => (await status('settlement_report')).join() === 'sent,sent,waiting', 'the channel step sent');
    expect(h.slack.attempts.filter((a) => a.method === 'chat.postMessage' && a.status === 500).map((a) => a.params.channel)).toEqual([FINANCE_CHANNEL]);
    expect(h.slack.messagesIn(FINANCE_CHANNEL)).toHaveLength(1);
    expect(h.slack.messagesIn(FINANCE_CHANNEL)[0]?.text).toMatch(/Their delegates can acknowledge in their place, or an operator can `\/backfill override 1 &lt;reason&gt;`/);
    expect(h.slack.messagesIn(PAYOUTS_CHANNEL)).toEqual([]);
  });

  it('DMs the user group\'s members at the third step, each once', async () => {
    await passes(60);
    await waitUntil(async () => (await status('settlement_report')).join() === 'sent,sent,sent', 'the third step sent');
    for (const member of FINOPS) {
      expect(h.slack.messagesIn(`D${member}`)).toHaveLength(1);
      expect(h.slack.messagesIn(`D${member}`)[0]?.text).toMatch(/^You are on call: the backfill #1 of orders is waiting for <@U07SETTLE>/);
    }
    expect(h.slack.messagesIn(FINANCE_CHANNEL)).toHaveLength(1);
    expect(h.slack.messagesIn(`D${SETTLE_DEPUTY}`)).toHaveLength(1);
    await waitUntil(() => /escalated to the on-call group S0FINOPS at [^;)]+\)/.test(latestStatus(h)), 'the status naming how far it went');
  });

  it('a delegate answers from the escalation DM in the owner\'s place, and the backfill runs', async () => {
    const { status: code } = await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), SETTLE_DEPUTY);
    expect(code).toBe(200);
    await waitUntil(async () => (await countRows(h.engine.ctx, `SELECT 1 FROM backfill.acknowledgements WHERE backfill_id = 1`)) === 2, 'both acknowledged');
    const { rows } = await h.engine.ctx.pool.query(`SELECT owner FROM backfill.acknowledgements WHERE consumer = 'settlement_report'`);
    expect(rows).toEqual([{ owner: SETTLE_DEPUTY }]);
    await waitUntil(async () => (await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfills WHERE id = 1 AND state NOT IN ('announced', 'held')`)) === 1, 'the gate open');
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = 1 AND kind = 'escalated'`)).toBe(4);
  });
});
