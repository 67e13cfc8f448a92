import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OWNERS } from '../../dev/demo/constants.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { formatTime } from '../../src/views/format.js';
import { ConfirmationField } from '../../src/views/statusActions.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, OPERATOR, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';
import {
  announcementsOut, button, buttonsOf, buttonsWhen, homeButtons, labels, modalOf, optionsOf, pressStatus, rowsFingerprint, stateOf, submitConfirmation,
} from './statusActionsDriver.js';

const LEAD = 'U07LEAD';
const VISITOR = 'U07VISITOR';
const NIGHT = '2026-11-15';
const hour = (hh: string) => `${NIGHT}T${hh}:00:00.000Z`;

/** Top-level messages the bot posted in the incident channel (the status message, notices, the diff). */
const channelPosts = (h: SlackHarness) => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === INCIDENT_CHANNEL && !c.params.thread_ts);

async function acknowledge(h: SlackHarness, id: number, consumer: 'settlement_report' | 'payout_export'): Promise<void> {
  await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: id, consumer }), consumer === 'settlement_report' ? OWNERS.settlementLead : OWNERS.payouts);
}

/** After the preview, `orders` of an hour change upstream: its staged rows leave the envelope and its publish pauses the backfill. */
async function changeSource(h: SlackHarness, at: string, orders: number, by: string): Promise<void> {
  const { rowCount } = await h.engine.ctx.pool.query(
    `UPDATE warehouse.orders_raw SET amount_local = amount_local + $3::numeric
     WHERE event_hour = $1 AND order_id IN (SELECT order_id FROM warehouse.orders_raw WHERE event_hour = $1 ORDER BY order_id LIMIT $2)`, [at, orders, by]);
  expect(rowCount).toBe(orders);
}

/** Backfill #1's announce steps are done: until then the workers change its step rows on their own. */
const announceStepsDone = (h: SlackHarness) => waitUntil(async () =>
  (await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = 1 AND status NOT IN ('done', 'skipped')`)) === 0, 'the announce steps');

const eventsOf = async (h: SlackHarness, id: number, kind: string) =>
  (await h.engine.ctx.pool.query<{ actor: string; detail: Record<string, unknown> }>('SELECT actor, detail FROM backfill.events WHERE backfill_id = $1 AND kind = $2 ORDER BY id', [id, kind])).rows;

describe('the status message offers what the state allows, and each button does what the typed command does', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness({ BACKFILL_OPERATORS: `${OPERATOR},${LEAD}`, CAPACITY_LIMIT: '4' });
    await h.command(`start orders ${NIGHT} currency parsed as text`);
  });
  afterAll(async () => h.close());

  it('announced above the capacity limit: Approve, Override and Stop; held by an owner: Approve and Stop', async () => {
    expect(labels(await buttonsWhen(h, 1, 'announced'))).toEqual(['Approve size…', 'Override…', 'Stop…']);
    await h.press(ActionId.Hold, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    // A hold is an owner's "no": the gate refuses to override it, so it is not offered.
    expect(labels(await buttonsWhen(h, 1, 'held by an owner'))).toEqual(['Approve size…', 'Stop…']);
  });

  it('lists the missing owners in the override confirmation', async () => {
    await acknowledge(h, 1, 'settlement_report');
    const override = modalOf(await pressStatus(h, button(await buttonsWhen(h, 1, 'announced'), 'Override…'), OPERATOR));
    expect(JSON.stringify(override.blocks)).toContain(`payout_export (<@${OWNERS.payouts}>)`);
    expect(JSON.stringify(override.blocks)).not.toContain('settlement_report (');
  });

  it('Approve opens a confirmation without a reason, refuses the operator who asked, and approves as the second operator', async () => {
    await acknowledge(h, 1, 'payout_export');
    const approve = button(await buttonsWhen(h, 1, 'announced'), 'Approve size…');
    const byRequester = modalOf(await pressStatus(h, approve, OPERATOR));
    expect((byRequester.blocks ?? []).some((b) => (b as { block_id?: string }).block_id === ConfirmationField.Reason.block)).toBe(false);
    await announceStepsDone(h);
    const before = await rowsFingerprint(h);
    expect(await submitConfirmation(h, byRequester, OPERATOR, {})).toEqual({ told: expect.stringMatching(/asked for backfill #1, so cannot also be its second approval/) });
    expect(await rowsFingerprint(h)).toBe(before);
    const byLead = await submitConfirmation(h, modalOf(await pressStatus(h, approve, LEAD)), LEAD, {});
    expect(byLead).toEqual({ told: 'Approved; every gate is open and backfill #1 runs.' });
    expect(await eventsOf(h, 1, 'capacity_approved')).toEqual([expect.objectContaining({ actor: LEAD })]);
  });

  it('done: only Roll back, which restores the prior rows from its confirmation as `/backfill rollback` does', async () => {
    expect(labels(await buttonsWhen(h, 1, ': done', 60_000))).toEqual(['Roll back…']);
    // The diff went out with its per-partition table: the six partitions under the column heads.
    await waitUntil(() => channelPosts(h).some((c) => String(c.params.text).startsWith('Backfill #1 diff')), 'the diff');
    const diff = channelPosts(h).find((c) => String(c.params.text).startsWith('Backfill #1 diff'));
    expect((diff?.params.blocks as { type: string; rows?: unknown[] }[]).find((b) => b.type === 'table')?.rows).toHaveLength(7);
    // Said once in the blocks (the table), in full in the text a client shows where it renders no table.
    expect(JSON.stringify(diff?.params.blocks)).not.toContain('```');
    expect(String(diff?.params.text).split('\n').filter((line) => /^(```)?2026-11-15 \d\d:00 /.test(line))).toHaveLength(6);
    const rollback = modalOf(await pressStatus(h, button(await buttonsWhen(h, 1, ': done'), 'Roll back…'), LEAD));
    expect(await submitConfirmation(h, rollback, LEAD, { reason: 'finance wants the old figure until Monday' })).toEqual({ told: 'Backfill #1 rolled back: 6 partition(s) restored.' });
    expect(await eventsOf(h, 1, 'rolled_back')).toEqual([expect.objectContaining({ actor: LEAD, detail: expect.objectContaining({ reason: 'finance wants the old figure until Monday' }) })]);
    await waitUntil(async () => (await stateOf(h, 1)) === 'rolled_back', 'the rollback', 60_000);
    expect(await buttonsWhen(h, 1, 'rolled back')).toEqual([]);
  }, 120_000);
});

describe('a second operator approves before the owners answer', () => {
  const THIRD = 'U07THIRD';
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness({ BACKFILL_OPERATORS: `${OPERATOR},${LEAD},${THIRD}`, CAPACITY_LIMIT: '4' });
    await h.command(`start orders ${NIGHT} currency parsed as text`);
  });
  afterAll(async () => h.close());

  /** The chat.update calls that re-rendered backfill #1's status message, oldest first. */
  const statusUpdates = async () => {
    const { rows } = await h.engine.ctx.pool.query<{ ts: string | null }>('SELECT status_ts AS ts FROM backfill.backfills WHERE id = 1');
    return h.slack.callsTo('chat.update').filter((c) => c.params.channel === INCIDENT_CHANNEL && c.params.ts === rows[0]?.ts && c.response.ok === true)
      .map((c) => ({ text: String(c.params.text), blocks: c.params.blocks as unknown[] }));
  };

  it('the updated status message names who approved and when instead of Approve; a stale Approve is refused and changes nothing', async () => {
    const before = await buttonsWhen(h, 1, 'announced');
    expect(labels(before)).toEqual(['Approve size…', 'Override…', 'Stop…']);
    // A confirmation the third operator opens before the approval, and submits after it.
    const opened = modalOf(await pressStatus(h, button(before, 'Approve size…'), THIRD));
    const updatesBefore = (await statusUpdates()).length;

    const byLead = await submitConfirmation(h, modalOf(await pressStatus(h, button(before, 'Approve size…'), LEAD)), LEAD, {});
    expect(byLead).toEqual({ told: expect.stringMatching(/^Approved\. Still waiting for: settlement_report/) });
    const { rows: [given] } = await h.engine.ctx.pool.query<{ operator: string; at: Date }>('SELECT operator, at FROM backfill.capacity_approvals WHERE backfill_id = 1');
    expect(given?.operator).toBe(LEAD);
    let updated: Awaited<ReturnType<typeof statusUpdates>>[number] | undefined;
    await waitUntil(async () => {
      updated = (await statusUpdates()).slice(updatesBefore).find((u) => JSON.stringify(u.blocks).includes(`approved by <@${LEAD}>`));
      return updated !== undefined;
    }, 'the status message updated with the approval');
    expect(labels(buttonsOf(updated))).toEqual(['Override…', 'Stop…']);
    expect(JSON.stringify(updated?.blocks)).toContain(`second operator's approval (size over the capacity limits): approved by <@${LEAD}> at ${formatTime(given!.at)}`);
    expect(JSON.stringify(updated?.blocks)).not.toContain('approval of its size');

    // The Approve button rendered before: refused as no longer possible, for whoever presses it, changing nothing.
    await announceStepsDone(h);
    const rows = await rowsFingerprint(h);
    for (const who of [LEAD, THIRD]) {
      expect(await pressStatus(h, button(before, 'Approve size…'), who)).toEqual({
        refused: 'A second approval is no longer possible for backfill #1 (announced) — the message shows what is possible now. Nothing was changed.',
      });
    }
    expect(await submitConfirmation(h, opened, THIRD, {})).toEqual({ refused: expect.stringContaining('A second approval is no longer possible for backfill #1 (announced)') });
    expect(await rowsFingerprint(h)).toBe(rows);
    expect(await eventsOf(h, 1, 'capacity_approved')).toEqual([expect.objectContaining({ actor: LEAD })]);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND detail ->> 'action' = 'status button approve'`)).toBe(3);
  });
});

describe('Stop from the status message', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness();
    await h.command(`start orders ${NIGHT} currency parsed as text`);
  });
  afterAll(async () => h.close());

  it('refuses a non-operator ephemerally, opening nothing and changing nothing', async () => {
    const stop = button(await buttonsWhen(h, 1, 'announced'), 'Stop…');
    // The announcements delivered and their steps done: nothing moves but what the press might do.
    await announcementsOut(h, 2);
    await announceStepsDone(h);
    const before = await rowsFingerprint(h);
    const outcome = await pressStatus(h, stop, VISITOR);
    expect(outcome).toEqual({ refused: expect.stringMatching(/<@U07VISITOR> is not a backfill operator, so cannot stop a backfill/) });
    expect(h.slack.callsTo('chat.postEphemeral').at(-1)?.params.channel).toBe(INCIDENT_CHANNEL);
    expect(h.slack.callsTo('views.open')).toHaveLength(0);
    expect(await rowsFingerprint(h)).toBe(before);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = $1 AND detail ->> 'action' = 'status button stop'`, [VISITOR])).toBe(1);
  });

  it('stops it by an operator through the confirmation, with the rows `/backfill stop` writes', async () => {
    const modal = modalOf(await pressStatus(h, button(await buttonsWhen(h, 1, 'announced'), 'Stop…'), OPERATOR));
    expect(JSON.stringify(modal.blocks)).toContain('no write of it commits any more');
    expect(await submitConfirmation(h, modal, OPERATOR, { reason: '   ' })).toEqual({ errors: { reason: expect.stringMatching(/A reason is needed/) } });
    expect(await submitConfirmation(h, modal, OPERATOR, { reason: 'x'.repeat(501) })).toEqual({ errors: { reason: expect.stringMatching(/The reason is 501 characters long; at most 500/) } });
    expect(await stateOf(h, 1)).toBe('announced');
    expect(await submitConfirmation(h, modal, OPERATOR, { reason: 'the owners want the whole week redone' })).toEqual({ told: 'Backfill #1 stopped and fenced.' });
    await waitUntil(() => channelPosts(h).some((c) => String(c.params.text).includes('stopped backfill #1: the owners want the whole week redone. It is fenced')), 'the stop notice');

    // The same night stopped by the typed command: the same columns and the same events.
    await h.command(`start orders ${NIGHT} currency parsed as text`);
    await buttonsWhen(h, 2, 'announced');
    expect((await h.command('stop 2 the owners want the whole week redone')).reply).toBe('Backfill #2 stopped and fenced.');
    const { rows } = await h.engine.ctx.pool.query('SELECT id, state, stopped_by, stop_reason FROM backfill.backfills ORDER BY id');
    expect(rows.map(({ id: _, ...row }) => row)).toEqual([0, 1].map(() => ({ state: 'stopped', stopped_by: OPERATOR, stop_reason: 'the owners want the whole week redone' })));
    for (const kind of ['stopped', 'state_changed']) {
      const shape = async (id: number) => (await eventsOf(h, id, kind)).map((e) => ({ actor: e.actor, keys: Object.keys(e.detail).sort(), to: e.detail.to ?? null }));
      expect(await shape(1)).toEqual(await shape(2));
    }
    // Stopped with nothing published: nothing more to do from the message.
    expect(await buttonsWhen(h, 1, 'stopped')).toEqual([]);
  });
});

describe('the same actions on the Home tab', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness();
    await h.command(`start orders ${NIGHT} currency parsed as text`);
  });
  afterAll(async () => h.close());

  it('shows each backfill in flight with the buttons its status message has, and acts for its incident channel', async () => {
    const inChannel = await buttonsWhen(h, 1, 'announced');
    await announcementsOut(h, 2);
    await announceStepsDone(h);
    expect(labels(await homeButtons(h, OPERATOR))).toEqual(labels(inChannel));
    const stop = button(await homeButtons(h, OPERATOR), 'Stop…');

    // Someone the typed command refuses: the refusal in a modal (the Home tab has no channel), nothing changed.
    const before = await rowsFingerprint(h);
    const refused = modalOf(await pressStatus(h, stop, VISITOR, { onHome: true }));
    expect(JSON.stringify(refused.blocks)).toMatch(/is not a backfill operator, so cannot stop a backfill/);
    expect(refused).not.toHaveProperty('submit');
    expect(await rowsFingerprint(h)).toBe(before);

    // An operator: the same confirmation, for the incident channel, and the backfill stops.
    const modal = modalOf(await pressStatus(h, stop, OPERATOR, { onHome: true }));
    expect(JSON.parse(modal.private_metadata ?? '{}')).toMatchObject({ b: 1, a: 'stop', c: INCIDENT_CHANNEL });
    expect(await submitConfirmation(h, modal, OPERATOR, { reason: 'stopped from the Home tab' })).toEqual({ told: 'Backfill #1 stopped and fenced.' });
    expect(await stateOf(h, 1)).toBe('stopped');
    expect(labels(await homeButtons(h, OPERATOR))).toEqual([]);

    // The button pressed again once it is stale: refused as no longer possible, in a modal.
    expect(JSON.stringify(modalOf(await pressStatus(h, stop, OPERATOR, { onHome: true })).blocks)).toMatch(/already stopped|no longer possible/);
  });

  it('refuses a press for a backfill with no incident channel (started from the CLI), saying where to act, changing nothing', async () => {
    await h.command(`start orders ${NIGHT} currency parsed as text`);
    const stop = button(await buttonsWhen(h, 2, 'announced'), 'Stop…');
    await h.engine.ctx.pool.query('UPDATE backfill.backfills SET incident_channel = NULL WHERE id = 2');
    // Its announce steps done: until then the workers change its step rows on their own.
    await waitUntil(async () =>
      (await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = 2 AND status NOT IN ('done', 'skipped', 'undeliverable')`)) === 0, 'the announce steps of #2');
    const before = await rowsFingerprint(h);
    const refused = modalOf(await pressStatus(h, stop, OPERATOR, { onHome: true }));
    expect(JSON.stringify(refused.blocks)).toContain('Backfill #2 was started from the CLI and has no incident channel to act for: use `npx backfill status 2`');
    expect(await rowsFingerprint(h)).toBe(before);
    expect(await stateOf(h, 2)).toBe('announced');
  });
});

describe('two operators press Stop at once', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness({ BACKFILL_OPERATORS: `${OPERATOR},${LEAD}` });
    await h.command(`start orders ${NIGHT} currency parsed as text`);
  });
  afterAll(async () => h.close());

  it('one stops it, the other is told it was already stopped; a confirmation opened before is refused in its modal', async () => {
    const buttons = await buttonsWhen(h, 1, 'announced');
    const [mine, theirs, override] = [
      modalOf(await pressStatus(h, button(buttons, 'Stop…'), OPERATOR)),
      modalOf(await pressStatus(h, button(buttons, 'Stop…'), LEAD)),
      modalOf(await pressStatus(h, button(buttons, 'Override…'), LEAD)),
    ];
    const outcomes = await Promise.all([
      submitConfirmation(h, mine, OPERATOR, { reason: 'wrong step deployed' }),
      submitConfirmation(h, theirs, LEAD, { reason: 'wrong step deployed, stopping too' }),
    ]);
    // The other is told after its confirmation closed, or in it, when the stop landed before its submission was checked.
    const told = outcomes.map((o) => ('told' in o ? o.told : JSON.stringify(o))).sort();
    expect(told).toEqual([
      'Backfill #1 stopped and fenced.',
      expect.stringMatching(/Backfill #1 was already stopped by <@U07(ONCALL|LEAD)>: nothing changed\./),
    ]);
    expect(await eventsOf(h, 1, 'stopped')).toHaveLength(1);
    const before = await rowsFingerprint(h);
    const late = await submitConfirmation(h, override, LEAD, { reason: 'owner on leave' });
    expect(late).toEqual({ refused: expect.stringContaining('This button was for an announced backfill; it is now stopped — the message shows what is possible now.') });
    expect(await rowsFingerprint(h)).toBe(before);
  });
});

describe('a backfill paused for a partition outside its envelope', () => {
  let h: SlackHarness;
  let firstPause: Awaited<ReturnType<typeof buttonsWhen>>;
  beforeAll(async () => {
    h = await createSlackHarness({ WAVE_SIZE: '4', WORKER_CONCURRENCY: '1' });
    await h.command(`start orders ${NIGHT} currency parsed as text`);
    // 07:00 (first wave) and 10:00 (second wave) change upstream after the preview: each pauses the run at its publish.
    await changeSource(h, hour('07'), 2, '50.00');
    await changeSource(h, hour('10'), 2, '75.00');
    await announcementsOut(h, 2);
    await acknowledge(h, 1, 'settlement_report');
    await acknowledge(h, 1, 'payout_export');
  });
  afterAll(async () => h.close());

  it('offers Continue, Roll back and Stop; the continue lists the partitions outside their envelope to pick from', async () => {
    firstPause = await buttonsWhen(h, 1, 'paused', 60_000);
    expect(labels(firstPause)).toEqual(['Continue…', 'Roll back…', 'Stop…']);
    const modal = modalOf(await pressStatus(h, button(firstPause, 'Continue…'), OPERATOR));
    expect(optionsOf(modal)).toEqual([hour('07')]);
    expect(await submitConfirmation(h, modal, OPERATOR, { reason: 'repriced upstream', partitions: [] }))
      .toEqual({ errors: { partitions: expect.stringMatching(/Pick at least one partition/) } });
    expect(await stateOf(h, 1)).toBe('paused');
  }, 90_000);

  it('accepts exactly the partitions picked: 07:00, not 10:00, which pauses it again for its own acceptance', async () => {
    const modal = modalOf(await pressStatus(h, button(firstPause, 'Continue…'), OPERATOR));
    expect(await submitConfirmation(h, modal, OPERATOR, { reason: 'three orders were repriced upstream', partitions: [hour('07')] })).toEqual({ told: 'Backfill #1 continues.' });
    expect((await eventsOf(h, 1, 'continued')).map((e) => e.detail.accepted)).toEqual([['2026-11-15 07:00']]);
    const again = await waitForSecondPause(h);
    const { rows } = await h.engine.ctx.pool.query<{ hour: Date; acceptedBy: string | null }>(
      'SELECT partition_hour AS hour, accepted_by AS "acceptedBy" FROM backfill.backfill_targets WHERE backfill_id = 1 AND accepted_by IS NOT NULL');
    expect(rows.map((r) => r.hour.toISOString())).toEqual([hour('07')]);
    expect(optionsOf(modalOf(await pressStatus(h, button(again, 'Continue…'), OPERATOR)))).toEqual([hour('10')]);
  }, 90_000);

  it('refuses a button rendered for the paused backfill once it runs again, changing nothing', async () => {
    const again = await buttonsWhen(h, 1, 'paused');
    const modal = modalOf(await pressStatus(h, button(again, 'Continue…'), OPERATOR));
    expect(await submitConfirmation(h, modal, OPERATOR, { reason: 'the 10:00 repricing is real too', partitions: [hour('10')] })).toEqual({ told: 'Backfill #1 continues.' });
    const stale = await pressStatus(h, button(again, 'Stop…'), OPERATOR);
    expect(stale).toEqual({ refused: expect.stringMatching(/^This button was for a paused backfill; it is now (running|replaying|comparing|done) — the message shows what is possible now\. Nothing was changed\.$/) });
    await waitUntil(async () => (await stateOf(h, 1)) === 'done', 'the run', 60_000);
    expect(await eventsOf(h, 1, 'stopped')).toHaveLength(0);
    expect(labels(await buttonsWhen(h, 1, ': done'))).toEqual(['Roll back…']);
  }, 90_000);
});

/** The second pause (10:00) shows in the status message: a rendering after the continue, paused again. */
async function waitForSecondPause(h: SlackHarness): Promise<Awaited<ReturnType<typeof buttonsWhen>>> {
  await waitUntil(async () => (await stateOf(h, 1)) === 'paused' && (await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = 1 AND kind = 'paused'`)) === 2,
    'the second pause', 60_000);
  await waitUntil(async () => {
    const paused = await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfills WHERE id = 1 AND paused_reason LIKE '%10:00%'`);
    return paused === 1;
  }, 'the 10:00 pause');
  return buttonsWhen(h, 1, 'paused');
}
