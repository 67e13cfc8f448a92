import type { AnnouncementFacts, Notice } from '../core/notices.js';
import type { Direction } from '../core/money.js';
import { subtractMoney } from '../core/money.js';
import { formatHourRange, formatMoney, formatSignedMoney, formatTime, NONE, slackPerson } from './format.js';

// What the core tells people (src/core/notices.ts), in words. Pure. The same sentences in every view; only how
// a person is named differs: a Slack mention (slackPerson), a name on a terminal, name and id in a record.

/** How a view names a person: "<@U07SETTLE>" in Slack, "Settlement lead" on a terminal. */
export type NamePerson = (id: string) => string;

/**
 * How a view shows code-like words (a Slack error, a command to type): Slack's backticks there; a terminal and
 * a record show them plain.
 */
export type Quote = (text: string) => string;

export const backticks: Quote = (text) => `\`${text}\``;

const DIRECTION_TEXT: Record<Direction, string> = {
  down: 'down (the corrected total will be lower)',
  up: 'up (the corrected total will be higher)',
  unchanged: 'unchanged in total (rows change, the sum does not)',
};

export function announcementText(facts: AnnouncementFacts, name: NamePerson): string {
  const { reader } = facts;
  const title = facts.backfillId === null ? `Planned backfill of ${facts.pipeline}` : `Backfill #${facts.backfillId} of ${facts.pipeline}`;
  const lines = [
    `${title}: ${facts.partitionCount} partition${facts.partitionCount === 1 ? '' : 's'}, ${formatHourRange(facts.firstHour, facts.lastHour)}, will be replaced.`,
    `Why: ${facts.reason}`,
    reader.readDirectly
      ? `${reader.consumer} (${reader.kind}) read ${reader.partitionsRead} of them.`
      : `${reader.consumer} (${reader.kind}) depends on ${reader.dependsOn.join(', ')}, which read them.`,
    ...facts.signed.map((figure) =>
      `Signed figure: ${figure.report} for ${figure.period} = ${formatMoney(figure.total)}, signed by ${name(figure.signedBy)} at ${formatTime(figure.signedAt)}.`),
    `Expected direction of the change: ${DIRECTION_TEXT[facts.direction]}.`,
    `Expected new total for ${facts.days.join(', ')}: ${formatMoney(facts.expectedTotalAfter)} ` +
      `(${formatSignedMoney(subtractMoney(facts.expectedTotalAfter, facts.totalBefore))} from ${formatMoney(facts.totalBefore)} now), ` +
      (facts.previewedBy === 'estimate'
        ? "from the pipeline's estimate; each partition's rows and total are checked against it before it is published."
        : 'from a preview of the step; each partition is checked against it, row by row, before it is published.'),
    reader.notifyRule === 'before'
      ? `When: it runs once ${facts.gateOwners.map(name).join(', ')} acknowledge${facts.gateOwners.length === 1 ? 's' : ''}; nothing is deleted before. Please acknowledge or hold.`
      : 'When: as soon as the owners who must acknowledge have; you will be told the result after the run.',
    `Asked by ${name(facts.requestedBy)}.`,
  ];
  return lines.join('\n');
}

function staleReaderText(notice: Extract<Notice, { kind: 'stale_reader' }>['notice']): string {
  const before = notice.reportBefore === null ? 'its figure when you read it is not known' : `${formatMoney(notice.reportBefore)} when you read it`;
  const change = notice.reportBefore === null ? '' : ` (${formatSignedMoney(subtractMoney(notice.totalAfter, notice.reportBefore))})`;
  return `The ${notice.pipeline} numbers for ${formatHourRange(notice.firstHour, notice.lastHour)} are now real: those hours had not landed when ` +
    `${notice.consumer} read ${notice.hoursRead} of them (first at ${notice.firstReadAt.toISOString().slice(0, 16).replace('T', ' ')} UTC). ` +
    `For ${notice.period}: ${before}; ${formatMoney(notice.totalAfter)} now${change}. Re-run or re-read it before relying on it.`;
}

function undeliverableText(notice: Extract<Notice, { kind: 'undeliverable' }>, name: NamePerson, quote: Quote): string {
  const who = notice.owner ? `${name(notice.owner)} (${notice.consumer ?? ''})` : 'the incident channel';
  const answered = `(Slack answered ${quote(notice.slackError)})`;
  if (notice.step !== 'announce') {
    return `Backfill #${notice.backfillId}: the ${notice.step} message to ${who} cannot be delivered ${answered}. The run goes on; tell them another way.`;
  }
  return `Backfill #${notice.backfillId}: the announcement to ${who} cannot be delivered ${answered}. ` +
    `It still needs their acknowledgement: ask a delegate they named to acknowledge, or an operator can ${quote(`/backfill override ${notice.backfillId} <reason>`)}.`;
}

/**
 * The notice in words. `recorded` text was stored in Slack's markup by an earlier version; a terminal passes
 * it through its own translation (src/views/text.ts fromSlackMarkup).
 */
export function noticeText(notice: Notice, name: NamePerson, quote: Quote = backticks): string {
  switch (notice.kind) {
    case 'announcement':
      return announcementText(notice.facts, name);
    case 'recorded':
      return notice.text;
    case 'after_run':
      return `Backfill #${notice.backfillId} of ${notice.pipeline} has run (${notice.reason}): ${notice.consumer} was re-triggered. ` +
        `Total over the affected days ${formatMoney(notice.totalBefore)} → ${notice.totalAfter ? formatMoney(notice.totalAfter) : NONE}` +
        ` (difference ${notice.diff ? formatSignedMoney(notice.diff) : NONE}).`;
    case 'rolled_back':
      return `Backfill #${notice.backfillId} of ${notice.pipeline} was rolled back by ${name(notice.rolledBackBy ?? '?')}: the prior rows are restored and ${notice.consumer} was re-triggered on them. ` +
        `The figures are back to what they were before the backfill (total ${formatMoney(notice.totalBefore)}).`;
    case 'undeliverable':
      return undeliverableText(notice, name, quote);
    case 'stale_reader':
      return staleReaderText(notice.notice);
    default: {
      const unknown: never = notice;
      return unknown;
    }
  }
}

/** The notice as Slack shows it: people as mentions, a warning sign on what could not be delivered. */
export function slackNoticeText(notice: Notice): string {
  return `${notice.kind === 'undeliverable' ? ':warning: ' : ''}${noticeText(notice, slackPerson)}`;
}
