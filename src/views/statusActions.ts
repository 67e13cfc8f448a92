import type { types } from '@slack/bolt';
import { MAX_REASON_LENGTH } from '../commands/schemas.js';
import { isCatalogPause } from '../core/catalog/catalogPause.js';
import type { BackfillReport } from '../core/file/status.js';
import type { BackfillRow } from '../db/backfills.js';
import { describeState, type BackfillState } from '../core/states.js';
import { slackText } from '../markup.js';
import { formatHour, formatHourRange, slackPerson } from './format.js';
import { section, sections, type Block } from './layout.js';

// The actions of the status message in the incident channel, and the confirmation each opens. Pure: a report in,
// blocks out. Which actions a state offers, in the order the buttons show them:
//
//   announced   Approve (when its size needs a second operator and none has approved it yet), Override (when an
//               owner's acknowledgement is missing, the owners listed in the confirmation), Stop
//   held        Approve (size, not yet approved), Stop. A hold is an owner's explicit "no": the gate refuses an
//               override of it.
//   approved, running, replaying, comparing
//               Stop
//   paused      Continue (accepting the partitions outside their envelope that the operator picks; with none to
//               pick once a catalog pause has its catalog back as announced; not at all while the catalog still
//               differs), Roll back (when it published anything), Stop
//   done, failed, stopped
//               Roll back (when it published anything)
//   cancelled, rolling_back, rolled_back
//               nothing
//
// A button carries the backfill, the action and the state it was rendered for, never more: who pressed it and
// whether that may be done now is decided on the server when it is pressed and again when the confirmation is
// submitted, by the same rules and use cases as the typed commands (src/slack/statusActions.ts).

export const StatusActionId = {
  Continue: 'backfill_status_continue',
  Approve: 'backfill_status_approve',
  Override: 'backfill_status_override',
  Rollback: 'backfill_status_rollback',
  Stop: 'backfill_status_stop',
} as const;

export const STATUS_ACTIONS = ['continue', 'approve', 'override', 'rollback', 'stop'] as const;
export type StatusAction = (typeof STATUS_ACTIONS)[number];

const ACTION_ID: Record<StatusAction, string> = {
  continue: StatusActionId.Continue,
  approve: StatusActionId.Approve,
  override: StatusActionId.Override,
  rollback: StatusActionId.Rollback,
  stop: StatusActionId.Stop,
};

/** What a status button carries: which backfill, which action, and the state the button was rendered for. */
export interface StatusButtonReference {
  backfillId: number;
  state: BackfillState;
  action: StatusAction;
}

function encodeStatusButton(reference: StatusButtonReference): string {
  return JSON.stringify({ b: reference.backfillId, s: reference.state, a: reference.action });
}

/** The confirmation modal: its callback id, and the block and element ids of what it asks. */
export const CONFIRMATION_CALLBACK_ID = 'backfill_status_confirm';
export const ConfirmationField = {
  Reason: { block: 'reason', element: 'reason_input' },
  Partitions: { block: 'partitions', element: 'partitions_input' },
} as const;

/** What the confirmation's private_metadata carries: the button's reference and the channel it was pressed in. */
export interface ConfirmationReference extends StatusButtonReference {
  channel: string;
}

function encodeConfirmation(reference: ConfirmationReference): string {
  return JSON.stringify({ b: reference.backfillId, s: reference.state, a: reference.action, c: reference.channel });
}

const STOPPABLE: readonly BackfillState[] = ['announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing'];
const ROLLBACK_FROM: readonly BackfillState[] = ['paused', 'done', 'failed', 'stopped'];
/** The most options a multi_static_select may hold. */
const MAX_OPTIONS = 100;

/** What a continue may accept now: nothing (a catalog pause with its catalog back), or some of these partitions; undefined when it is refused. */
export type ContinueChoice = { kind: 'catalog' } | { kind: 'partitions'; hours: Date[] };

export function continueChoice(report: BackfillReport): ContinueChoice | undefined {
  const { backfill } = report;
  if (backfill.state !== 'paused' || report.catalogChanged?.length) return undefined;
  if (isCatalogPause(backfill)) return { kind: 'catalog' };
  // NOTE: as continueBackfill's partitionsToAccept: duplicate keys are never accepted, whoever asks.
  const hours = report.targets.filter((t) => t.breach !== null && !/duplicate key/.test(t.breach)).map((t) => t.partitionHour);
  return hours.length > 0 ? { kind: 'partitions', hours } : undefined;
}

/** The "before" consumers whose owner has neither acknowledged nor been overridden. */
function missingOwners(report: BackfillReport): { consumer: string; owner: string }[] {
  return report.consumers.filter((c) => c.notifyRule === 'before' && !c.ackedAt && !c.overriddenBy).map((c) => ({ consumer: c.consumer, owner: c.owner }));
}

/**
 * The actions possible in the backfill's state, in the order they are shown. Approve is offered while the size
 * needs a second operator, nobody has given that approval yet and the gate is closed; once it is given the message
 * names who gave it instead, and a press of a button rendered before is refused as no longer possible.
 */
export function possibleActions(report: BackfillReport): StatusAction[] {
  const { state, needsSecondApproval } = report.backfill;
  const offered: Record<StatusAction, boolean> = {
    continue: continueChoice(report) !== undefined,
    approve: (state === 'announced' || state === 'held') && needsSecondApproval && report.secondApproval === null,
    override: state === 'announced' && missingOwners(report).length > 0,
    rollback: ROLLBACK_FROM.includes(state) && report.targets.some((t) => t.status === 'published'),
    stop: STOPPABLE.includes(state),
  };
  return STATUS_ACTIONS.filter((action) => offered[action]);
}

const LABEL: Record<StatusAction, string> = {
  continue: 'Continue…',
  approve: 'Approve size…',
  override: 'Override…',
  rollback: 'Roll back…',
  stop: 'Stop…',
};

const plain = (text: string): types.PlainTextElement => ({ type: 'plain_text', text });

/** The status message's buttons for the actions possible now; none when nothing is. */
export function statusActionsBlocks(report: BackfillReport): Block[] {
  const { id, state } = report.backfill;
  const actions = possibleActions(report);
  if (actions.length === 0) return [];
  return [{
    type: 'actions',
    // A new block id for every state: Slack asks for one when a message is updated.
    block_id: `status_${id}_${state}`,
    elements: actions.map((action): types.Button => ({
      type: 'button',
      action_id: ACTION_ID[action],
      text: plain(LABEL[action]),
      value: encodeStatusButton({ backfillId: id, state, action }),
      ...(action === 'continue' || action === 'approve' ? { style: 'primary' as const } : action === 'stop' ? { style: 'danger' as const } : {}),
    })),
  }];
}

/** A state as a sentence names it: "rolled back". */
const stateWord = (state: BackfillState): string => state.replace('_', ' ');
/** "a paused", "an announced". */
const aState = (state: BackfillState): string => `${/^[aeiou]/.test(state) ? 'an' : 'a'} ${stateWord(state)}`;

const ACTION_WORD: Record<StatusAction, string> = {
  continue: 'Continuing it', approve: 'A second approval', override: 'An override', rollback: 'Rolling it back', stop: 'Stopping it',
};

/** Why a press changed nothing when the backfill moved on since the button was rendered, or its action went. */
export function staleButtonSentence(reference: StatusButtonReference, now: BackfillState): string {
  if (now !== reference.state) {
    return `This button was for ${aState(reference.state)} backfill; it is now ${stateWord(now)} — the message shows what is possible now. Nothing was changed.`;
  }
  return `${ACTION_WORD[reference.action]} is no longer possible for backfill #${reference.backfillId} (${stateWord(now)}) — the message shows what is possible now. Nothing was changed.`;
}

const TITLE: Record<StatusAction, string> = {
  continue: 'Continue backfill', approve: 'Approve backfill', override: 'Override the gate', rollback: 'Roll back backfill', stop: 'Stop backfill',
};
const SUBMIT: Record<StatusAction, string> = {
  continue: 'Continue', approve: 'Approve', override: 'Override', rollback: 'Roll back', stop: 'Stop it',
};
/** Slack's limit on a modal's title. */
const TITLE_CHARS = 24;

/** What pressing the button does, said before it is done. */
function whatHappens(report: BackfillReport, action: StatusAction): string[] {
  const { id } = report.backfill;
  const published = report.targets.filter((t) => t.status === 'published').length;
  switch (action) {
    case 'stop':
      return [`Stops backfill #${id} for good: its queued jobs are taken off the queue and no write of it commits any more. ` +
        'What it published stays until it is rolled back. The incident channel is told, with your reason.'];
    case 'continue':
      return continueChoice(report)?.kind === 'catalog'
        ? ['Its catalog is as announced again: it runs on from where it paused, accepting nothing. A partition outside its envelope pauses it again.']
        : ['Accepts the difference of the partitions you pick, with your name and reason in the timeline, and runs the steps the pause blocked. ' +
          'Any other partition outside its envelope pauses it again.', ...breaches(report)];
    case 'rollback':
      return [`Restores the rows its publishes replaced in the ${published} partition(s) it published, keeping rows written since; then its consumers replay ` +
        'and their owners are told. It is refused, changing nothing, when a later backfill or another writer changed those partitions.'];
    case 'approve':
      return [`Approves the size of backfill #${id} as the second operator (not the one who asked for it). Your approval is kept with your name and the time; ` +
        'it runs once every owner has acknowledged too.'];
    case 'override':
      return ['Proceeds without the acknowledgements still missing. The timeline keeps your reason next to each:',
        ...missingOwners(report).map((m) => `• ${slackText(m.consumer)} (${slackPerson(m.owner)})`)];
    default: {
      const unreachable: never = action;
      return unreachable;
    }
  }
}

function breaches(report: BackfillReport): string[] {
  return ['*Outside their envelope:*', ...report.targets.filter((t) => t.breach !== null).map((t) => `• ${slackText(t.breach ?? '')}`)];
}

/** The partitions a continue may accept, to pick from: the first MAX_OPTIONS (the modal says so when there are more). */
function partitionsInput(hours: readonly Date[]): Block[] {
  const shown = hours.slice(0, MAX_OPTIONS);
  const note = hours.length > MAX_OPTIONS
    ? [section(`${hours.length} partitions are outside their envelope; the first ${MAX_OPTIONS} are listed. \`/backfill continue <id> <reason>\` accepts every one of them.`)]
    : [];
  return [...note, {
    type: 'input',
    block_id: ConfirmationField.Partitions.block,
    label: plain('Partitions to accept'),
    element: {
      type: 'multi_static_select',
      action_id: ConfirmationField.Partitions.element,
      placeholder: plain('Pick each partition whose difference you accept'),
      options: shown.map((hour) => ({ text: plain(formatHour(hour)), value: hour.toISOString() })),
    },
  }];
}

function reasonInput(action: StatusAction): Block {
  return {
    type: 'input',
    block_id: ConfirmationField.Reason.block,
    label: plain('Reason'),
    hint: plain(`Kept in the timeline and told in the incident channel; at most ${MAX_REASON_LENGTH} characters.`),
    element: {
      type: 'plain_text_input',
      action_id: ConfirmationField.Reason.element,
      multiline: true,
      min_length: 1,
      max_length: MAX_REASON_LENGTH,
      placeholder: plain(action === 'override' ? 'e.g. owner on leave, finance lead approved by phone' : 'e.g. wrong step version deployed'),
    },
  };
}

/**
 * The confirmation a status button opens: what will happen, then what it asks (the partitions a continue
 * accepts; a reason, which every action but the size approval keeps: approve takes none, on any front end).
 */
export function confirmationModal(report: BackfillReport, reference: ConfirmationReference): types.ModalView {
  const { backfill } = report;
  const { action } = reference;
  const title = `${TITLE[action]} #${backfill.id}`;
  const choice = action === 'continue' ? continueChoice(report) : undefined;
  return {
    type: 'modal',
    callback_id: CONFIRMATION_CALLBACK_ID,
    private_metadata: encodeConfirmation(reference),
    title: plain(title.length <= TITLE_CHARS ? title : TITLE[action]),
    submit: plain(SUBMIT[action]),
    close: plain('Cancel'),
    blocks: [
      section(`*Backfill #${backfill.id} of ${slackText(backfill.pipeline)}*, ${formatHourRange(backfill.firstHour, backfill.lastHour)}: ${describeState(backfill.state)}`),
      ...sections('', whatHappens(report, action)),
      ...(choice?.kind === 'partitions' ? partitionsInput(choice.hours) : []),
      ...(action === 'approve' ? [] : [reasonInput(action)]),
    ],
  };
}

/** The confirmation again, once a submission was refused for a reason no field holds: what was refused, and only Close. */
export function refusedModal(reference: StatusButtonReference | undefined, sentence: string): types.ModalView {
  const title = reference ? `${TITLE[reference.action]} #${reference.backfillId}` : 'Backfill';
  return {
    type: 'modal',
    callback_id: CONFIRMATION_CALLBACK_ID,
    title: plain(title.length <= TITLE_CHARS || !reference ? title : TITLE[reference.action]),
    close: plain('Close'),
    blocks: sections('', sentence.split('\n')),
  };
}

/**
 * A confirmed stop or rollback refused because someone else did it first: said as such, with who. Undefined for
 * any other refusal.
 */
export function alreadyDoneSentence(reference: StatusButtonReference, now: Pick<BackfillRow, 'state' | 'stoppedBy' | 'rolledBackBy'>): string | undefined {
  const by = (who: string | null) => (who ? ` by ${slackPerson(who)}` : '');
  if (reference.action === 'stop' && now.state === 'stopped') return `Backfill #${reference.backfillId} was already stopped${by(now.stoppedBy)}: nothing changed.`;
  if (reference.action === 'rollback' && (now.state === 'rolling_back' || now.state === 'rolled_back')) {
    return `Backfill #${reference.backfillId} was already rolled back${by(now.rolledBackBy)}: nothing changed.`;
  }
  return undefined;
}
