// An owner Slack will never reach (demo night 2026-11-15): their announcement is a fact, not a retry loop,
// the incident channel is told what to do, and the run proceeds once the gate is cleared by people.

import { afterEach, describe, expect, it } from 'vitest';
import { OWNERS } from '../../dev/demo/constants.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { createSlackHarness, INCIDENT_CHANNEL, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const CONSUMER_OF: Record<string, string> = { [OWNERS.settlementLead]: 'settlement_report', [OWNERS.payouts]: 'payout_export' };
const FINAL = ['done', 'undeliverable', 'failed', 'skipped'];
const IN_FLIGHT = ['announced', 'held', 'approved', 'running', 'replaying', 'comparing'];

const stateOf = async (h: SlackHarness, id: number) =>
  (await h.engine.ctx.pool.query<{ state: string }>('SELECT state FROM backfill.backfills WHERE id = $1', [id])).rows[0]?.state;

async function announceSteps(h: SlackHarness, id: number): Promise<Record<string, string>> {
  const { rows } = await h.engine.ctx.pool.query<{ key: string; status: string }>(
    `SELECT step_key AS key, status FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = 'announce' ORDER BY step_key`, [id]);
  return Object.fromEntries(rows.map((row) => [row.key, row.status]));
}

/** Everything posted to the incident channel (top level and in threads), text and blocks. */
const incidentTexts = (h: SlackHarness) => h.slack.callsTo('chat.postMessage')
  .filter((c) => c.params.channel === INCIDENT_CHANNEL)
  .map((c) => `${String(c.params.text ?? '')} ${JSON.stringify(c.params.blocks ?? [])}`);

describe('an announcement Slack can never deliver', () => {
  let h: SlackHarness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it('is recorded as undeliverable, said in the incident channel, and the backfill runs to done once the other owner acknowledges and an operator overrides', async () => {
    h = await createSlackHarness({ ANNOUNCE_REMINDER_MS: '3600000' });
    const harness = h;
    // The first DM the bot opens is answered user_not_found: that owner has left the workspace. Both
    // announcements go out side by side, so which owner it is is read from the call, not assumed.
    harness.slack.failWith('conversations.open', 1, 'user_not_found');
    const started = await harness.command('start orders 2026-11-15 currency parsed as text');
    expect(started.reply).toMatch(/Backfill #1 created/);

    await waitUntil(async () => Object.values(await announceSteps(harness, 1)).every((status) => FINAL.includes(status)), 'both announce steps to finish', 30_000);
    const refusedCall = harness.slack.callsTo('conversations.open').find((c) => c.response.ok === false);
    expect(refusedCall?.response.error).toBe('user_not_found');
    const lostOwner = String(refusedCall?.params.users);
    const lostConsumer = CONSUMER_OF[lostOwner] ?? `(no consumer owned by ${lostOwner})`;
    const [otherOwner, otherConsumer] = Object.entries(CONSUMER_OF).find(([owner]) => owner !== lostOwner) ?? ['', ''];

    expect(await announceSteps(harness, 1)).toEqual({ [lostConsumer]: 'undeliverable', [otherConsumer]: 'done' });
    const consumer = await harness.engine.ctx.pool.query<{ undeliverable: string | null; at: Date | null }>(
      'SELECT undeliverable, undeliverable_at AS at FROM backfill.backfill_consumers WHERE backfill_id = 1 AND consumer = $1', [lostConsumer]);
    expect(consumer.rows[0]?.undeliverable).toBe('user_not_found');
    expect(consumer.rows[0]?.at).toBeInstanceOf(Date);
    // The incident channel hears it, with what to do about it.
    await waitUntil(() => incidentTexts(harness).some((t) => t.includes('user_not_found')), 'a notice naming user_not_found', 10_000).catch(() => undefined);
    const notice = incidentTexts(harness).find((t) => t.includes('user_not_found'));
    expect(notice, `incident channel:\n${incidentTexts(harness).join('\n')}`).toBeDefined();
    expect(notice).toMatch(new RegExp(`<@${lostOwner}>|${lostConsumer}`));
    expect(notice).toMatch(/override/);

    // The other owner acknowledges; the gate still waits for the owner Slack cannot reach, and status says so.
    await harness.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: otherConsumer }), otherOwner);
    expect(await stateOf(harness, 1)).toBe('announced');
    await harness.command('status 1');
    expect(JSON.stringify(harness.slack.responses.at(-1)?.body ?? {})).toMatch(new RegExp(`${lostConsumer}[^"]*(undeliverable|user_not_found|cannot|waiting)`));

    const overridden = await harness.command('override 1 the owner left the company; the finance lead agreed by phone');
    expect(overridden.reply).not.toMatch(/nothing changed/i);
    // Not stuck in approved: the run goes to the end.
    await waitUntil(async () => !IN_FLIGHT.includes((await stateOf(harness, 1)) ?? ''), 'the backfill to leave the in-flight states', 40_000).catch(() => undefined);
    expect(await stateOf(harness, 1)).toBe('done');
    expect((await announceSteps(harness, 1))[lostConsumer]).toBe('undeliverable');
    expect(harness.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === `D${lostOwner}`)).toEqual([]);
  }, 90_000);
});
