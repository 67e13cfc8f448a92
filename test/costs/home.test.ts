import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadBackfillCost } from '../../src/core/file/costs.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { postEvent } from '../../dev/slack-emulator/index.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { formatCount, formatDuration } from '../../src/views/costs.js';
import { createSlackHarness, SIGNING_SECRET, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

describe('the Home tab shows what backfills cost', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness();
    await h.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'announcements');
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    // Finished, and every message after the run sent: the cost is filed for the last time.
    await waitUntil(async () => (await h.engine.ctx.pool.query(
      `SELECT b.state = 'done' AND NOT EXISTS (SELECT 1 FROM backfill.backfill_steps s WHERE s.backfill_id = b.id AND s.status IN ('pending', 'running')) AS settled
       FROM backfill.backfills b WHERE b.id = 1`)).rows[0].settled === true, 'the backfill and its messages', 30_000);
  });
  afterAll(async () => h.close());

  it('publishes, for whoever opens it, the sums of this quarter per pipeline as the log rows filed them', async () => {
    const cost = await loadBackfillCost(h.engine.ctx.pool, 1);
    expect(cost).toMatchObject({ partitions: 6, replays: 3, peopleTold: 3, signedFiguresMoved: 1 });
    const { rows } = await h.engine.ctx.pool.query<{ quarter: string }>(`SELECT to_char(announced_at AT TIME ZONE 'UTC', 'YYYY-"Q"Q') AS quarter FROM backfill.backfills WHERE id = 1`);
    await postEvent(h.eventsUrl, SIGNING_SECRET, { type: 'app_home_opened', user: 'U07FINANCE', channel: 'DU07FINANCE', tab: 'home' });
    await waitUntil(() => h.slack.callsTo('views.publish').length === 1, 'views.publish');
    const publish = h.slack.callsTo('views.publish')[0];
    expect(publish?.params.user_id).toBe('U07FINANCE');
    const view = JSON.stringify(publish?.params.view);
    expect(view).toContain('What backfills cost');
    expect(view).toContain(`*${rows[0]?.quarter} · orders*: 1 backfill · 6 partitions, ${formatCount(cost?.rowsRewritten ?? -1)} rows rewritten · 3 replays · ` +
      `3 people told, ${formatDuration(cost?.ackWaitMs ?? -1)} waiting for acknowledgements (median ${formatDuration(cost?.ackWaitMs ?? -1)}) · ` +
      `compute ${formatDuration(cost?.computeMs ?? -1)} · 1 signed figure moved`);
    // Still the Home tab it was: the log row is there too.
    expect(view).toContain('#1 orders 05:00–10:00 on 2026-11-15: done');
  });
});
