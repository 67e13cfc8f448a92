import type { types } from '@slack/bolt';
import { z } from 'zod';
import { rememberName, runCommand, type CommandFacts, type UseCase } from '../commands/run.js';
import { MAX_REASON_LENGTH, reasonTooLong } from '../commands/schemas.js';
import { findCommand } from '../commands/table.js';
import type { BackfillReport } from '../core/file/status.js';
import { recordingRefusals } from '../core/refusals.js';
import { BackfillState } from '../core/states.js';
import { BackfillError, ErrorCode, isBackfillError } from '../errors.js';
import { codePointLabel, firstUnstorable } from '../markup.js';
import { approvedReply, overrideReply } from '../views/replies.js';
import {
  alreadyDoneSentence, ConfirmationField, confirmationModal, continueChoice, possibleActions, refusedModal, STATUS_ACTIONS, staleButtonSentence,
  type ConfirmationReference, type StatusAction, type StatusButtonReference,
} from '../views/statusActions.js';
import { jsonText } from './buttonValue.js';
import { slackEffects, type SlackDeps } from './deps.js';

// The buttons of the status message and the confirmations they open. A press is checked (who, and whether the
// backfill is still where the button was rendered) and opens a confirmation; its submission is checked again,
// since time passed and someone else may have acted, and then runs the typed command's use case with the typed
// command's rule. Every refusal is recorded in the timeline (recordingRefusals) and changes nothing else.

const referenceFields = { b: z.number().int().positive(), s: z.enum(BackfillState), a: z.enum(STATUS_ACTIONS) };
const buttonSchema = jsonText.pipe(z.object(referenceFields).transform((v): StatusButtonReference => ({ backfillId: v.b, state: v.s, action: v.a })));
const confirmationSchema = jsonText.pipe(z.object({ ...referenceFields, c: z.string().regex(/^[CDG][A-Z0-9]+$/) })
  .transform((v): ConfirmationReference => ({ backfillId: v.b, state: v.s, action: v.a, channel: v.c })));

const NOT_OURS = 'This button does not belong to a backfill\'s status message; nothing was changed.';

/** The commands a status button stands for: the typed ones, with the same schemas' shapes. */
type StatusCommand = Extract<UseCase, { kind: StatusAction }>;

/** Who pressed or submitted, as Slack says: the id, and the name it sent (kept for terminals). */
export interface Presser {
  user: string;
  userName?: string | undefined;
}

/** What a person did on the status message, as a timeline refusal records it. */
function request(who: Presser, reference: StatusButtonReference, input: Record<string, unknown>) {
  return { actor: who.user, action: `status button ${reference.action}`, backfillId: reference.backfillId, input: { renderedFor: reference.state, ...input } };
}

/** The typed command's rule (the command table), applied by the same policy as the slash command. */
async function authorizeAction(deps: SlackDeps, user: string, channel: string, action: StatusAction): Promise<void> {
  const spec = findCommand(action, 'slack');
  if (!spec) throw new Error(`the command table has no Slack command ${action}`);
  await deps.policy.authorize(user, channel, spec);
}

/** Where the backfill stands now, through the status use case (the front end reads no SQL of its own). */
async function currentReport(deps: SlackDeps, backfillId: number, actor: string): Promise<BackfillReport> {
  const facts = await runCommand(deps.ctx, slackEffects(deps), { kind: 'status', backfillId }, actor);
  if (facts.kind !== 'status') throw new Error(`status answered ${facts.kind}`);
  return facts.report;
}

/** Refuses a press or submission made for a state the backfill has left, or for an action it no longer offers. */
function refuseIfStale(reference: StatusButtonReference, report: BackfillReport): void {
  if (report.backfill.state === reference.state && possibleActions(report).includes(reference.action)) return;
  throw new BackfillError(ErrorCode.WrongState, alreadyDoneSentence(reference, report.backfill) ?? staleButtonSentence(reference, report.backfill.state));
}

/**
 * Where a status button was pressed: its message in a channel, or the Home tab, which has no channel and acts for
 * the backfill's incident channel, so that the channel rules (BACKFILL_CHANNELS) and the outcome's message are
 * those of a press on the status message.
 */
export type PressedIn = { channel: string } | { home: true };

/** The incident channel a press on the Home tab acts for; a backfill started from the CLI has none, and is acted on from the CLI. */
function incidentChannelOf(report: BackfillReport): string {
  const { id, incidentChannel } = report.backfill;
  if (incidentChannel) return incidentChannel;
  throw new BackfillError(ErrorCode.WrongState,
    `Backfill #${id} was started from the CLI and has no incident channel to act for: use \`npx backfill status ${id}\` and the command it names. Nothing was changed.`);
}

/**
 * A status button was pressed: the confirmation to open, or a refusal (thrown, recorded) for anyone the typed
 * command would refuse and for a button the backfill has moved on from.
 */
export async function pressStatusButton(deps: SlackDeps, who: Presser, pressedIn: PressedIn, value: string | undefined): Promise<types.ModalView> {
  const parsed = buttonSchema.safeParse(value ?? '');
  if (!parsed.success) throw new BackfillError(ErrorCode.BadInput, NOT_OURS);
  const reference = parsed.data;
  if (who.userName) await rememberName(deps.ctx, who.user, who.userName);
  return recordingRefusals(deps.ctx, request(who, reference, 'channel' in pressedIn ? { channel: pressedIn.channel } : { on: 'home' }), async () => {
    const confirmation = (report: BackfillReport, channel: string): types.ModalView => {
      refuseIfStale(reference, report);
      return confirmationModal(report, { ...reference, channel });
    };
    if ('channel' in pressedIn) {
      await authorizeAction(deps, who.user, pressedIn.channel, reference.action);
      return confirmation(await currentReport(deps, reference.backfillId, who.user), pressedIn.channel);
    }
    // From the Home tab the channel is the backfill's own: its report is read first, and the rules are that channel's.
    const report = await currentReport(deps, reference.backfillId, who.user);
    const channel = incidentChannelOf(report);
    await authorizeAction(deps, who.user, channel, reference.action);
    return confirmation(report, channel);
  });
}

/** The confirmation as submitted: what the person typed and picked, by block and element. */
export type SubmittedValues = Record<string, Record<string, { value?: string | null; selected_options?: { value: string }[] } | undefined>>;

/** What a submission comes to before anything runs: a field to correct, a refusal to show, or the command to run. */
export type CheckedConfirmation =
  | { kind: 'errors'; errors: Record<string, string> }
  | { kind: 'refused'; view: types.ModalView }
  | { kind: 'confirmed'; reference: ConfirmationReference; command: StatusCommand };

/** The reason as the typed command takes it (words joined by single spaces), or what is wrong with it. */
function readReason(values: SubmittedValues): { reason: string } | { error: string } {
  const raw = values[ConfirmationField.Reason.block]?.[ConfirmationField.Reason.element]?.value ?? '';
  const reason = raw.split(/\s+/).filter(Boolean).join(' ');
  if (!reason) return { error: 'A reason is needed: the timeline keeps it next to what you did.' };
  const at = firstUnstorable(reason);
  if (at >= 0) return { error: `Character ${at + 1} of the reason is ${codePointLabel(reason, at)}, a control character or half of a UTF-16 pair, which is not text: type it again without it.` };
  if (reason.length > MAX_REASON_LENGTH) return { error: reasonTooLong(reason.length) };
  return { reason };
}

/** The partitions picked, as hours; an option that is not an hour the modal offered is no pick of ours. */
function readPartitions(values: SubmittedValues): Date[] | undefined {
  const picked = values[ConfirmationField.Partitions.block]?.[ConfirmationField.Partitions.element]?.selected_options ?? [];
  const hours = picked.map((option) => new Date(option.value));
  return hours.every((hour, i) => !Number.isNaN(hour.getTime()) && hour.toISOString() === picked[i]?.value) ? hours : undefined;
}

function commandFor(reference: StatusButtonReference, reason: string, partitions: Date[]): StatusCommand {
  const { backfillId } = reference;
  switch (reference.action) {
    case 'stop': return { kind: 'stop', backfillId, reason };
    case 'continue': return { kind: 'continue', backfillId, reason, partitions };
    case 'rollback': return { kind: 'rollback', backfillId, reason };
    case 'approve': return { kind: 'approve', backfillId };
    case 'override': return { kind: 'override', backfillId, reason };
    default: {
      const unreachable: never = reference.action;
      return unreachable;
    }
  }
}

/**
 * A confirmation was submitted: its fields checked first (a wrong one is shown on the field), then the person
 * and the backfill's state again, as at the press (a refusal replaces the confirmation, saying why).
 */
export async function checkConfirmation(deps: SlackDeps, who: Presser, privateMetadata: string, values: SubmittedValues): Promise<CheckedConfirmation> {
  const parsed = confirmationSchema.safeParse(privateMetadata);
  if (!parsed.success) return { kind: 'refused', view: refusedModal(undefined, NOT_OURS) };
  const reference = parsed.data;
  // The size approval takes no reason, on any front end: its confirmation asks none.
  const reason = reference.action === 'approve' ? { reason: '' } : readReason(values);
  if ('error' in reason) return { kind: 'errors', errors: { [ConfirmationField.Reason.block]: reason.error } };
  const partitions = readPartitions(values);
  if (!partitions) return { kind: 'refused', view: refusedModal(reference, NOT_OURS) };
  const command = commandFor(reference, reason.reason, partitions);
  if (who.userName) await rememberName(deps.ctx, who.user, who.userName);
  let report: BackfillReport;
  try {
    report = await recordingRefusals(deps.ctx, request(who, reference, inputOf(reference, command)), async () => {
      await authorizeAction(deps, who.user, reference.channel, reference.action);
      const now = await currentReport(deps, reference.backfillId, who.user);
      refuseIfStale(reference, now);
      return now;
    });
  } catch (error) {
    if (isBackfillError(error)) return { kind: 'refused', view: refusedModal(reference, error.message) };
    throw error;
  }
  // A continue naming no partition accepts every one in breach: from the confirmation, only what was picked.
  if (command.kind === 'continue' && command.partitions.length === 0 && continueChoice(report)?.kind === 'partitions') {
    return { kind: 'errors', errors: { [ConfirmationField.Partitions.block]: 'Pick at least one partition: a continue accepts exactly the partitions picked.' } };
  }
  return { kind: 'confirmed', reference, command };
}

/** What the timeline keeps of a submission beside a refusal: where, and what was given. */
function inputOf(reference: ConfirmationReference, command: StatusCommand): Record<string, unknown> {
  return {
    channel: reference.channel,
    ...('reason' in command ? { reason: command.reason } : {}),
    ...('partitions' in command ? { partitions: command.partitions.map((hour) => hour.toISOString()) } : {}),
  };
}

/** What the typed command would have answered: the person who submitted sees the same. */
function confirmedReply(facts: CommandFacts): string {
  switch (facts.kind) {
    case 'stop': return `Backfill #${facts.backfillId} stopped and fenced.`;
    case 'continue': return `Backfill #${facts.backfillId} continues.`;
    case 'rollback': return `Backfill #${facts.backfillId} rolled back: ${facts.restored} partition(s) restored.`;
    case 'approve': return facts.result.changed ? approvedReply(facts.backfillId, facts.result)
      : `Backfill #${facts.backfillId} has its second operator's approval already: nothing changed.`;
    case 'override': return overrideReply(facts.backfillId, facts.approved);
    default: throw new Error(`a status button has no reply for ${facts.kind}`);
  }
}

/**
 * Runs a confirmed action: the typed command's use case, whose notices go to the incident channel as the typed
 * command's do. Returns what the person is told; a refusal (another operator was quicker, say) is recorded and
 * told as it stands now: "already stopped", or that the backfill moved on.
 */
export async function runConfirmedAction(deps: SlackDeps, who: Presser, confirmed: Extract<CheckedConfirmation, { kind: 'confirmed' }>): Promise<string> {
  const { reference, command } = confirmed;
  try {
    const facts = await recordingRefusals(deps.ctx, request(who, reference, inputOf(reference, command)), () => runCommand(deps.ctx, slackEffects(deps), command, who.user));
    return confirmedReply(facts);
  } catch (error) {
    if (!isBackfillError(error)) throw error;
    const now = await currentReport(deps, reference.backfillId, who.user).catch(() => undefined);
    if (!now) return error.message;
    return alreadyDoneSentence(reference, now.backfill) ?? (now.backfill.state === reference.state ? error.message : staleButtonSentence(reference, now.backfill.state));
  }
}
