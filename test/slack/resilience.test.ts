import { afterEach, describe, expect, it } from 'vitest';
import { OWNERS } from '../../dev/demo/constants.js';
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

  it('a long run of 429s only slows the announcements: no attempt burned, the backfill not failed, one DM each, and the gate says who is still being told', async () => {
    // Two attempts of ten waits each were all a step had: 33 429s in a row for one owner's DM (and 15 for the
    // other's) failed the backfill. Retry-After is mostly 0 s so the test stays quick; the first four are 1 s so
    // the status message has a wait to show.
    h = await createSlackHarness({ JOB_ATTEMPTS: '2' });
    const harness = h;
    const payoutsDm = `D${OWNERS.payouts}`;
    const settleDm = `D${OWNERS.settlementLead}`;
    harness.slack.rateLimit('chat.postMessage', 4, 1, payoutsDm);
    harness.slack.rateLimit('chat.postMessage', 29, 0, payoutsDm);
    harness.slack.rateLimit('chat.postMessage', 15, 0, settleDm);
    expect((await harness.command('start orders 2026-11-15 currency parsed as text')).reply).toMatch(/Backfill #1 created/);

    const statusShows = (text: string) => harness.slack.callsTo('chat.update').some((c) => c.params.channel === 'C0INCIDENT' && JSON.stringify(c.params).includes(text));
    // "next try in N s", or "trying again now" when the refresh comes late on a busy machine.
    await waitUntil(() => statusShows(`<@${OWNERS.payouts}>: being told: Slack is rate-limiting, `), 'the gate showing the owner still being told');
    await waitUntil(() => dmPosts(harness).length === 2, 'both announcements, after every 429', 40_000);

    const rejected = (channel: string) => harness.slack.attempts.filter((a) => a.method === 'chat.postMessage' && a.status === 429 && a.params.channel === channel);
    expect(rejected(payoutsDm)).toHaveLength(33);
    expect(rejected(settleDm)).toHaveLength(15);
    expect(harness.slack.messagesIn(payoutsDm)).toHaveLength(1);
    expect(harness.slack.messagesIn(settleDm)).toHaveLength(1);
    await waitUntil(async () => await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'announcement_sent'`) === 2, 'both announce steps done');
    const { rows } = await harness.engine.ctx.pool.query<{ state: string }>('SELECT state FROM backfill.backfills WHERE id = 1');
    expect(rows[0]?.state).toBe('announced');
    // A rate limit is not a failure: no attempt was given up, none retried.
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind IN ('step_retried', 'step_failed', 'failed')`)).toBe(0);
    expect(await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.backfill_consumers WHERE announce_retry_at IS NOT NULL`)).toBe(0);
    // Once told, the gate says so: the last status no longer shows a wait.
    await waitUntil(() => !JSON.stringify(harness.slack.callsTo('chat.update').filter((c) => c.params.channel === 'C0INCIDENT').at(-1)?.params).includes('rate-limiting'),
      'the status after the announcements landed');
    expect(dmPosts(harness)).toHaveLength(2);
  });

  it('a stop while an announcement waits out a 429 ends the wait: the step sends nothing more', async () => {
    h = await createSlackHarness();
    const harness = h;
    const payoutsDm = `D${OWNERS.payouts}`;
    // Far more waits than the test lasts: only the stop can end them.
    harness.slack.rateLimit('chat.postMessage', 1000, 1, payoutsDm);
    await harness.command('start orders 2026-11-15 currency parsed as text');
    const waiting = async () => await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.backfill_consumers WHERE announce_retry_at IS NOT NULL AND owner = $1::text`, [OWNERS.payouts]) === 1;
    await waitUntil(waiting, 'the payouts announcement waiting on Slack');
    expect((await harness.command('stop 1 the owners asked for another night')).reply).toBe('Backfill #1 stopped and fenced.');
    // The claim is checked after each wait: the attempt ends (claim_lost) instead of trying again.
    await waitUntil(async () => await countRows(harness.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'claim_lost' AND detail->>'step' = 'announce'`) === 1,
      'the waiting announce giving up its claim');
    expect(harness.slack.messagesIn(payoutsDm)).toHaveLength(0);
    const { rows } = await harness.engine.ctx.pool.query<{ ts: string | null }>(`SELECT ts FROM backfill.message_intents WHERE intent = 'bf1:announce:payout_export'`);
    expect(rows).toEqual([{ ts: null }]);
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
