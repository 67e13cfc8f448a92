import type { BackfillRow } from '../db/backfills.js';
import { formatHour, formatHourRange, formatMoney, formatSignedMoney, formatTime, slackPerson } from './format.js';
import { slackText } from '../markup.js';
import type { Decision, SharedPackage } from '../commands/run.js';

// What the slash command answers (ephemeral, to the person who typed it) and what it posts in the incident
// channel, in Slack's markup. Pure: the facts the core returned in, text out. Text from outside (a reason, a
// name) is escaped piece by piece (slackText), so the bot's own mentions stay live and nothing typed becomes one.

const outside = slackText;

type Started = Pick<BackfillRow, 'id' | 'partitionCount' | 'firstHour' | 'lastHour' | 'totalBefore'>;

const created = (b: Started) => `${b.partitionCount} partitions, ${formatHourRange(b.firstHour, b.lastHour)}, total before ${formatMoney(b.totalBefore)}`;

export function startedReply(backfill: Started, gateOwners: readonly string[]): string {
  const owners = gateOwners.map(slackPerson).join(', ');
  return `Backfill #${backfill.id} created: ${created(backfill)}. ${owners ? `Announced; it runs once ${owners} acknowledge.` : 'Nobody must acknowledge first: it runs now.'}`;
}

export function startedFromPlanReply(backfill: Started, planId: number): string {
  return `Backfill #${backfill.id} created from plan #${planId}, exactly as previewed: ${created(backfill)}.`;
}

function approvedNotice(actor: string, backfillId: number): string {
  return `:ballot_box_with_check: ${slackPerson(actor)} approved the size of backfill #${backfillId} as the second operator.`;
}

export function approvedReply(backfillId: number, result: { approved: boolean; waitingFor: { consumer: string; owner: string }[] }): string {
  return result.approved ? `Approved; every gate is open and backfill #${backfillId} runs.`
    : `Approved. Still waiting for: ${result.waitingFor.map((w) => `${outside(w.consumer)} (${slackPerson(w.owner)})`).join(', ')}.`;
}

export function stoppedNotice(actor: string, backfillId: number, reason: string, removed: number | Error): string {
  const jobs = typeof removed === 'number' ? `${removed} queued job(s) removed`
    : 'its queued jobs could not be taken off the queue now, and each finds it stopped and does nothing';
  return `:stop_sign: ${slackPerson(actor)} stopped backfill #${backfillId}: ${outside(reason)}. ` +
    `It is fenced: no write of it commits any more; ${jobs}. The prior rows of what was published are kept.`;
}

/** Nothing accepted: the backfill was paused for a change to its catalog, put back since (a breach's continue accepts at least one partition). */
export function continuedNotice(actor: string, backfillId: number, accepted: readonly Date[], reason: string): string {
  if (accepted.length === 0) {
    return `:arrow_forward: ${slackPerson(actor)} continued backfill #${backfillId}, its catalog as announced again: ${outside(reason)}. ` +
      'A partition outside its envelope, or another change to what it announced, pauses it again.';
  }
  return `:arrow_forward: ${slackPerson(actor)} accepted the difference of ${accepted.map(formatHour).join(', ')} and continued backfill #${backfillId}: ${outside(reason)}. ` +
    'Any other partition outside its envelope pauses it again.';
}

function rolledBackNotice(actor: string, backfillId: number, restored: number): string {
  return `:rewind: ${slackPerson(actor)} rolled back backfill #${backfillId}: ${restored} partition(s) hold their prior rows again; consumers replay now.`;
}

export function overriddenNotice(actor: string, backfillId: number, reason: string): string {
  return `:warning: ${slackPerson(actor)} overrode the missing acknowledgements of backfill #${backfillId}: ${outside(reason)}`;
}

export function overrideReply(backfillId: number, approved: boolean): string {
  return approved ? `Backfill #${backfillId} proceeds without the missing acknowledgements; the timeline keeps your reason.` : 'Nothing was missing: nothing changed.';
}

export function cancelledNotice(actor: string, backfillId: number, reason: string | undefined): string {
  return `:no_entry: ${slackPerson(actor)} cancelled backfill #${backfillId}${reason ? `: ${outside(reason)}` : ''}. Nothing was changed.`;
}

export function recentBackfillsReply(recent: readonly Pick<BackfillRow, 'id' | 'pipeline' | 'firstHour' | 'lastHour' | 'state' | 'diff'>[]): string {
  if (recent.length === 0) return 'No backfills yet.';
  return recent.map((b) => `#${b.id} ${outside(b.pipeline)} ${formatHourRange(b.firstHour, b.lastHour)}: *${b.state}*${b.diff === null ? '' : `, difference ${formatSignedMoney(b.diff)}`}`).join('\n');
}

export function signedReply(signed: { report: string; period: string; total: string; signedBy: string; signedAt: Date; signatureNumber: number }): string {
  return `Signed: ${outside(signed.report)} for ${outside(signed.period)} = *${formatMoney(signed.total)}* by ${slackPerson(signed.signedBy)} at ${formatTime(signed.signedAt)}` +
    `${signed.signatureNumber > 1 ? ` (signature ${signed.signatureNumber}; the earlier ones are kept)` : ''}.`;
}

/** Where `/backfill log <id>` put the package (src/slack/delivery/incidentPackageUpload.ts). */
export type PackageWhere = SharedPackage;

export function incidentPackageReply(backfillId: number, where: PackageWhere): string {
  switch (where.how) {
    case 'uploaded': return `The incident package of backfill #${backfillId} (Markdown and JSON) is in <#${where.channel}>'s incident thread.`;
    case 'unchanged':
      return `The incident package of backfill #${backfillId} has not changed since it was uploaded to <#${where.channel}>'s incident thread at ${formatTime(where.uploadedAt)} ` +
        `(file ${where.fileId}), so it was not uploaded again.`;
    case 'uploading': return `The incident package of backfill #${backfillId} is being uploaded to <#${where.channel}>'s incident thread by an earlier request; it is not uploaded twice.`;
    case 'no_channel': return `Backfill #${backfillId} has no incident channel (it was started from the CLI); export it with \`backfill export ${backfillId}\`.`;
    default: {
      const unreachable: never = where;
      return unreachable;
    }
  }
}

/** What an answered announcement shows where its buttons were. */
export function answeredLine(answer: { action: 'acknowledge' | 'hold'; actor: string; at: Date }): string {
  return answer.action === 'acknowledge' ? `:white_check_mark: Acknowledged by ${slackPerson(answer.actor)} at ${formatTime(answer.at)}.`
    : `:double_vertical_bar: Held by ${slackPerson(answer.actor)} at ${formatTime(answer.at)}. Nothing runs until you acknowledge.`;
}

/** An owner held a backfill: said in the incident channel. The consumer came with the button, so it is escaped too. */
export function heldNotice(user: string, backfillId: number, consumer: string): string {
  return `:double_vertical_bar: ${slackPerson(user)} held backfill #${backfillId} (${outside(consumer)}). Nothing runs until they acknowledge.`;
}

/** What the incident channel is told of a person's decision (src/commands/run.ts). */
export function decisionNotice(decision: Decision): string {
  switch (decision.kind) {
    case 'approved': return approvedNotice(decision.actor, decision.backfillId);
    case 'stopped': return stoppedNotice(decision.actor, decision.backfillId, decision.reason, decision.removed);
    case 'continued': return continuedNotice(decision.actor, decision.backfillId, decision.accepted, decision.reason);
    case 'rolled_back': return rolledBackNotice(decision.actor, decision.backfillId, decision.restored);
    case 'overridden': return overriddenNotice(decision.actor, decision.backfillId, decision.reason);
    case 'cancelled': return cancelledNotice(decision.actor, decision.backfillId, decision.reason);
    case 'held': return heldNotice(decision.actor, decision.backfillId, decision.consumer);
    default: {
      const unreachable: never = decision;
      return unreachable;
    }
  }
}
