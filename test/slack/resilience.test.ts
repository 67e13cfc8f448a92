import { afterEach, describe, expect, it } from 'vitest';
import { OWNERS } from '../../src/demo/constants.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';


const dmPosts = (h: SlackHarness) => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D'));

describe('Slack answering 429 and 500', () => {
  let h: SlackHarness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it('delays announcements on 429 with Retry-After, losing none and sending none twice', async () => {
    h = await createSlackHarness();
    const harness = h;
    harness.slack.rateLimit('chat.postMessage', 2, 1);
    const started = Date.now();
    expect((await harness.command('start orders 2026-11-15 currency parsed as text')).reply).toMatch(/Backfill #1 created/);
    await waitUntil(() => dmPosts(harness).length === 2, 'both announcements');
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    const rejected = harness.slack.attempts.filter((a) => a.method === 'chat.postMessage' && a.status === 429);
    expect(rejected).toHaveLength(2);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(dmPosts(harness).map((c) => c.params.channel).sort()).toEqual([`D${OWNERS.payouts}`, `D${OWNERS.settlementLead}`]);
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'announcement_sent'`)).toBe(2);
  });

  it('recovers when Slack answers 500 for a while: the step is retried and the DM goes out once', async () => {
    // More 500s than the Web API client retries (4 tries for each of two DMs): an announce step fails its
    // first attempt and BullMQ retries it.
    h = await createSlackHarness({ JOB_ATTEMPTS: '5' });
    const harness = h;
    harness.slack.failHttp('conversations.open', 9, 500);
    expect((await harness.command('start orders 2026-11-15 currency parsed as text')).reply).toMatch(/Backfill #1 created/);
    await waitUntil(() => dmPosts(harness).length === 2, 'both announcements after the outage', 30_000);
    expect(harness.slack.attempts.filter((a) => a.method === 'conversations.open' && a.status === 500)).toHaveLength(9);
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'step_retried' AND detail->>'step' = 'announce'`)).toBeGreaterThanOrEqual(1);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(dmPosts(harness)).toHaveLength(2);
  });

  it('re-sends an unacknowledged announcement after the configured delay and flags it in the incident channel, once', async () => {
    h = await createSlackHarness({ ANNOUNCE_REMINDER_MS: '300' });
    const harness = h;
    await harness.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => dmPosts(harness).length === 4, 'two announcements and two reminders');
    const reminders = dmPosts(harness).filter((c) => String(c.params.text).startsWith('Reminder:'));
    expect(reminders.map((c) => c.params.channel).sort()).toEqual([`D${OWNERS.payouts}`, `D${OWNERS.settlementLead}`]);
    const flags = () => harness.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === 'C0INCIDENT' && String(c.params.text).includes('has not acknowledged'));
    // Each reminder is a DM first, then the flag in the channel.
    await waitUntil(() => flags().length >= 2, 'the flags in the incident channel');
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(dmPosts(harness)).toHaveLength(4);
    expect(flags()).toHaveLength(2);
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'reminded'`)).toBe(2);
  });
});
