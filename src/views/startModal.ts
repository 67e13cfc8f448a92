import type { types } from '@slack/bolt';
import { MAX_REASON_LENGTH } from '../commands/schemas.js';
import type { Plan } from '../core/identify/plan.js';
import { planMessage } from './blocks.js';
import { context, fit, limitBlocks, LIMITS, section, type Block } from './layout.js';

// The modal that starts a backfill, built by pure functions: the form (pipeline, a night or an hour range, the
// reason, an optional plan id, and the incident channel when the modal was not opened from one), then the same
// form under the plan it would run, whose submit is "Announce". Each field is an input block of its own, so a
// refusal can be shown on the field it concerns (response_action: errors names a block id).

/** The callback ids: the global shortcut (manifest.yml) and the modal's two views. */
export const StartCallback = {
  shortcut: 'start_backfill',
  form: 'start_backfill_form',
  plan: 'start_backfill_plan',
} as const;

/** The block id of each field. */
export const StartField = {
  pipeline: 'start_pipeline',
  night: 'start_night',
  fromDate: 'start_from_date',
  fromTime: 'start_from_time',
  toDate: 'start_to_date',
  toTime: 'start_to_time',
  reason: 'start_reason',
  planId: 'start_plan_id',
  channel: 'start_channel',
} as const;
export type StartFieldName = keyof typeof StartField;

/** Every field's one element has this action id: its block says which field it is. */
export const FIELD_ACTION = 'value';

/** What the fields hold, as Slack sends it (a date YYYY-MM-DD, a time HH:mm, a conversation id). */
export type StartFormValues = Partial<Record<StartFieldName, string>>;

/** A select lists at most 100 options (Slack's limit). */
const MAX_OPTIONS = 100;
/** An option's text is at most 75 characters. */
const OPTION_TEXT = 75;

export interface StartFormInput {
  /** The catalog's pipelines, by name. */
  pipelines: readonly { name: string; targetTable: string }[];
  /** Opened from the shortcut or the Home tab: the incident channel is asked for. */
  askChannel: boolean;
  values: StartFormValues;
  /** Carried from view to view (src/slack/startModal.ts reads it). */
  privateMetadata: string;
}

const plain = (text: string): types.PlainTextElement => ({ type: 'plain_text', text });
const TITLE = plain('Start a backfill');
const CLOSE = plain('Cancel');

function input(field: StartFieldName, label: string, element: types.InputBlockElement, options: { optional?: boolean; hint?: string } = {}): Block {
  return {
    type: 'input',
    block_id: StartField[field],
    label: plain(label),
    element,
    optional: options.optional ?? false,
    ...(options.hint ? { hint: plain(options.hint) } : {}),
  };
}

function pipelineField(input_: StartFormInput): Block {
  const offered = input_.pipelines.slice(0, MAX_OPTIONS);
  const options = offered.map((p): types.PlainTextOption => ({ text: plain(fit(p.name, OPTION_TEXT)), value: p.name }));
  const chosen = options.find((o) => o.value === input_.values.pipeline);
  const more = input_.pipelines.length - offered.length;
  const hint = more > 0
    ? `The first ${offered.length} of ${input_.pipelines.length} pipelines, by name; \`/backfill plan <pipeline> <night>\` takes any of them. Leave it empty to give a plan id instead.`
    : 'Leave it empty to start from a plan id instead (below).';
  return input('pipeline', 'Pipeline', {
    type: 'static_select', action_id: FIELD_ACTION, placeholder: plain('Choose a pipeline'), options, ...(chosen ? { initial_option: chosen } : {}),
  }, { optional: true, hint });
}

const datepicker = (initial: string | undefined): types.Datepicker => ({ type: 'datepicker', action_id: FIELD_ACTION, ...(initial ? { initial_date: initial } : {}) });
// The partitions are hours of UTC: the picker says so under the time it shows.
const timepicker = (initial: string | undefined): types.Timepicker => ({ type: 'timepicker', action_id: FIELD_ACTION, timezone: 'UTC', ...(initial ? { initial_time: initial } : {}) });

/** The form's fields, filled with `values`. */
function formBlocks(input_: StartFormInput): Block[] {
  const { values } = input_;
  return [
    pipelineField(input_),
    input('night', 'Night (UTC)', datepicker(values.night), {
      optional: true, hint: 'The partitions of that date that the partition log flags as wrong or missing. Or give an hour range below instead.',
    }),
    input('fromDate', 'From: day (UTC)', datepicker(values.fromDate), { optional: true }),
    input('fromTime', 'From: hour (UTC)', timepicker(values.fromTime), { optional: true, hint: 'Partitions are hourly: on the hour, e.g. 05:00.' }),
    input('toDate', 'To: day (UTC)', datepicker(values.toDate), { optional: true }),
    input('toTime', 'To: hour (UTC, included)', timepicker(values.toTime), { optional: true }),
    input('reason', 'Reason', {
      type: 'plain_text_input', action_id: FIELD_ACTION, multiline: true, max_length: MAX_REASON_LENGTH,
      placeholder: plain('e.g. currency parsed as text'), ...(values.reason ? { initial_value: values.reason } : {}),
    }, { hint: `It goes into every announcement; at most ${MAX_REASON_LENGTH} characters (the whole story belongs in the incident).` }),
    input('planId', 'Plan id', {
      type: 'number_input', action_id: FIELD_ACTION, is_decimal_allowed: false, min_value: '1', ...(values.planId ? { initial_value: values.planId } : {}),
    }, { optional: true, hint: 'Start exactly what `/backfill plan` previewed as this id (its pipeline and target); refused if its inputs changed since.' }),
    ...(input_.askChannel
      ? [input('channel', 'Incident channel', {
        type: 'conversations_select', action_id: FIELD_ACTION, default_to_current_conversation: true,
        filter: { include: ['public', 'private'], exclude_bot_users: true }, ...(values.channel ? { initial_conversation: values.channel } : {}),
      }, { hint: 'The status message and every notice of the backfill go there; the bot must be a member.' })]
      : []),
  ];
}

/** The form, before any plan: its submit shows the plan. */
export function startFormView(input_: StartFormInput): types.ModalView {
  if (input_.pipelines.length === 0) {
    return {
      type: 'modal', callback_id: StartCallback.form, title: TITLE, close: plain('Close'), private_metadata: input_.privateMetadata,
      blocks: [section('The catalog has no pipelines yet: `npx backfill catalog apply <file.yml>` adds them.')],
    };
  }
  return {
    type: 'modal', callback_id: StartCallback.form, title: TITLE, submit: plain('Show the plan'), close: CLOSE, private_metadata: input_.privateMetadata,
    blocks: [
      context('A dry run first: the next screen shows the partitions, the readers, the signed figures and the watermark move. Nothing is announced before you press Announce there.'),
      ...formBlocks(input_),
    ],
  };
}

/**
 * The plan the form would run, above the same form: Announce starts it. A field changed here is planned again
 * first, so what is announced is always what was shown.
 */
export function startPlanView(input_: StartFormInput & { plan: Plan }): types.ModalView {
  const form = formBlocks(input_);
  const note = context('*Announce* creates the backfill, DMs the owners listed under "Waits for" and posts its status to the incident channel. ' +
    'Change a field and Announce shows its plan first.');
  const shown = limitBlocks(planMessage(input_.plan).blocks, LIMITS.viewBlocks - form.length - 2, 'the CLI\'s `backfill plan` shows the whole plan.');
  return {
    type: 'modal', callback_id: StartCallback.plan, title: TITLE, submit: plain('Announce'), close: CLOSE, private_metadata: input_.privateMetadata,
    blocks: [...shown, { type: 'divider' }, note, ...form],
  };
}

/**
 * Shown when the plan or the start takes longer than Slack waits for an answer: the view is updated with the
 * outcome when it comes.
 */
export function startWorkingView(what: 'plan' | 'start', privateMetadata: string): types.ModalView {
  return {
    type: 'modal', callback_id: StartCallback.form, title: TITLE, close: plain('Close'), private_metadata: privateMetadata,
    blocks: [section(what === 'plan'
      ? ':hourglass: Making the plan: this takes a moment for a large range. This window shows it when it is ready.'
      : ':hourglass: Starting the backfill: this window says when it is announced.')],
  };
}

/** What the start did, when it came too late to close the modal with. */
export function startDoneView(text: string): types.ModalView {
  return { type: 'modal', title: TITLE, close: plain('Close'), blocks: [section(text)] };
}

/**
 * The view with a note under each field a refusal concerns: how a refusal is shown when it came too late for
 * response_action: errors.
 */
export function withFieldNotes(view: types.ModalView, errors: Readonly<Record<string, string>>): types.ModalView {
  const blocks = view.blocks.flatMap((block) => {
    const message = block.block_id === undefined ? undefined : errors[block.block_id];
    return message === undefined ? [block] : [block, context(`:warning: ${message}`)];
  });
  return { ...view, blocks: limitBlocks(blocks, LIMITS.viewBlocks, 'submit again to see the rest.') };
}
