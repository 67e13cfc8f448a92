// Driving the status message's buttons as people do, through the real Bolt receiver: read the buttons the bot last
// rendered, press one (a signed block_actions request with a trigger id of our own, so the views.open it leads to can
// be told apart), fill in and submit the confirmation it opened (a signed view_submission), and see what the bot
// answered: the modal, an ephemeral message, an error on a field, or the modal replaced by a refusal.

import { randomBytes } from 'node:crypto';
import { postBlockAction, postEvent, postViewSubmission, type RecordedCall } from '../../dev/slack-emulator/index.js';
import { ConfirmationField } from '../../src/views/statusActions.js';
import { INCIDENT_CHANNEL, SIGNING_SECRET, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);

/** A button of a rendered status message, as Slack would send it back. */
export interface StatusButton {
  actionId: string;
  value: string;
  label: string;
}

/** A rendered status message: its text (the title) and blocks, as the emulator was last sent them. */
export interface RenderedStatus {
  text: string;
  blocks: unknown[];
}

/** Every rendering of backfill `id`'s status message so far, oldest first (the post, then each chat.update). */
export async function statusRenderings(h: SlackHarness, id: number): Promise<RenderedStatus[]> {
  const { rows } = await h.engine.ctx.pool.query<{ ts: string | null }>('SELECT status_ts AS ts FROM backfill.backfills WHERE id = $1', [id]);
  const ts = rows[0]?.ts;
  if (!ts) return [];
  const of = (call: RecordedCall) => ({ text: String(call.params.text ?? ''), blocks: list(call.params.blocks) });
  const posted = h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === INCIDENT_CHANNEL && c.response.ts === ts);
  const updated = h.slack.callsTo('chat.update').filter((c) => c.params.channel === INCIDENT_CHANNEL && c.params.ts === ts && c.response.ok === true);
  return [...posted, ...updated].map(of);
}

/** What the status message shows now. */
export async function currentStatus(h: SlackHarness, id: number): Promise<RenderedStatus | undefined> {
  return (await statusRenderings(h, id)).at(-1);
}

/** The status buttons of a rendering, in the order shown. */
export function buttonsOf(rendering: RenderedStatus | undefined): StatusButton[] {
  return (rendering?.blocks ?? []).filter(isRecord).filter((b) => b.type === 'actions').flatMap((b) => list(b.elements)).filter(isRecord)
    .filter((e) => typeof e.action_id === 'string' && e.action_id.startsWith('backfill_status_'))
    .map((e) => ({ actionId: String(e.action_id), value: String(e.value), label: isRecord(e.text) ? String(e.text.text) : '' }));
}

/** Waits until the status message is rendered for `state` (its title names it) and returns its buttons. */
export async function buttonsWhen(h: SlackHarness, id: number, titleHas: string, timeoutMs = 30_000): Promise<StatusButton[]> {
  let found: RenderedStatus | undefined;
  await waitUntil(async () => {
    found = await currentStatus(h, id);
    return found?.text.includes(titleHas) === true;
  }, `the status message of #${id} to say "${titleHas}"`, timeoutMs);
  return buttonsOf(found);
}

export const labels = (buttons: StatusButton[]): string[] => buttons.map((b) => b.label);

export function button(buttons: StatusButton[], label: string): StatusButton {
  const found = buttons.find((b) => b.label === label);
  if (!found) throw new Error(`no ${label} button among ${labels(buttons).join(', ') || 'none'}`);
  return found;
}

const ephemeralsTo = (h: SlackHarness, user: string) => h.slack.callsTo('chat.postEphemeral').filter((c) => c.params.user === user);

/** A modal the bot opened (views.open) or answered with. */
export interface Modal {
  callback_id?: string;
  private_metadata?: string;
  blocks?: unknown[];
}

/** What a press led to: the confirmation opened, or the ephemeral refusal only the presser sees. */
export type PressOutcome = { modal: Modal } | { refused: string };

/**
 * Presses `pressed` as `user` in the incident channel, or on the Home tab (`onHome`: no channel; a refusal
 * comes back as a modal there, which is what it leads to), and waits for what it leads to.
 */
export async function pressStatus(h: SlackHarness, pressed: StatusButton, user: string, options: { onHome?: boolean } = {}): Promise<PressOutcome> {
  const triggerId = `${Date.now()}.${randomBytes(8).toString('hex')}`;
  const told = ephemeralsTo(h, user).length;
  const where = options.onHome ? { surface: 'home' as const } : { channel: INCIDENT_CHANNEL };
  const response = await postBlockAction(h.eventsUrl, SIGNING_SECRET, { user, actionId: pressed.actionId, value: pressed.value, triggerId, ...where });
  if (response.status !== 200) throw new Error(`the press answered HTTP ${response.status}`);
  const opened = () => h.slack.callsTo('views.open').find((c) => c.params.trigger_id === triggerId);
  await waitUntil(() => opened() !== undefined || ephemeralsTo(h, user).length > told, `what ${user}'s press of ${pressed.label} led to`);
  const view = opened()?.params.view;
  if (isRecord(view)) return { modal: view as Modal };
  return { refused: String(ephemeralsTo(h, user)[told]?.params.text) };
}

/** The status buttons of the Home tab the bot publishes for `user` when they open it. */
export async function homeButtons(h: SlackHarness, user: string): Promise<StatusButton[]> {
  const published = h.slack.callsTo('views.publish').length;
  await postEvent(h.eventsUrl, SIGNING_SECRET, { type: 'app_home_opened', user, channel: `D${user}`, tab: 'home' });
  const view = (await h.slack.waitFor('views.publish', published + 1)).at(-1)?.params.view;
  return buttonsOf({ text: '', blocks: isRecord(view) ? list(view.blocks) : [] });
}

export function modalOf(outcome: PressOutcome): Modal {
  if ('modal' in outcome) return outcome.modal;
  throw new Error(`the press was refused: ${outcome.refused}`);
}

/** The options a confirmation offers to pick from (a continue's partitions), by value. */
export function optionsOf(modal: Modal): string[] {
  const block = (modal.blocks ?? []).filter(isRecord).find((b) => b.block_id === ConfirmationField.Partitions.block);
  return list(isRecord(block?.element) ? block.element.options : []).filter(isRecord).map((o) => String(o.value));
}

/** What a submission led to: the modal closed and the person told (ephemerally), an error on a field, or a refusal in the modal. */
export type SubmitOutcome = { told: string } | { errors: Record<string, string> } | { refused: string };

export interface Filled {
  reason?: string;
  /** The values of the options picked (a continue's partitions as ISO hours). */
  partitions?: string[];
}

/** Submits `modal` as `user`, filled in, and waits for the outcome. */
export async function submitConfirmation(h: SlackHarness, modal: Modal, user: string, filled: Filled): Promise<SubmitOutcome> {
  const values: Record<string, Record<string, Record<string, unknown>>> = {};
  const blockIds = (modal.blocks ?? []).filter(isRecord).map((b) => b.block_id);
  if (blockIds.includes(ConfirmationField.Reason.block)) {
    values[ConfirmationField.Reason.block] = { [ConfirmationField.Reason.element]: { type: 'plain_text_input', value: filled.reason ?? null } };
  }
  if (blockIds.includes(ConfirmationField.Partitions.block)) {
    const selected = (filled.partitions ?? []).map((value) => ({ text: { type: 'plain_text', text: value }, value }));
    values[ConfirmationField.Partitions.block] = { [ConfirmationField.Partitions.element]: { type: 'multi_static_select', selected_options: selected } };
  }
  const told = ephemeralsTo(h, user).length;
  const response = await postViewSubmission(h.eventsUrl, SIGNING_SECRET, { user, view: { callbackId: modal.callback_id ?? '', privateMetadata: modal.private_metadata ?? '', values, blocks: modal.blocks ?? [] } });
  if (response.status !== 200) throw new Error(`the submission answered HTTP ${response.status}`);
  const body = await response.text();
  if (body) {
    const answer = JSON.parse(body) as { response_action?: string; errors?: Record<string, string>; view?: { blocks?: unknown[] } };
    if (answer.response_action === 'errors') return { errors: answer.errors ?? {} };
    return { refused: JSON.stringify(answer.view?.blocks ?? []) };
  }
  await waitUntil(() => ephemeralsTo(h, user).length > told, `what ${user} is told after submitting`, 30_000);
  return { told: String(ephemeralsTo(h, user)[told]?.params.text) };
}

/**
 * What a refusal must leave as it was (the timeline aside, where the refusal is recorded): states, steps,
 * targets, acknowledgements, overrides, approvals.
 */
export async function rowsFingerprint(h: SlackHarness): Promise<string> {
  const { rows } = await h.engine.ctx.pool.query<{ f: string }>(
    `SELECT md5(coalesce(string_agg(x, '|' ORDER BY x), '')) AS f FROM (
       SELECT concat_ws(',', 'b', id, state, paused_reason, stopped_by, rolled_back_by) FROM backfill.backfills
       UNION ALL SELECT concat_ws(',', 's', backfill_id, kind, step_key, status) FROM backfill.backfill_steps
       UNION ALL SELECT concat_ws(',', 't', backfill_id, partition_hour, status, accepted_by) FROM backfill.backfill_targets
       UNION ALL SELECT concat_ws(',', 'a', backfill_id, consumer) FROM backfill.acknowledgements
       UNION ALL SELECT concat_ws(',', 'o', backfill_id, consumer) FROM backfill.gate_overrides
       UNION ALL SELECT concat_ws(',', 'c', backfill_id, operator) FROM backfill.capacity_approvals
     ) q(x)`);
  return rows[0]?.f ?? '';
}

export async function stateOf(h: SlackHarness, id: number): Promise<string | undefined> {
  const { rows } = await h.engine.ctx.pool.query<{ state: string }>('SELECT state FROM backfill.backfills WHERE id = $1', [id]);
  return rows[0]?.state;
}

/** Waits until `count` announcements went out as DMs (the owners' buttons are there to press). */
export async function announcementsOut(h: SlackHarness, count: number): Promise<void> {
  await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length >= count, `${count} announcement(s)`);
}
