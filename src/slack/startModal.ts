import type { types, ViewResponseAction, ViewStateValue, webApi } from '@slack/bolt';
import { z } from 'zod';
import { frozenPlanTarget, listPipelines } from '../commands/catalogFacts.js';
import { rememberName, runCommand, type CommandFacts } from '../commands/run.js';
import { MAX_REASON_LENGTH, reasonTooLong } from '../commands/schemas.js';
import { findCommand } from '../commands/table.js';
import { recordingRefusals } from '../core/refusals.js';
import { parseDate, parseHour, parseTargetSpec } from '../core/time.js';
import { BackfillError, ErrorCode, isBackfillError } from '../errors.js';
import { codePointLabel, firstUnstorable, unescapeSlack } from '../markup.js';
import { textMessage, type Message } from '../views/blocks.js';
import { fit } from '../views/layout.js';
import { startedFromPlanReply, startedReply } from '../views/replies.js';
import {
  FIELD_ACTION, StartCallback, StartField, startDoneView, startFormView, startPlanView, startWorkingView, withFieldNotes,
  type StartFieldName, type StartFormInput, type StartFormValues,
} from '../views/startModal.js';
import { slackEffects, type SlackDeps } from './deps.js';

// The modal that starts a backfill (src/views/startModal.ts draws it). Opened by `/backfill` without arguments
// (the incident channel is the command's), by the "Start a backfill" shortcut or the Home tab's button (the
// modal asks for the channel). Its first submit runs the `plan` use case and shows the plan in the modal; the
// second, "Announce", runs `start`, exactly as `/backfill start <pipeline> <night|from..to> <reason>` would,
// and closes it. Each refusal is shown on the field it concerns (response_action: errors) and recorded like
// the typed command's; nothing else changes.
//
// Slack waits 3 seconds for the answer to a submission, and errors can only be shown in that answer. A plan or
// a start that takes longer (a large range's preview) is answered with a view that says it is under way, and
// the modal is updated with the outcome when it comes: a refusal then as a note under its field.

/** How long a submission's answer waits for the plan or the start: Slack gives up at 3 s, the network takes some. */
const ANSWER_WITHIN_MS = 2_000;

/** The longest refusal shown under a field (a hint's length). */
const FIELD_MESSAGE = 2_000;

/**
 * Carried in private_metadata: the channel the command came from (a DM with the bot too, as the typed command
 * takes it), and what the plan view shows.
 */
const metadataSchema = z.object({
  c: z.string().regex(/^[CGD][A-Z0-9]{2,}$/).optional(),
  p: z.object({ pipeline: z.string(), target: z.string(), planId: z.number().int().positive().optional() }).optional(),
});
type StartMetadata = z.infer<typeof metadataSchema>;

function parseMetadata(text: string): StartMetadata {
  try {
    return metadataSchema.parse(text === '' ? {} : JSON.parse(text));
  } catch {
    throw new BackfillError(ErrorCode.BadInput, 'This form is not one the bot opened; nothing was changed. `/backfill` opens a new one.');
  }
}

/** Where the modal was opened: the channel of a command; none from the shortcut or the Home tab. */
export interface StartOrigin {
  channel?: string | undefined;
}

/** The modal's first view: the form, with the catalog's pipelines. */
export async function startForm(deps: SlackDeps, origin: StartOrigin): Promise<types.ModalView> {
  const metadata: StartMetadata = origin.channel ? { c: origin.channel } : {};
  return startFormView({ pipelines: await listPipelines(deps.ctx), askChannel: !origin.channel, values: {}, privateMetadata: JSON.stringify(metadata) });
}

export interface StartSubmission {
  callbackId: string;
  user: string;
  userName?: string | undefined;
  values: Record<string, Record<string, ViewStateValue>>;
  privateMetadata: string;
}

/** The answer to a submission, the form as it was submitted (for a late refusal), and what to tell the person. */
interface StartOutcome {
  response: ViewResponseAction;
  form?: types.ModalView;
  reply?: { channel: string; message: Message };
}

/** What the form asks for, checked: a request the use cases take. */
interface StartRequest {
  pipeline: string;
  target: string;
  reason: string;
  planId: number | undefined;
  channel: string;
  /** The field the pipeline and the target were given in (a plan id stands for both). */
  pipelineField: StartFieldName;
  targetField: StartFieldName;
}

function readValues(state: StartSubmission['values']): StartFormValues {
  const get = (field: StartFieldName): ViewStateValue | undefined => state[StartField[field]]?.[FIELD_ACTION];
  const given = (value: string | null | undefined): string | undefined => (value ? value : undefined);
  return {
    pipeline: given(get('pipeline')?.selected_option?.value),
    night: given(get('night')?.selected_date),
    fromDate: given(get('fromDate')?.selected_date),
    fromTime: given(get('fromTime')?.selected_time),
    toDate: given(get('toDate')?.selected_date),
    toTime: given(get('toTime')?.selected_time),
    reason: given(get('reason')?.value),
    planId: given(get('planId')?.value?.trim()),
    channel: given(get('channel')?.selected_conversation),
  };
}

type FieldErrors = Partial<Record<StartFieldName, string>>;

/** A refusal shown on `field` (and recorded with its code, as any refusal is). */
function onField(error: BackfillError, field: StartFieldName): BackfillError {
  if (error.details.fields !== undefined) return error;
  return new BackfillError(error.code, error.message, { cause: error, details: { ...error.details, fields: { [field]: error.message } } });
}

function refuse(errors: FieldErrors): never {
  const first = Object.values(errors)[0] ?? 'The form is not complete.';
  throw new BackfillError(ErrorCode.BadInput, first, { details: { fields: errors } });
}

/** The same target as the typed command's: a night, or from..to in hours of UTC. */
function specKey(target: string): string {
  const spec = parseTargetSpec(target);
  return spec.kind === 'night' ? spec.date : `${spec.from.toISOString()}..${spec.to.toISOString()}`;
}

/** A target as the form's fields show it. */
function targetValues(target: string): StartFormValues {
  const spec = parseTargetSpec(target);
  if (spec.kind === 'night') return { night: spec.date };
  const day = (at: Date) => at.toISOString().slice(0, 10);
  const hour = (at: Date) => at.toISOString().slice(11, 16);
  return { fromDate: day(spec.from), fromTime: hour(spec.from), toDate: day(spec.to), toTime: hour(spec.to) };
}

/** The night or the hour range of the fields, as the typed command writes it; field errors into `errors`. */
function targetOf(values: StartFormValues, errors: FieldErrors): { target: string; field: StartFieldName } | undefined {
  const { night, fromDate, fromTime, toDate, toTime } = values;
  const anyRange = [fromDate, fromTime, toDate, toTime].some((v) => v !== undefined);
  if (night && anyRange) {
    errors.night = 'Give a night or an hour range, not both: clear one of them.';
    return undefined;
  }
  if (night) {
    try {
      parseDate(night);
      return { target: night, field: 'night' };
    } catch (error) {
      if (!isBackfillError(error)) throw error;
      errors.night = error.message;
      return undefined;
    }
  }
  if (!anyRange) return undefined;
  if (!fromDate) errors.fromDate = 'Which day does the range start on?';
  if (!fromTime) errors.fromTime = 'At which hour does the range start?';
  if (!toDate) errors.toDate = 'Which day does the range end on?';
  if (!toTime) errors.toTime = 'At which hour does the range end (included)?';
  if (!fromDate || !fromTime || !toDate || !toTime) return undefined;
  const hourOf = (text: string, field: StartFieldName): Date | undefined => {
    try {
      return parseHour(text);
    } catch (error) {
      if (!isBackfillError(error)) throw error;
      errors[field] = error.message;
      return undefined;
    }
  };
  const from = hourOf(`${fromDate}T${fromTime}`, 'fromTime');
  const to = hourOf(`${toDate}T${toTime}`, 'toTime');
  if (!from || !to) return undefined;
  if (from > to) {
    errors.toDate = 'The range ends before it starts: put the earlier hour in From.';
    return undefined;
  }
  return { target: `${fromDate}T${fromTime}..${toDate}T${toTime}`, field: 'fromDate' };
}

/** The reason as the typed command records it: its words, one space apart; unstorable or too long refused. */
function reasonOf(text: string | undefined, errors: FieldErrors): string {
  const raw = text ?? '';
  const at = firstUnstorable(raw);
  if (at >= 0) {
    errors.reason = `Character ${at + 1} of the reason is ${codePointLabel(raw, at)}, a control character or half of a UTF-16 pair, which is not text: type it again without it.`;
    return '';
  }
  const reason = raw.trim().split(/\s+/).filter(Boolean).join(' ');
  if (!reason) errors.reason = 'A backfill needs a reason, e.g. "currency parsed as text": it goes into every announcement.';
  else if (reason.length > MAX_REASON_LENGTH) errors.reason = reasonTooLong(reason.length);
  return reason;
}

/** The form's fields checked and read as a request; every field that is wrong is refused at once. */
async function checkForm(deps: SlackDeps, metadata: StartMetadata, values: StartFormValues): Promise<StartRequest> {
  const errors: FieldErrors = {};
  const channel = metadata.c ?? values.channel;
  if (!channel) errors.channel = 'Choose the incident channel: the status message and every notice of the backfill go there.';
  const reason = reasonOf(values.reason, errors);
  const given = targetOf(values, errors);
  let planId: number | undefined;
  let pipeline = values.pipeline ? { name: values.pipeline, field: 'pipeline' as StartFieldName } : undefined;
  let target = given;
  if (values.planId !== undefined) {
    planId = /^#?[1-9]\d{0,15}$/.test(values.planId) ? Number(values.planId.replace('#', '')) : undefined;
    const frozen = planId === undefined ? undefined : await frozenPlanTarget(deps.ctx, planId);
    if (planId === undefined) errors.planId = 'A plan id is a whole number such as 12, as `/backfill plan` shows it.';
    else if (!frozen) errors.planId = `There is no plan #${planId}: \`/backfill plan\` makes one and shows its id. Leave this empty to plan from the fields above.`;
    else if ((pipeline && pipeline.name !== frozen.pipeline) || (given && specKey(given.target) !== specKey(frozen.target))) {
      errors.planId = `Plan #${planId} previewed ${frozen.pipeline} ${frozen.target}: choose those above, or leave them empty to take them from the plan.`;
    } else {
      pipeline ??= { name: frozen.pipeline, field: 'planId' };
      target ??= { target: frozen.target, field: 'planId' };
    }
  } else {
    if (!pipeline) errors.pipeline = 'Choose a pipeline (or give a plan id below).';
    if (!target && Object.keys(errors).every((field) => !['night', 'fromDate', 'fromTime', 'toDate', 'toTime'].includes(field))) {
      errors.night = 'Choose a night, or a day and an hour for each end of an hour range below.';
    }
  }
  if (Object.keys(errors).length > 0 || !channel || !pipeline || !target) refuse(errors);
  return { pipeline: pipeline.name, target: target.target, reason, planId, channel, pipelineField: pipeline.field, targetField: target.field };
}

/** The field a use case's refusal concerns. */
function fieldOf(error: BackfillError, request: StartRequest): StartFieldName {
  switch (error.code) {
    case ErrorCode.UnknownPipeline: return request.pipelineField;
    case ErrorCode.BadInput:
    case ErrorCode.NothingToBackfill:
    case ErrorCode.RangeTooLong:
    case ErrorCode.Overlap: return request.targetField;
    case ErrorCode.WrongState: return request.planId === undefined ? request.pipelineField : 'planId';
    default: return 'pipeline';
  }
}

/** The rule of the command table, as the typed command is checked; a refusal shown on the field it concerns. */
async function authorize(deps: SlackDeps, actor: string, request: StartRequest, command: 'plan' | 'start', askChannel: boolean): Promise<void> {
  const spec = findCommand(command, 'slack');
  if (!spec) throw new Error(`the command table has no Slack command ${command}`);
  try {
    await deps.policy.authorize(actor, request.channel, spec);
  } catch (error) {
    if (!isBackfillError(error)) throw error;
    // Refused for the channel (BACKFILL_CHANNELS): on the channel's field when the form asked for it.
    const channels = deps.ctx.config.BACKFILL_CHANNELS;
    const forChannel = askChannel && channels.length > 0 && !channels.includes(request.channel);
    throw onField(error, forChannel ? 'channel' : 'pipeline');
  }
}

function samePlan(shown: StartMetadata['p'], request: StartRequest): boolean {
  return shown !== undefined && shown.pipeline === request.pipeline && shown.planId === request.planId && specKey(shown.target) === specKey(request.target);
}

function startedMessage(facts: CommandFacts): Message {
  if (facts.kind !== 'start') throw new Error(`start returned ${facts.kind}`);
  const { backfill, plan } = facts.started;
  return textMessage(facts.planId === undefined ? startedReply(backfill, plan.gateOwners) : startedFromPlanReply(backfill, facts.planId));
}

/** Each field's refusal by block id, as response_action: errors shows it (plain text, bounded). */
function blockErrors(fields: FieldErrors): Record<string, string> {
  return Object.fromEntries(Object.entries(fields).map(([field, message]) => [StartField[field as StartFieldName], fit(unescapeSlack(message), FIELD_MESSAGE)]));
}

/**
 * One submission of the modal: the plan shown (response_action: update) when the fields are new, the start when
 * they are what the plan view shows, or the refusals on their fields. Throws only what is not a refusal.
 */
async function submitStart(deps: SlackDeps, submission: StartSubmission): Promise<StartOutcome> {
  const { ctx } = deps;
  const actor = submission.user;
  const values = readValues(submission.values);
  let form: types.ModalView | undefined;
  try {
    const metadata = parseMetadata(submission.privateMetadata);
    const formInput: StartFormInput = { pipelines: await listPipelines(ctx), askChannel: metadata.c === undefined, values, privateMetadata: submission.privateMetadata };
    form = startFormView(formInput);
    if (submission.userName) await rememberName(ctx, actor, submission.userName);
    const announcing = submission.callbackId === StartCallback.plan;
    return await recordingRefusals(ctx, { actor, action: `/backfill ${announcing ? 'start' : 'plan'} (form)`, input: { ...values, channel: metadata.c ?? values.channel } }, async () => {
      const request = await checkForm(deps, metadata, values);
      const announce = announcing && samePlan(metadata.p, request);
      await authorize(deps, actor, request, announce ? 'start' : 'plan', formInput.askChannel);
      const { pipeline, target, reason, planId, channel } = request;
      const run = async (work: () => Promise<CommandFacts>): Promise<CommandFacts> => {
        try {
          return await work();
        } catch (error) {
          throw isBackfillError(error) ? onField(error, fieldOf(error, request)) : error;
        }
      };
      if (announce) {
        const facts = await run(() => runCommand(ctx, slackEffects(deps), { kind: 'start', pipeline, target, reason }, actor, { incidentChannel: channel, planId }));
        return { response: { response_action: 'clear' }, form, reply: { channel, message: startedMessage(facts) } };
      }
      const facts = await run(() => runCommand(ctx, slackEffects(deps), { kind: 'plan', pipeline, target, reason }, actor));
      if (facts.kind !== 'plan') throw new Error(`plan returned ${facts.kind}`);
      const shown: StartMetadata = { ...(metadata.c ? { c: metadata.c } : {}), p: { pipeline, target, ...(planId === undefined ? {} : { planId }) } };
      // A plan id's pipeline and target are filled in, so that the view shows what Announce starts.
      const filled: StartFormValues = { ...values, pipeline, ...(request.targetField === 'planId' ? targetValues(target) : {}) };
      const view = startPlanView({ ...formInput, values: filled, privateMetadata: JSON.stringify(shown), plan: facts.plan });
      return { response: { response_action: 'update', view }, form };
    });
  } catch (error) {
    if (!isBackfillError(error)) throw error;
    const fields = (error.details.fields as FieldErrors | undefined) ?? { pipeline: error.message };
    return { response: { response_action: 'errors', errors: blockErrors(fields) }, form };
  }
}

/** A failure that is no refusal, shown on the form's first field (the words come from the listener's one mapping). */
function failedOutcome(text: string): StartOutcome {
  return { response: { response_action: 'errors', errors: { [StartField.pipeline]: fit(text, FIELD_MESSAGE) } } };
}

/** The view a late outcome updates the modal to. */
function lateView(outcome: StartOutcome): types.ModalView {
  const { response } = outcome;
  switch (response.response_action) {
    case 'update':
    case 'push': return response.view.type === 'modal' ? response.view : startDoneView('Done.');
    case 'errors': return outcome.form ? withFieldNotes(outcome.form, response.errors) : startDoneView(Object.values(response.errors).join('\n'));
    case 'clear': return startDoneView(outcome.reply?.message.text ?? 'Done.');
    default: {
      const unknown: never = response;
      throw new Error(`no view for ${JSON.stringify(unknown)}`);
    }
  }
}

/**
 * What the typed command answers, to the person who submitted: ephemeral in the incident channel, or in their
 * DM with the bot when it cannot post there.
 */
async function tell(client: webApi.WebClient, user: string, reply: StartOutcome['reply']): Promise<void> {
  if (!reply) return;
  try {
    await client.chat.postEphemeral({ channel: reply.channel, user, ...reply.message });
  } catch {
    await client.chat.postMessage({ channel: user, ...reply.message });
  }
}

/**
 * Answers a submission within Slack's time: with the outcome when it comes in time, else with a view saying it
 * is under way, and the modal updated with the outcome once it is there. `explain` words a failure that is no
 * refusal (and logs it).
 */
export async function answerStartSubmission(
  deps: SlackDeps,
  client: webApi.WebClient,
  submission: StartSubmission & { viewId: string },
  ack: (response: ViewResponseAction) => Promise<void>,
  explain: (error: unknown) => string,
): Promise<void> {
  const work = submitStart(deps, submission).catch((error: unknown) => failedOutcome(explain(error)));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => { timer = setTimeout(() => resolve(undefined), ANSWER_WITHIN_MS); });
  const early = await Promise.race([work, late]);
  clearTimeout(timer);
  if (early) {
    await ack(early.response);
    await tell(client, submission.user, early.reply);
    return;
  }
  await ack({ response_action: 'update', view: startWorkingView(submission.callbackId === StartCallback.plan ? 'start' : 'plan', submission.privateMetadata) });
  const outcome = await work;
  await tell(client, submission.user, outcome.reply);
  await client.views.update({ view_id: submission.viewId, view: lateView(outcome) });
}
