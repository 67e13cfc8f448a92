import { mention } from '../messenger.js';
import { formatMoney, formatSignedMoney, subtractMoney, type Direction } from '../money.js';
import type { BackfillRow } from '../../db/backfills.js';
import type { Reader } from '../../db/readLog.js';
import type { SignedFigure } from '../../db/signatures.js';
import { formatHourRange, formatTime } from '../time.js';

export interface AnnouncementInput extends Pick<BackfillRow, 'pipeline' | 'reason' | 'requestedBy' | 'firstHour' | 'lastHour' | 'partitionCount'> {
  backfillId: number | null;
  direction: Direction;
  /** Totals over the affected days now and after the change, from the step run in a rolled-back preview. */
  totalBefore: string;
  expectedTotalAfter: string;
  /** The pipeline's estimate query, or the step's own query run in full. */
  previewedBy: 'estimate' | 'step';
  days: string[];
  reader: Reader;
  signed: SignedFigure[];
  /** Owners whose acknowledgement the run waits for. */
  gateOwners: string[];
}

const DIRECTION_TEXT: Record<Direction, string> = {
  down: 'down (the corrected total will be lower)',
  up: 'up (the corrected total will be higher)',
  unchanged: 'unchanged in total (rows change, the sum does not)',
};

/**
 * The message an owner gets, generated from the consumer row rather than composed by a person: which
 * partitions and why, the signed figure with who signed it and when, the expected direction, when it runs,
 * who asked. Written once, in Slack's markup (mentions); a terminal shows it through src/views/text.ts's
 * fromSlackMarkup, with names.
 */
export function announcementText(input: AnnouncementInput): string {
  const { reader } = input;
  const title = input.backfillId === null ? `Planned backfill of ${input.pipeline}` : `Backfill #${input.backfillId} of ${input.pipeline}`;
  const lines = [
    `${title}: ${input.partitionCount} partition${input.partitionCount === 1 ? '' : 's'}, ${formatHourRange(input.firstHour, input.lastHour)}, will be replaced.`,
    `Why: ${input.reason}`,
    reader.readDirectly
      ? `${reader.consumer} (${reader.kind}) read ${reader.partitionsRead} of them.`
      : `${reader.consumer} (${reader.kind}) depends on ${reader.dependsOn.join(', ')}, which read them.`,
  ];
  for (const figure of input.signed.filter((f) => f.report === reader.consumer)) {
    lines.push(`Signed figure: ${figure.report} for ${figure.period} = ${formatMoney(figure.total)}, signed by ${mention(figure.signedBy)} at ${formatTime(figure.signedAt)}.`);
  }
  lines.push(`Expected direction of the change: ${DIRECTION_TEXT[input.direction]}.`);
  lines.push(`Expected new total for ${input.days.join(', ')}: ${formatMoney(input.expectedTotalAfter)} ` +
    `(${formatSignedMoney(subtractMoney(input.expectedTotalAfter, input.totalBefore))} from ${formatMoney(input.totalBefore)} now), ` +
    (input.previewedBy === 'estimate'
      ? "from the pipeline's estimate; each partition's rows and total are checked against it before it is published."
      : 'from a preview of the step; each partition is checked against it, row by row, before it is published.'));
  lines.push(reader.notifyRule === 'before'
    ? `When: it runs once ${input.gateOwners.map((owner) => `${mention(owner)}`).join(', ')} acknowledge${input.gateOwners.length === 1 ? 's' : ''}; nothing is deleted before. Please acknowledge or hold.`
    : `When: as soon as the owners who must acknowledge have; you will be told the result after the run.`);
  lines.push(`Asked by ${mention(input.requestedBy)}.`);
  return lines.join('\n');
}
