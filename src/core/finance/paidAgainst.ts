import { listAcknowledgements, listGateOverrides } from '../../db/acknowledgements.js';
import { findConsumerKind } from '../../db/consumers.js';
import type { Queryable } from '../../db/pool.js';
import {
  listFigureCorrections, listReportsSignedOn, listSignatures, listSignedReports, type CorrectionRow, type Signature,
} from '../../db/signatures.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { parseDate } from '../time.js';
import { typedText } from '../../markup.js';

interface Correction extends CorrectionRow {
  acknowledgedBy: { owner: string; consumer: string; at: Date }[];
  overriddenBy: { operator: string; consumer: string; reason: string }[];
}

export interface PaidAgainstAnswer {
  report: string;
  period: string;
  /** Every signature of this report and period, oldest first: signing is a history. */
  signatures: Signature[];
  /** Every finished backfill that changed the figure, in the order they finished. */
  corrections: Correction[];
  /** The figure that stands now, and where it comes from. */
  current: { total: string; source: 'signature' | 'correction'; backfillId?: number };
}

/**
 * "What did we pay against?": the signed figure, who signed it and when, every correction since, and which
 * figure is current. Read-only; anyone may ask.
 */
export async function answerPaidAgainst(db: Queryable, input: { report?: string | undefined; date: string }): Promise<PaidAgainstAnswer> {
  parseDate(input.date);
  const report = input.report ?? await soleSignedReport(db, input.date);
  await requireSignedReport(db, report);
  const signatures = await listSignatures(db, report, input.date);
  if (signatures.length === 0) {
    const dates = await signedDates(db, report);
    throw new BackfillError(ErrorCode.BadInput,
      `${report} has no signed figure for ${input.date}. Signed dates: ${describeDates(dates)}. A figure is signed with \`/backfill sign ${report} <date>\`.`);
  }
  const corrections = await listCorrections(db, report, input.date);
  const lastSignature = signatures.at(-1) as Signature;
  const lastCorrection = corrections.at(-1);
  const current = lastCorrection && lastCorrection.finishedAt > lastSignature.signedAt
    ? { total: lastCorrection.corrected, source: 'correction' as const, backfillId: lastCorrection.backfillId }
    : { total: lastSignature.total, source: 'signature' as const };
  return { report, period: input.date, signatures, corrections, current };
}

async function listCorrections(db: Queryable, report: string, period: string): Promise<Correction[]> {
  const corrections: Correction[] = [];
  for (const row of await listFigureCorrections(db, report, period)) {
    const acks = await listAcknowledgements(db, row.backfillId);
    const overrides = await listGateOverrides(db, row.backfillId);
    corrections.push({ ...row, acknowledgedBy: acks, overriddenBy: overrides });
  }
  return corrections;
}

/** A question without a report name means the one report signed for that date, if there is exactly one. */
async function soleSignedReport(db: Queryable, date: string): Promise<string> {
  const rows = await listReportsSignedOn(db, date);
  if (rows.length === 1 && rows[0]) return rows[0];
  const reports = await listSignedReports(db);
  if (rows.length === 0) {
    throw new BackfillError(ErrorCode.BadInput,
      `Nothing was signed for ${date}. Reports with signed figures: ${reports.map((r) => `${r.report} (${describeDates(r.dates)})`).join('; ') || 'none yet'}.`);
  }
  throw new BackfillError(ErrorCode.BadInput, `Several reports were signed for ${date}: ${rows.join(', ')}. Name one, e.g. \`/backfill paid-against ${rows[0]} ${date}\`.`);
}

async function requireSignedReport(db: Queryable, report: string): Promise<void> {
  if ((await findConsumerKind(db, report)) === 'report') return;
  const reports = await listSignedReports(db);
  throw new BackfillError(ErrorCode.UnknownConsumer,
    `There is no report called "${typedText(report)}". Reports with signed figures: ${reports.map((r) => `${r.report} (${describeDates(r.dates)})`).join('; ') || 'none yet'}.`);
}

async function signedDates(db: Queryable, report: string): Promise<string[]> {
  return (await listSignedReports(db)).find((r) => r.report === report)?.dates ?? [];
}

/** 2026-11-01 … 2026-11-30 (30 dates), or the list when short. */
function describeDates(dates: string[]): string {
  if (dates.length === 0) return 'none';
  if (dates.length <= 4) return dates.join(', ');
  return `${dates[0]} … ${dates.at(-1)} (${dates.length} dates)`;
}
