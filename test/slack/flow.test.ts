import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NIGHT_15, OWNERS } from '../../dev/demo/constants.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, type SlackHarness } from '../support/slackApp.js';
import type { RecordedCall } from '../../dev/slack-emulator/index.js';
import { waitUntil } from '../support/wait.js';

const blocksText = (call: RecordedCall | undefined) => JSON.stringify(call?.params.blocks ?? []);
/** Top-level messages in a channel (thread replies are counted separately). */
const postsTo = (h: SlackHarness, channel: string) => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === channel && !c.params.thread_ts);
const threadReplies = (h: SlackHarness, channel: string) => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === channel && c.params.thread_ts);

describe('night 15 from /backfill start to the diff, through the signed Bolt receiver', () => {
  let h: SlackHarness;
  const value = (consumer: string) => encodeButtonValue({ backfillId: 1, consumer });

  beforeAll(async () => {
    h = await createSlackHarness();
  });
  afterAll(async () => h.close());

  it('answers /backfill help with usage and examples', async () => {
    const { status, reply } = await h.command('help');
    expect(status).toBe(200);
    expect(reply).toContain('/backfill start orders 2026-11-15 currency parsed as text');
  });

  it('starts the backfill from the incident channel and says what it did', async () => {
    const { status, reply } = await h.command('start orders 2026-11-15 currency parsed as text');
    expect(status).toBe(200);
    expect(reply).toMatch(/Backfill #1 created: 6 partitions, 05:00–10:00 on 2026-11-15, total before 1,284,310\.55\. Announced; it runs once <@U07SETTLE>, <@U07PAYOUTS> acknowledge\./);
    // The name Slack sent with the command is kept, for the terminal and the incident package.
    const { rows } = await h.engine.ctx.pool.query<{ name: string }>(`SELECT name FROM backfill.people WHERE slack_id = 'U07ONCALL'`);
    expect(rows).toEqual([{ name: 'u07oncall' }]);
  });

  it('DMs each owner who must acknowledge, with the signed figure and the two buttons', async () => {
    await waitUntil(() => postsTo(h, `D${OWNERS.settlementLead}`).length === 1 && postsTo(h, `D${OWNERS.payouts}`).length === 1, 'two announcements');
    const dm = postsTo(h, `D${OWNERS.settlementLead}`)[0];
    expect(blocksText(dm)).toContain('1,284,310.55, signed by <@U07SETTLE> at 2026-11-16 07:00 UTC');
    expect(blocksText(dm)).toContain(ActionId.Acknowledge);
    expect(blocksText(dm)).toContain(ActionId.Hold);
    expect(h.slack.callsTo('conversations.open').map((c) => c.params.users).sort()).toEqual([OWNERS.payouts, OWNERS.settlementLead]);
    // The "after" owner hears nothing yet.
    expect(postsTo(h, `D${OWNERS.forecast}`)).toHaveLength(0);
  });

  it('keeps one status message in the incident channel', async () => {
    await waitUntil(() => postsTo(h, INCIDENT_CHANNEL).length >= 1, 'the status message');
    expect(postsTo(h, INCIDENT_CHANNEL)).toHaveLength(1);
    expect(blocksText(postsTo(h, INCIDENT_CHANNEL)[0])).toContain('announced, waiting for acknowledgements');
  });

  it('deletes and enqueues nothing before the required acknowledgements', async () => {
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE kind <> 'announce'`)).toBe(0);
    const { rows } = await h.engine.ctx.pool.query(`SELECT sum(amount_base)::text AS t FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`);
    expect(rows[0].t).toBe(NIGHT_15.signedTotal);
  });

  it('refuses a click by someone who does not own the consumer, changing nothing', async () => {
    const { status, reply } = await h.press(ActionId.Acknowledge, value('settlement_report'), 'U07INTRUDER');
    expect(status).toBe(200);
    expect(reply).toMatch(/<@U07INTRUDER> does not own settlement_report in backfill #1/);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.acknowledgements')).toBe(0);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = 'U07INTRUDER'`)).toBe(1);
  });

  it('records one acknowledgement for a double click, and updates the DM and the status in place', async () => {
    const first = await h.press(ActionId.Acknowledge, value('settlement_report'), OWNERS.settlementLead);
    const second = await h.press(ActionId.Acknowledge, value('settlement_report'), OWNERS.settlementLead);
    expect(first.status).toBe(200);
    expect(second.reply).toBe('Already acknowledged: nothing changed.');
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.acknowledgements')).toBe(1);
    const dmUpdates = h.slack.callsTo('chat.update').filter((c) => c.params.channel === `D${OWNERS.settlementLead}`);
    expect(dmUpdates).toHaveLength(1);
    expect(blocksText(dmUpdates[0])).toContain('Acknowledged by <@U07SETTLE>');
    await waitUntil(() => h.slack.callsTo('chat.update').some((c) => c.params.channel === INCIDENT_CHANNEL && blocksText(c).includes('acknowledged')), 'status update');
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE kind <> 'announce'`)).toBe(0);
  });

  it('runs when the last owner acknowledges and posts the diff to the incident channel', async () => {
    await h.press(ActionId.Acknowledge, value('payout_export'), OWNERS.payouts);
    await waitUntil(() => postsTo(h, INCIDENT_CHANNEL).length === 2, 'the diff message', 30_000);
    const diff = postsTo(h, INCIDENT_CHANNEL)[1];
    const text = blocksText(diff);
    expect(text).toContain('signed *1,284,310.55* by <@U07SETTLE>');
    expect(text).toContain('now *1,271,902.10*, difference *−12,408.45*');
    expect(text).toContain('*Total before:* 1,284,310.55');
    expect(text).toContain('*Total after:* 1,271,902.10');
    expect(text).toContain('*Ran at:*');
    expect(text).toContain('by <@U07ONCALL>');
    expect(text).toMatch(/1\. (settlement_report|demand_forecast): done.*payout_export: done/);
    expect(text).toContain('2026-11-15 05:00');
    // The reconciliation by key goes into the incident thread, under the status message.
    await waitUntil(() => threadReplies(h, INCIDENT_CHANNEL).length === 1, 'the reconciliation report');
    const reconciliation = blocksText(threadReplies(h, INCIDENT_CHANNEL)[0]);
    expect(reconciliation).toMatch(/2026-11-15 05:00 {2}published missing 0 {2}added 0 {2}duplicated 0 {2}changed \d+ {2}total 53,007\.53 → 51,643\.83/);
    expect(threadReplies(h, INCIDENT_CHANNEL)[0]?.params.thread_ts).toBe(postsTo(h, INCIDENT_CHANNEL)[0]?.response.ts);
    // The status message ends in place, no stream of new messages.
    await waitUntil(() => h.slack.callsTo('chat.update').some((c) => c.params.channel === INCIDENT_CHANNEL && blocksText(c).includes(': done')), 'final status');
  });

  it('tells the "after" owner after the run, and sent every announcement exactly once', async () => {
    await waitUntil(() => postsTo(h, `D${OWNERS.forecast}`).length === 1, 'the after-run DM');
    expect(String(postsTo(h, `D${OWNERS.forecast}`)[0]?.params.text)).toContain('difference −12,408.45');
    expect(postsTo(h, `D${OWNERS.settlementLead}`)).toHaveLength(1);
    expect(postsTo(h, `D${OWNERS.payouts}`)).toHaveLength(1);
    const transcript = h.slack.transcript();
    expect(transcript).toContain('1,271,902.10');
  });
});
