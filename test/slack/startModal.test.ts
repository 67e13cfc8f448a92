import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OWNERS } from '../../dev/demo/constants.js';
import { postEvent, postSlashCommand, type RecordedCall } from '../../dev/slack-emulator/index.js';
import { START_FORM_ACTION } from '../../src/views/blocks.js';
import { StartCallback, StartField } from '../../src/views/startModal.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, OPERATOR, SIGNING_SECRET, type ModalLike, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const REASON = 'currency parsed as text';
const NIGHT = { [StartField.pipeline]: 'orders', [StartField.night]: '2026-11-15', [StartField.reason]: REASON };
/** Elsewhere than the incident channel of the other tests: the shortcut's modal asks which. */
const CHOSEN_CHANNEL = 'C0WARROOM';

const text = (view: ModalLike | undefined): string => JSON.stringify(view?.blocks ?? []);
const openedView = (call: RecordedCall | undefined): ModalLike => (call?.params.view ?? {}) as ModalLike;
const blockIds = (view: ModalLike): string[] => (view.blocks ?? []).map((b) => (b as { block_id?: string }).block_id ?? '');
/** Top-level messages in a channel. */
const postsTo = (h: SlackHarness, channel: string) => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === channel && !c.params.thread_ts);

async function typeBackfill(h: SlackHarness, triggerId: string): Promise<number> {
  const response = await postSlashCommand(h.eventsUrl, SIGNING_SECRET, { text: '', user_id: OPERATOR, channel_id: INCIDENT_CHANNEL, response_url: h.slack.responseUrl(), trigger_id: triggerId });
  return response.status;
}

/** What a start writes, without its times and ids: compared between the form and the typed command. */
async function startRows(h: SlackHarness): Promise<unknown> {
  const q = async (sql: string) => (await h.engine.ctx.pool.query(sql)).rows;
  return {
    backfills: await q(`SELECT pipeline, reason, requested_by, first_hour, last_hour, partition_count, watermark_before, watermark_reset_to,
                               total_before::text, incident_channel, plan_id, limit_override, needs_second_approval FROM backfill.backfills ORDER BY id`),
    consumers: await q(`SELECT backfill_id, consumer, owner, notify_rule, dependency_rank, depends_on, read_directly, partitions_read, announcement
                        FROM backfill.backfill_consumers ORDER BY backfill_id, consumer`),
    targets: await q('SELECT backfill_id, partition_hour, rows_before, total_before::text, expected_rows, expected_total::text FROM backfill.backfill_targets ORDER BY 1, 2'),
    signoffs: await q('SELECT backfill_id, signoff_id, report, period, signed_total::text, total_before::text FROM backfill.backfill_signoffs ORDER BY 1, 2'),
    steps: await q(`SELECT backfill_id, kind, step_key FROM backfill.backfill_steps ORDER BY 1, 2, 3`),
    events: await q(`SELECT kind, actor, detail FROM backfill.events WHERE backfill_id IS NOT NULL AND kind IN ('planned', 'requested', 'announced') ORDER BY id`),
  };
}

describe('the start form, from /backfill in the incident channel', () => {
  let h: SlackHarness;
  let form: ModalLike;
  let planView: ModalLike;

  beforeAll(async () => {
    h = await createSlackHarness();
  });
  afterAll(async () => h.close());

  it('opens for `/backfill` without arguments with the trigger it came with, and `/backfill help` still answers help', async () => {
    expect(await typeBackfill(h, 'trigger.from.command')).toBe(200);
    const [opened] = await h.slack.waitFor('views.open');
    expect(opened?.params.trigger_id).toBe('trigger.from.command');
    form = openedView(opened);
    expect(form).toMatchObject({ type: 'modal', callback_id: StartCallback.form, submit: { text: 'Show the plan' } });
    expect(blockIds(form)).toEqual(expect.arrayContaining([StartField.pipeline, StartField.night, StartField.fromDate, StartField.fromTime,
      StartField.toDate, StartField.toTime, StartField.reason, StartField.planId]));
    // The channel is the command's: not asked for, carried along.
    expect(blockIds(form)).not.toContain(StartField.channel);
    expect(JSON.parse(form.private_metadata ?? '')).toEqual({ c: INCIDENT_CHANNEL });
    expect(text(form)).toContain('"value":"orders"');
    expect(text(form)).toContain('"max_length":500');
    const { reply } = await h.command('help');
    expect(reply).toContain('/backfill start orders 2026-11-15 currency parsed as text');
  });

  it('refuses an unknown pipeline on its field, and creates nothing', async () => {
    const { status, answer } = await h.submit(form, { ...NIGHT, [StartField.pipeline]: 'nope' });
    expect(status).toBe(200);
    expect(answer?.response_action).toBe('errors');
    expect(Object.keys(answer?.errors ?? {})).toEqual([StartField.pipeline]);
    expect(answer?.errors?.[StartField.pipeline]).toMatch(/There is no pipeline called "nope"\. Known pipelines: orders/);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.plans')).toBe(0);
    // Recorded like a typed refusal; no separate message.
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND detail->>'code' = 'unknown_pipeline'`)).toBe(1);
    expect(h.slack.callsTo('chat.postEphemeral')).toHaveLength(0);
  });

  it('refuses a night and a range at once, and an hour off the hour, each on its field', async () => {
    const both = await h.submit(form, { ...NIGHT, [StartField.fromDate]: '2026-11-15' });
    expect(both.answer).toEqual({ response_action: 'errors', errors: { [StartField.night]: 'Give a night or an hour range, not both: clear one of them.' } });
    const offHour = await h.submit(form, {
      ...NIGHT, [StartField.night]: null, [StartField.fromDate]: '2026-11-15', [StartField.fromTime]: '05:30', [StartField.toDate]: '2026-11-15', [StartField.toTime]: '10:00',
    });
    expect(offHour.answer?.errors).toEqual({ [StartField.fromTime]: '"2026-11-15T05:30" is not the start of an hour: partitions are hourly, e.g. 2026-11-15T05:00.' });
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.plans')).toBe(0);
  });

  it("refuses a non-operator's submission on the form, and creates nothing", async () => {
    const { answer } = await h.submit(form, NIGHT, 'U07INTRUDER');
    expect(answer?.response_action).toBe('errors');
    expect(answer?.errors?.[StartField.pipeline]).toMatch(/<@U07INTRUDER> is not a backfill operator, so cannot plan a backfill/);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.plans')).toBe(0);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = 'U07INTRUDER'`)).toBe(1);
  });

  it('shows the plan in the modal before anything is announced: partitions, readers, signed figures, size, the watermark move', async () => {
    const { answer } = await h.submit(form, NIGHT);
    expect(answer?.response_action).toBe('update');
    planView = answer?.view ?? {};
    expect(planView).toMatchObject({ callback_id: StartCallback.plan, submit: { text: 'Announce' } });
    const shown = text(planView);
    expect(shown).toContain('*6 partitions*, 05:00–10:00 on 2026-11-15');
    expect(shown).toContain('settlement_report (report), <@U07SETTLE>, told before');
    expect(shown).toContain('*1,284,310.55* signed by <@U07SETTLE>');
    expect(shown).toContain('*Watermark:*');
    expect(shown).toContain('*Size:*');
    // The form stays under the plan, filled in as submitted.
    expect(shown).toContain('"initial_date":"2026-11-15"');
    expect(shown).toContain(`"initial_value":"${REASON}"`);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.plans')).toBe(1);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
    expect(h.slack.callsTo('conversations.open')).toHaveLength(0);
  });

  it('announces backfill #1 on Announce with the rows and the reply of `/backfill start orders 2026-11-15 …`, and DMs each owner once', async () => {
    const { answer } = await h.submit(planView);
    expect(answer).toEqual({ response_action: 'clear' });
    await h.slack.waitFor('chat.postEphemeral');
    const [told] = h.slack.callsTo('chat.postEphemeral');
    expect(told?.params).toMatchObject({ channel: INCIDENT_CHANNEL, user: OPERATOR });

    const typed = await createSlackHarness();
    try {
      const { reply } = await typed.command(`start orders 2026-11-15 ${REASON}`);
      expect(told?.params.text).toBe(reply);
      expect(await startRows(h)).toEqual(await startRows(typed));
    } finally {
      await typed.close();
    }

    await waitUntil(() => postsTo(h, `D${OWNERS.settlementLead}`).length === 1 && postsTo(h, `D${OWNERS.payouts}`).length === 1, 'the two announcements');
    await waitUntil(async () => (await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE kind = 'announce' AND status <> 'done'`)) === 0, 'the announce steps done');
    expect(postsTo(h, `D${OWNERS.settlementLead}`)).toHaveLength(1);
    expect(postsTo(h, `D${OWNERS.payouts}`)).toHaveLength(1);
    await waitUntil(() => postsTo(h, INCIDENT_CHANNEL).length === 1, 'the status message');
  });

  it('a second Announce of the same plan starts nothing and says why on the night', async () => {
    const { answer } = await h.submit(planView);
    expect(answer?.response_action).toBe('errors');
    expect(answer?.errors?.[StartField.night]).toMatch(/Backfill #1 of orders .* is still in flight and overlaps/);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(1);
  });
});

describe('the start form, from the shortcut and the Home tab', () => {
  let h: SlackHarness;
  let form: ModalLike;
  let planView: ModalLike;

  beforeAll(async () => {
    h = await createSlackHarness();
  });
  afterAll(async () => h.close());

  it('is the shortcut both manifests declare', () => {
    for (const file of ['manifest.yml', 'manifest.socket.yml']) {
      const manifest = parse(readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8')) as { features: { shortcuts?: unknown[] } };
      expect(manifest.features.shortcuts).toEqual([expect.objectContaining({ type: 'global', callback_id: StartCallback.shortcut, name: 'Start a backfill' })]);
    }
  });

  it('opens the same form from the shortcut, asking for the incident channel', async () => {
    expect((await h.shortcut(StartCallback.shortcut)).status).toBe(200);
    const [opened] = await h.slack.waitFor('views.open');
    form = openedView(opened);
    expect(form.callback_id).toBe(StartCallback.form);
    expect(blockIds(form)).toContain(StartField.channel);
    expect(text(form)).toContain('"type":"conversations_select"');
    expect(form.private_metadata).toBe('{}');
  });

  it('refuses a submission without the channel on the channel field', async () => {
    const { answer } = await h.submit(form, NIGHT);
    expect(answer?.errors).toEqual({ [StartField.channel]: 'Choose the incident channel: the status message and every notice of the backfill go there.' });
  });

  it('answers within Slack\'s 3 s while the plan waits, and shows the plan in the modal when it comes', async () => {
    // A catalog apply holding the pipelines: the plan waits behind it for as long as it takes.
    const holder = await h.engine.ctx.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE backfill.pipelines IN ACCESS EXCLUSIVE MODE');
      const { answer } = await h.submit(form, { ...NIGHT, [StartField.channel]: CHOSEN_CHANNEL }, OPERATOR, { viewId: 'VSTARTFORM' });
      expect(answer?.response_action).toBe('update');
      expect(text(answer?.view)).toContain('Making the plan');
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const [updated] = await h.slack.waitFor('views.update');
    expect(updated?.params.view_id).toBe('VSTARTFORM');
    planView = openedView(updated);
    expect(planView.callback_id).toBe(StartCallback.plan);
    expect(text(planView)).toContain('*6 partitions*');
    expect(text(planView)).toContain(`"initial_conversation":"${CHOSEN_CHANNEL}"`);
  });

  it('plans again, announcing nothing, when a field of the plan view was changed', async () => {
    const { answer } = await h.submit(planView, {
      [StartField.night]: null, [StartField.fromDate]: '2026-11-15', [StartField.fromTime]: '05:00', [StartField.toDate]: '2026-11-15', [StartField.toTime]: '07:00',
    });
    expect(answer?.response_action).toBe('update');
    expect(answer?.view?.callback_id).toBe(StartCallback.plan);
    expect(text(answer?.view)).toContain('*3 partitions*, 05:00–07:00 on 2026-11-15');
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
  });

  it('takes the pipeline and the night from a plan id, and refuses one that does not match them on the plan id', async () => {
    const planId = String((await h.engine.ctx.pool.query<{ id: string }>('SELECT min(id)::text AS id FROM backfill.plans')).rows[0]?.id);
    const fromPlan = await h.submit(form, { [StartField.planId]: planId, [StartField.reason]: REASON, [StartField.channel]: CHOSEN_CHANNEL });
    expect(fromPlan.answer?.response_action).toBe('update');
    expect(text(fromPlan.answer?.view)).toContain('"initial_date":"2026-11-15"');
    expect(text(fromPlan.answer?.view)).toContain('"initial_option":{"text":{"type":"plain_text","text":"orders"},"value":"orders"}');
    const other = await h.submit(form, { ...NIGHT, [StartField.night]: '2026-11-14', [StartField.planId]: planId, [StartField.channel]: CHOSEN_CHANNEL });
    expect(other.answer?.errors).toEqual({ [StartField.planId]: `Plan #${planId} previewed orders 2026-11-15: choose those above, or leave them empty to take them from the plan.` });
    const none = await h.submit(form, { ...NIGHT, [StartField.planId]: '999', [StartField.channel]: CHOSEN_CHANNEL });
    expect(none.answer?.errors?.[StartField.planId]).toMatch(/^There is no plan #999/);
  });

  it('starts one backfill for two Announce submissions at once, followed in the chosen channel', async () => {
    const answers = await Promise.all([h.submit(planView), h.submit(planView)]);
    const actions = answers.map((a) => a.answer?.response_action).sort();
    expect(actions).toEqual(['clear', 'errors']);
    const refused = answers.find((a) => a.answer?.response_action === 'errors');
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(1);
    // The refusal names the one that was started: whichever submission drew the first id, the other's insert may
    // have drawn the next and commit first, so the number is read, not assumed.
    const started = (await h.engine.ctx.pool.query<{ id: string }>('SELECT id::text FROM backfill.backfills')).rows[0]?.id;
    expect(refused?.answer?.errors?.[StartField.night]).toMatch(new RegExp(`^Backfill #${started} of orders`));
    const { rows } = await h.engine.ctx.pool.query<{ channel: string }>('SELECT incident_channel AS channel FROM backfill.backfills');
    expect(rows).toEqual([{ channel: CHOSEN_CHANNEL }]);
    await waitUntil(() => postsTo(h, CHOSEN_CHANNEL).length === 1, 'the status message in the chosen channel');
    await h.slack.waitFor('chat.postEphemeral');
    expect(h.slack.callsTo('chat.postEphemeral').map((c) => c.params.channel)).toEqual([CHOSEN_CHANNEL]);
  });

  it('has a "Start a backfill" button on the Home tab that opens the form, and links each backfill in flight to its incident thread', async () => {
    await waitUntil(async () => (await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills WHERE status_ts IS NOT NULL')) === 1, 'the status message recorded');
    await postEvent(h.eventsUrl, SIGNING_SECRET, { type: 'app_home_opened', user: OPERATOR, channel: `D${OPERATOR}`, tab: 'home' });
    const [published] = await h.slack.waitFor('views.publish');
    const home = (published?.params.view ?? {}) as ModalLike;
    expect(home.blocks?.[0]).toMatchObject({ type: 'actions', elements: [{ type: 'button', action_id: START_FORM_ACTION, text: { text: 'Start a backfill' } }] });
    const statusTs = postsTo(h, CHOSEN_CHANNEL)[0]?.response.ts as string;
    expect(text(home)).toContain(`<https://harborlight.slack.com/archives/${CHOSEN_CHANNEL}/p${statusTs.replace('.', '')}|Incident thread> in <#${CHOSEN_CHANNEL}>`);
    expect(text(home)).toContain('payout_export');

    const opens = h.slack.callsTo('views.open').length;
    expect((await h.press(START_FORM_ACTION, '', OPERATOR)).status).toBe(200);
    const again = (await h.slack.waitFor('views.open', opens + 1)).at(-1);
    expect(openedView(again).callback_id).toBe(StartCallback.form);
    expect(blockIds(openedView(again))).toContain(StartField.channel);
  });
});
