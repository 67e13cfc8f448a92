import type { AnnouncementFacts, Notice } from '../core/notices.js';
import type { Direction } from '../core/money.js';
import { subtractMoney } from '../core/money.js';
import { formatHourRange, formatMoney, formatSignedMoney, formatTime, NONE, slackPerson } from './format.js';
import { slackText } from '../markup.js';

// What the core tells people (src/core/notices.ts), in words. Pure. The same sentences in every view; only how
// a person is named differs: a Slack mention (slackPerson), a name on a terminal, name and id in a record.

/** How a view names a person: "<@U07SETTLE>" in Slack, "Settlement lead" on a terminal. */
export type NamePerson = (id: string) => string;

/**
 * How a view shows code-like words (a Slack error, a command to type): Slack's backticks there; a terminal and
 * a record show them plain.
 */
export type Quote = (text: string) => string;

/** Slack's code span; what is inside is escaped and cannot close it (src/markup.ts slackText). */
export const backticks: Quote = (text) => `\`${slackText(text)}\``;

const DIRECTION_TEXT: Record<Direction, string> = {
  down: 'down (the corrected total will be lower)',
  up: 'up (the corrected total will be higher)',
  unchanged: 'unchanged in total (rows change, the sum does not)',
};

/**
 * How a view shows text from outside (a reason, a name, another system's answer): Slack escapes its markup
 * (slackText), a terminal drops control characters (terminalText), a record escapes its own format.
 */
export type Outside = (text: string) => string;

/**
 * The announcement in its parts, so that a view can lay them out apart: the reason, the one part of any length,
 * can then never push the signed figures, the expected total or the ask out of a message.
 */
export interface AnnouncementParts {
  title: string;
  /** "Why: <reason>", the reason as `outside` shows it. */
  why: string;
  /** What is read, the signed figures, the expected direction and the expected new total. */
  facts: string[];
  /** When it runs, and what the owner is asked to do; who asked. */
  ask: string[];
}

export function announcementParts(facts: AnnouncementFacts, name: NamePerson, outside: Outside = slackText): AnnouncementParts {
  const { reader } = facts;
  const pipeline = outside(facts.pipeline);
  const consumer = outside(reader.consumer);
  const title = facts.backfillId === null ? `Planned backfill of ${pipeline}` : `Backfill #${facts.backfillId} of ${pipeline}`;
  return {
    title: `${title}: ${facts.partitionCount} partition${facts.partitionCount === 1 ? '' : 's'}, ${formatHourRange(facts.firstHour, facts.lastHour)}, will be replaced.`,
    why: `Why: ${outside(facts.reason)}`,
    facts: [
      reader.readDirectly
        ? `${consumer} (${outside(reader.kind)}) read ${reader.partitionsRead} of them.`
        : `${consumer} (${outside(reader.kind)}) depends on ${reader.dependsOn.map(outside).join(', ')}, which read them.`,
      ...facts.signed.map((figure) =>
        `Signed figure: ${outside(figure.report)} for ${outside(figure.period)} = ${formatMoney(figure.total)}, signed by ${name(figure.signedBy)} at ${formatTime(figure.signedAt)}.`),
      `Expected direction of the change: ${DIRECTION_TEXT[facts.direction]}.`,
      `Expected new total for ${facts.days.map(outside).join(', ')}: ${formatMoney(facts.expectedTotalAfter)} ` +
        `(${formatSignedMoney(subtractMoney(facts.expectedTotalAfter, facts.totalBefore))} from ${formatMoney(facts.totalBefore)} now), ` +
        (facts.previewedBy === 'estimate'
          ? "from the pipeline's estimate; each partition's rows and total are checked against it before it is published."
          : 'from a preview of the step; each partition is checked against it, row by row, before it is published.'),
    ],
    ask: [
      reader.notifyRule === 'before'
        ? `When: it runs once ${facts.gateOwners.map(name).join(', ')} acknowledge${facts.gateOwners.length === 1 ? 's' : ''}; nothing is deleted before. Please acknowledge or hold.`
        : 'When: as soon as the owners who must acknowledge have; you will be told the result after the run.',
      `Asked by ${name(facts.requestedBy)}.`,
    ],
  };
}

function announcementText(facts: AnnouncementFacts, name: NamePerson, outside: Outside = slackText): string {
  const parts = announcementParts(facts, name, outside);
  return [parts.title, parts.why, ...parts.facts, ...parts.ask].join('\n');
}

function staleReaderText(notice: Extract<Notice, { kind: 'stale_reader' }>['notice'], outside: Outside): string {
  const before = notice.reportBefore === null ? 'its figure when you read it is not known' : `${formatMoney(notice.reportBefore)} when you read it`;
  const change = notice.reportBefore === null ? '' : ` (${formatSignedMoney(subtractMoney(notice.totalAfter, notice.reportBefore))})`;
  return `The ${outside(notice.pipeline)} numbers for ${formatHourRange(notice.firstHour, notice.lastHour)} are now real: those hours had not landed when ` +
    `${outside(notice.consumer)} read ${notice.hoursRead} of them (first at ${notice.firstReadAt.toISOString().slice(0, 16).replace('T', ' ')} UTC). ` +
    `For ${outside(notice.period)}: ${before}; ${formatMoney(notice.totalAfter)} now${change}. Re-run or re-read it before relying on it.`;
}

function undeliverableText(notice: Extract<Notice, { kind: 'undeliverable' }>, name: NamePerson, quote: Quote, outside: Outside): string {
  const who = notice.owner ? `${name(notice.owner)} (${outside(notice.consumer ?? '')})` : 'the incident channel';
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
export function noticeText(notice: Notice, name: NamePerson, quote: Quote = backticks, outside: Outside = slackText): string {
  switch (notice.kind) {
    case 'announcement':
      return announcementText(notice.facts, name, outside);
    case 'recorded':
      return notice.text;
    case 'after_run':
      return `Backfill #${notice.backfillId} of ${outside(notice.pipeline)} has run (${outside(notice.reason)}): ${outside(notice.consumer)} was re-triggered. ` +
        `Total over the affected days ${formatMoney(notice.totalBefore)} → ${notice.totalAfter ? formatMoney(notice.totalAfter) : NONE}` +
        ` (difference ${notice.diff ? formatSignedMoney(notice.diff) : NONE}).`;
    case 'rolled_back':
      return `Backfill #${notice.backfillId} of ${outside(notice.pipeline)} was rolled back by ${name(notice.rolledBackBy ?? '?')}: the prior rows are restored and ${outside(notice.consumer)} was re-triggered on them. ` +
        `The figures are back to what they were before the backfill (total ${formatMoney(notice.totalBefore)}).`;
    case 'undeliverable':
      return undeliverableText(notice, name, quote, outside);
    case 'stale_reader':
      return staleReaderText(notice.notice, outside);
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
