import { mention } from '../messenger.js';
import { findReportDefinition, listSignableReports } from '../../db/consumers.js';
import { deleteDelegate, insertDelegate } from '../../db/delegates.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction } from '../../db/pool.js';
import { deleteSigner, insertSigner, listSigners } from '../../db/signers.js';
import { insertSignoff, type SignedFigureRow } from '../../db/signatures.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { readReportFigure } from '../../db/pipelineSql.js';
import { parseDate } from '../time.js';
import { isSlackUserId } from '../../slackUser.js';
import { typedText } from '../../markup.js';

/**
 * Records the report's current total for the period as signed by `actor`, if they may sign that report.
 * The total is read from the report itself (its report_total_sql), never typed in.
 */
export async function signReport(ctx: EngineContext, input: { report: string; period: string; actor: string }): Promise<SignedFigureRow> {
  parseDate(input.period);
  return withTransaction(ctx.pool, async (tx) => {
    const consumer = await findReportDefinition(tx, input.report);
    if (!consumer || consumer.kind !== 'report' || !consumer.sql) {
      const reports = await listSignableReports(tx);
      throw new BackfillError(ErrorCode.UnknownConsumer, `"${typedText(input.report)}" is not a report that can be signed. Reports: ${reports.join(', ') || 'none'}.`);
    }
    const signers = await listSigners(tx, input.report);
    if (!signers.includes(input.actor)) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `${mention(input.actor)} may not sign ${input.report}. Who may: ${signers.map((s) => `${mention(s)}`).join(', ') || 'nobody yet'} ` +
        `(an operator adds signers with \`backfill signer add ${input.report} <user>\`).`);
    }
    const value = await readReportFigure(tx, consumer.sql, input.period);
    if (value === null) {
      throw new BackfillError(ErrorCode.BadInput, `${input.report} shows no total for ${input.period} yet: there is nothing to sign.`);
    }
    const row = await insertSignoff(tx, { report: input.report, period: input.period, total: value, signedBy: input.actor });
    if (!row) throw new Error('signoff insert returned nothing');
    await recordEvent(tx, { actor: input.actor, kind: 'signed', detail: { report: row.report, period: row.period, total: row.total, signature: row.signatureNumber } });
    return row;
  });
}

export async function addSigner(ctx: EngineContext, input: { report: string; signer: string; actor: string }): Promise<void> {
  if (!isSlackUserId(input.signer)) throw new BackfillError(ErrorCode.BadInput, `"${typedText(input.signer)}" is not a Slack user id (U… or W…).`);
  const reports = await listSignableReports(ctx.pool);
  if (!reports.includes(input.report)) throw new BackfillError(ErrorCode.UnknownConsumer, `"${typedText(input.report)}" is not a report. Reports: ${reports.join(', ') || 'none'}.`);
  await insertSigner(ctx.pool, { report: input.report, signer: input.signer, addedBy: input.actor });
  await recordEvent(ctx.pool, { actor: input.actor, kind: 'signer_added', detail: { report: input.report, signer: input.signer } });
}

export async function removeSigner(ctx: EngineContext, input: { report: string; signer: string; actor: string }): Promise<boolean> {
  const removed = await deleteSigner(ctx.pool, input.report, input.signer);
  if (removed) await recordEvent(ctx.pool, { actor: input.actor, kind: 'signer_removed', detail: { report: input.report, signer: input.signer } });
  return removed;
}

/** Someone who may acknowledge or hold for an owner (leave, shifts). Kept in backfill.delegates. */
export async function addDelegate(ctx: EngineContext, input: { owner: string; delegate: string; actor: string }): Promise<void> {
  for (const id of [input.owner, input.delegate]) {
    if (!isSlackUserId(id)) throw new BackfillError(ErrorCode.BadInput, `"${typedText(id)}" is not a Slack user id (U… or W…).`);
  }
  if (input.owner === input.delegate) throw new BackfillError(ErrorCode.BadInput, 'An owner cannot be their own delegate.');
  await insertDelegate(ctx.pool, input.owner, input.delegate);
  await recordEvent(ctx.pool, { actor: input.actor, kind: 'delegate_added', detail: { owner: input.owner, delegate: input.delegate } });
}

export async function removeDelegate(ctx: EngineContext, input: { owner: string; delegate: string; actor: string }): Promise<boolean> {
  const removed = await deleteDelegate(ctx.pool, input.owner, input.delegate);
  if (removed) await recordEvent(ctx.pool, { actor: input.actor, kind: 'delegate_removed', detail: { owner: input.owner, delegate: input.delegate } });
  return removed;
}
