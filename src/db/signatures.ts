import type { Pipeline } from './pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from './pool.js';
import { wholeUtcDays } from './partitions.js';

// Signed figures (backfill.signoffs: who signed which report's total for which day; signing is a history) and the
// figures in a backfill's scope (backfill.backfill_signoffs: the signed total then, and the report after it).
// Reading a backfill's: listBackfillSignoffs in backfills.ts.

export interface SignedFigure {
  signoffId: number;
  report: string;
  period: string;
  total: string;
  signedBy: string;
  signedAt: Date;
}

/** The latest signature of each report among the readers, for each day the targets fall in. */
export async function listSignedFigures(db: Queryable, reports: string[], days: string[]): Promise<SignedFigure[]> {
  const { rows } = await db.query<SignedFigure>(
    `SELECT DISTINCT ON (report, period) id AS "signoffId", report, to_char(period, 'YYYY-MM-DD') AS period,
            total::text AS total, signed_by AS "signedBy", signed_at AS "signedAt"
     FROM backfill.signoffs
     WHERE report = ANY ($1::text[]) AND period = ANY ($2::date[])
     ORDER BY report, period, signed_at DESC, id DESC`, [reports, days]);
  return rows;
}

export interface Signature {
  total: string;
  signedBy: string;
  signedAt: Date;
}

/** Every signature of this report and day, oldest first. */
export async function listSignatures(db: Queryable, report: string, period: string): Promise<Signature[]> {
  const { rows } = await db.query<Signature>(
    `SELECT total::text AS total, signed_by AS "signedBy", signed_at AS "signedAt" FROM backfill.signoffs
     WHERE report = $1::text AND period = $2::date ORDER BY signed_at, id`, [report, period]);
  return rows;
}

/** The reports signed for that day, by name. */
export async function listReportsSignedOn(db: Queryable, period: string): Promise<string[]> {
  const { rows } = await db.query<{ report: string }>('SELECT DISTINCT report FROM backfill.signoffs WHERE period = $1::date ORDER BY report', [period]);
  return rows.map((row) => row.report);
}

/** Every report with a signed figure, and the days signed (YYYY-MM-DD, in order). */
export async function listSignedReports(db: Queryable): Promise<{ report: string; dates: string[] }[]> {
  const { rows } = await db.query<{ report: string; dates: string[] }>(
    `SELECT report, array_agg(DISTINCT to_char(period, 'YYYY-MM-DD') ORDER BY to_char(period, 'YYYY-MM-DD')) AS dates
     FROM backfill.signoffs GROUP BY report ORDER BY report`);
  return rows;
}

/**
 * A signed figure in the backfill's scope, with the total the pipeline's table holds for its day now (before the
 * backfill), or `dayTotal` when the caller read that day's total already in this transaction. Returns the total
 * recorded. Identifiers come from the pipeline's catalog row, quoted once.
 */
export async function insertBackfillSignoff(tx: Queryable, pipeline: Pipeline, backfillId: number, figure: SignedFigure, dayTotal?: string): Promise<string> {
  const row = [backfillId, figure.signoffId, figure.report, figure.period, figure.total];
  if (dayTotal !== undefined) {
    await tx.query(
      `INSERT INTO backfill.backfill_signoffs (backfill_id, signoff_id, report, period, signed_total, total_before)
       VALUES ($1::bigint, $2::bigint, $3::text, $4::date, $5::numeric, $6::numeric)`, [...row, dayTotal]);
    return dayTotal;
  }
  // The day as a range of the partition column, not its expression: read in that day's partitions alone (wholeUtcDays).
  const day = wholeUtcDays(quoteIdent(pipeline.partitionColumn), [figure.period], 6);
  const { rows } = await tx.query<{ total: string }>(
    `INSERT INTO backfill.backfill_signoffs (backfill_id, signoff_id, report, period, signed_total, total_before)
     SELECT $1::bigint, $2::bigint, $3::text, $4::date, $5::numeric, coalesce(sum(${quoteIdent(pipeline.measureColumn)}), 0)
     FROM ${quoteQualified(pipeline.targetTable)}
     WHERE ${day.condition}
     RETURNING total_before::text AS total`,
    [...row, ...day.params]);
  return rows[0]?.total ?? '0.00';
}

/** What the rebuilt report shows for a figure in the backfill's scope, and its difference from the signed one. */
export async function recordReportAfter(tx: Queryable, backfillId: number, figure: { report: string; period: string }, reportAfter: string | null, diff: string | null): Promise<void> {
  await tx.query(
    `UPDATE backfill.backfill_signoffs SET report_after = $4::numeric, diff = $5::numeric
     WHERE backfill_id = $1::bigint AND report = $2::text AND period = $3::date`,
    [backfillId, figure.report, figure.period, reportAfter, diff]);
}

export interface CorrectionRow {
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
}

/** Every finished backfill that changed this report's figure for the day, in the order they finished. */
export async function listFigureCorrections(db: Queryable, report: string, period: string): Promise<CorrectionRow[]> {
  const { rows } = await db.query<CorrectionRow>(
    `SELECT b.id AS "backfillId", b.reason, bs.report_after::text AS corrected, bs.diff::text AS "diffFromSigned",
            bs.signed_total::text AS "signedTotal", b.announced_at AS "announcedAt", b.ran_at AS "ranAt", b.ran_by AS "ranBy",
            b.finished_at AS "finishedAt"
     FROM backfill.backfill_signoffs bs JOIN backfill.backfills b ON b.id = bs.backfill_id
     WHERE bs.report = $1::text AND bs.period = $2::date AND b.state = 'done' AND bs.report_after IS NOT NULL
     ORDER BY b.finished_at, b.id`, [report, period]);
  return rows;
}

export interface SignedFigureRow {
  id: number;
  report: string;
  period: string;
  total: string;
  signedBy: string;
  signedAt: Date;
  /** How many signatures this report and period now has (a re-signature is kept, not overwritten). */
  signatureNumber: number;
}

/** A new signature of the report's total for the day (signing is a history: an earlier one is kept). */
export async function insertSignoff(tx: Queryable, signoff: { report: string; period: string; total: string; signedBy: string }): Promise<SignedFigureRow | undefined> {
  const { rows } = await tx.query<SignedFigureRow>(
    `INSERT INTO backfill.signoffs (report, period, total, signed_by, signed_at) VALUES ($1::text, $2::date, $3::numeric, $4::text, now())
     RETURNING id, report, to_char(period, 'YYYY-MM-DD') AS period, total::text AS total, signed_by AS "signedBy", signed_at AS "signedAt",
               (SELECT count(*)::int + 1 FROM backfill.signoffs WHERE report = $1::text AND period = $2::date) AS "signatureNumber"`,
    [signoff.report, signoff.period, signoff.total, signoff.signedBy]);
  return rows[0];
}
