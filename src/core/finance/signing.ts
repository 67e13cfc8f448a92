import { recordEvent } from '../../db/events.js';
import { withTransaction, type Queryable } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { readReportFigure } from '../identify/readers.js';
import { parseDate } from '../time.js';

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

/**
 * Records the report's current total for the period as signed by `actor`, if they may sign that report.
 * The total is read from the report itself (its report_total_sql), never typed in.
 */
export async function signReport(ctx: EngineContext, input: { report: string; period: string; actor: string }): Promise<SignedFigureRow> {
  parseDate(input.period);
  return withTransaction(ctx.pool, async (tx) => {
    const { rows } = await tx.query<{ sql: string | null; kind: string }>('SELECT report_total_sql AS sql, kind FROM backfill.consumers WHERE name = $1::text', [input.report]);
    const consumer = rows[0];
    if (!consumer || consumer.kind !== 'report' || !consumer.sql) {
      const reports = await signableReports(tx);
      throw new BackfillError(ErrorCode.UnknownConsumer, `"${input.report}" is not a report that can be signed. Reports: ${reports.join(', ') || 'none'}.`);
    }
    const signers = await listSigners(tx, input.report);
    if (!signers.includes(input.actor)) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `<@${input.actor}> may not sign ${input.report}. Who may: ${signers.map((s) => `<@${s}>`).join(', ') || 'nobody yet'} ` +
        `(an operator adds signers with \`backfill signer add ${input.report} <user>\`).`);
    }
    const value = await readReportFigure(tx, consumer.sql, input.period);
    if (value === null) {
      throw new BackfillError(ErrorCode.BadInput, `${input.report} shows no total for ${input.period} yet: there is nothing to sign.`);
    }
    const inserted = await tx.query<SignedFigureRow>(
      `INSERT INTO backfill.signoffs (report, period, total, signed_by, signed_at) VALUES ($1::text, $2::date, $3::numeric, $4::text, now())
       RETURNING id, report, to_char(period, 'YYYY-MM-DD') AS period, total::text AS total, signed_by AS "signedBy", signed_at AS "signedAt",
                 (SELECT count(*)::int + 1 FROM backfill.signoffs WHERE report = $1::text AND period = $2::date) AS "signatureNumber"`,
      [input.report, input.period, value, input.actor]);
    const row = inserted.rows[0];
    if (!row) throw new Error('signoff insert returned nothing');
    await recordEvent(tx, { actor: input.actor, kind: 'signed', detail: { report: row.report, period: row.period, total: row.total, signature: row.signatureNumber } });
    return row;
  });
}

export async function listSigners(db: Queryable, report: string): Promise<string[]> {
  const { rows } = await db.query<{ signer: string }>('SELECT signer FROM backfill.signers WHERE report = $1::text ORDER BY signer', [report]);
  return rows.map((row) => row.signer);
}

export async function addSigner(ctx: EngineContext, input: { report: string; signer: string; actor: string }): Promise<void> {
  if (!/^[UW][A-Z0-9]+$/.test(input.signer)) throw new BackfillError(ErrorCode.BadInput, `"${input.signer}" is not a Slack user id (U… or W…).`);
  const reports = await signableReports(ctx.pool);
  if (!reports.includes(input.report)) throw new BackfillError(ErrorCode.UnknownConsumer, `"${input.report}" is not a report. Reports: ${reports.join(', ') || 'none'}.`);
  await ctx.pool.query('INSERT INTO backfill.signers (report, signer, added_by) VALUES ($1::text, $2::text, $3::text) ON CONFLICT DO NOTHING',
    [input.report, input.signer, input.actor]);
  await recordEvent(ctx.pool, { actor: input.actor, kind: 'signer_added', detail: { report: input.report, signer: input.signer } });
}

export async function removeSigner(ctx: EngineContext, input: { report: string; signer: string; actor: string }): Promise<boolean> {
  const removed = await ctx.pool.query('DELETE FROM backfill.signers WHERE report = $1::text AND signer = $2::text', [input.report, input.signer]);
  if (removed.rowCount) await recordEvent(ctx.pool, { actor: input.actor, kind: 'signer_removed', detail: { report: input.report, signer: input.signer } });
  return (removed.rowCount ?? 0) > 0;
}

async function signableReports(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(`SELECT name FROM backfill.consumers WHERE kind = 'report' AND report_total_sql IS NOT NULL ORDER BY name`);
  return rows.map((row) => row.name);
}

/** Someone who may acknowledge or hold for an owner (leave, shifts). Kept in backfill.delegates. */
export async function addDelegate(ctx: EngineContext, input: { owner: string; delegate: string; actor: string }): Promise<void> {
  for (const id of [input.owner, input.delegate]) {
    if (!/^[UW][A-Z0-9]+$/.test(id)) throw new BackfillError(ErrorCode.BadInput, `"${id}" is not a Slack user id (U… or W…).`);
  }
  if (input.owner === input.delegate) throw new BackfillError(ErrorCode.BadInput, 'An owner cannot be their own delegate.');
  await ctx.pool.query('INSERT INTO backfill.delegates (owner, delegate) VALUES ($1::text, $2::text) ON CONFLICT DO NOTHING', [input.owner, input.delegate]);
  await recordEvent(ctx.pool, { actor: input.actor, kind: 'delegate_added', detail: { owner: input.owner, delegate: input.delegate } });
}

export async function removeDelegate(ctx: EngineContext, input: { owner: string; delegate: string; actor: string }): Promise<boolean> {
  const removed = await ctx.pool.query('DELETE FROM backfill.delegates WHERE owner = $1::text AND delegate = $2::text', [input.owner, input.delegate]);
  if (removed.rowCount) await recordEvent(ctx.pool, { actor: input.actor, kind: 'delegate_removed', detail: { owner: input.owner, delegate: input.delegate } });
  return (removed.rowCount ?? 0) > 0;
}
