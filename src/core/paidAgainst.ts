import type { Queryable } from '../db/pool.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { parseDate } from './time.js';

export interface Signature {
  total: string;
  signedBy: string;
  signedAt: Date;
}

export interface Correction {
  backfillId: number;
  reason: string;
  /** What the rebuilt report showed after this backfill. */
  corrected: string;
  /** Against the figure that was signed when the backfill was announced. */
  diffFromSigned: string;
  signedTotal: string;
  announcedAt: Date;
  ranAt: Date | null;
  ranBy: string | null;
  finishedAt: Date;
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
  const { rows: signatures } = await db.query<Signature>(
    `SELECT total::text AS total, signed_by AS "signedBy", signed_at AS "signedAt" FROM backfill.signoffs
     WHERE report = $1::text AND period = $2::date ORDER BY signed_at, id`, [report, input.date]);
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
  const { rows } = await db.query<Omit<Correction, 'acknowledgedBy' | 'overriddenBy'>>(
    `SELECT b.id AS "backfillId", b.reason, bs.report_after::text AS corrected, bs.diff::text AS "diffFromSigned",
            bs.signed_total::text AS "signedTotal", b.announced_at AS "announcedAt", b.ran_at AS "ranAt", b.ran_by AS "ranBy",
            b.finished_at AS "finishedAt"
     FROM backfill.backfill_signoffs bs JOIN backfill.backfills b ON b.id = bs.backfill_id
     WHERE bs.report = $1::text AND bs.period = $2::date AND b.state = 'done' AND bs.report_after IS NOT NULL
     ORDER BY b.finished_at, b.id`, [report, period]);
  const corrections: Correction[] = [];
  for (const row of rows) {
    const acks = await db.query<{ owner: string; consumer: string; at: Date }>(
      'SELECT owner, consumer, acked_at AS at FROM backfill.acknowledgements WHERE backfill_id = $1::bigint ORDER BY acked_at', [row.backfillId]);
    const overrides = await db.query<{ operator: string; consumer: string; reason: string }>(
      'SELECT operator, consumer, reason FROM backfill.gate_overrides WHERE backfill_id = $1::bigint ORDER BY at', [row.backfillId]);
    corrections.push({ ...row, acknowledgedBy: acks.rows, overriddenBy: overrides.rows });
  }
  return corrections;
}

/** A question without a report name means the one report signed for that date, if there is exactly one. */
async function soleSignedReport(db: Queryable, date: string): Promise<string> {
  const { rows } = await db.query<{ report: string }>('SELECT DISTINCT report FROM backfill.signoffs WHERE period = $1::date ORDER BY report', [date]);
  if (rows.length === 1 && rows[0]) return rows[0].report;
  const reports = await signedReports(db);
  if (rows.length === 0) {
    throw new BackfillError(ErrorCode.BadInput,
      `Nothing was signed for ${date}. Reports with signed figures: ${reports.map((r) => `${r.report} (${describeDates(r.dates)})`).join('; ') || 'none yet'}.`);
  }
  throw new BackfillError(ErrorCode.BadInput, `Several reports were signed for ${date}: ${rows.map((r) => r.report).join(', ')}. Name one, e.g. \`/backfill paid-against ${rows[0]?.report} ${date}\`.`);
}

async function requireSignedReport(db: Queryable, report: string): Promise<void> {
  const { rows } = await db.query<{ kind: string }>('SELECT kind FROM backfill.consumers WHERE name = $1::text', [report]);
  if (rows[0]?.kind === 'report') return;
  const reports = await signedReports(db);
  throw new BackfillError(ErrorCode.UnknownConsumer,
    `There is no report called "${report}". Reports with signed figures: ${reports.map((r) => `${r.report} (${describeDates(r.dates)})`).join('; ') || 'none yet'}.`);
}

async function signedReports(db: Queryable): Promise<{ report: string; dates: string[] }[]> {
  const { rows } = await db.query<{ report: string; dates: string[] }>(
    `SELECT report, array_agg(DISTINCT to_char(period, 'YYYY-MM-DD') ORDER BY to_char(period, 'YYYY-MM-DD')) AS dates
     FROM backfill.signoffs GROUP BY report ORDER BY report`);
  return rows;
}

async function signedDates(db: Queryable, report: string): Promise<string[]> {
  return (await signedReports(db)).find((r) => r.report === report)?.dates ?? [];
}

/** 2026-11-01 … 2026-11-30 (30 dates), or the list when short. */
function describeDates(dates: string[]): string {
  if (dates.length === 0) return 'none';
  if (dates.length <= 4) return dates.join(', ');
  return `${dates[0]} … ${dates.at(-1)} (${dates.length} dates)`;
}
