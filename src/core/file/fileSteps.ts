import { listBackfillSignoffs, recordBackfillTotals, requireBackfill } from '../../db/backfills.js';
import { findReportTotalSql } from '../../db/consumers.js';
import { recordEvent } from '../../db/events.js';
import { totalOverDays } from '../../db/partitions.js';
import { readReportFigure } from '../../db/pipelineSql.js';
import { requirePipeline } from '../../db/pipelines.js';
import { withTransaction, type PoolClient } from '../../db/pool.js';
import { recordReportAfter } from '../../db/signatures.js';
import { listTargetHours } from '../../db/targets.js';
import { ENGINE, type StepContext, type StepOutcome } from '../lifecycle/runStep.js';
import { deliver, waitOutRateLimits } from '../lifecycle/stepDelivery.js';
import { finishStep } from '../lifecycle/stepClaims.js';
import { finishBackfill } from '../lifecycle/stateMachine.js';
import type { StepRef } from '../lifecycle/stepGraph.js';
import { intentKey } from '../messenger.js';
import { subtractMoney } from '../money.js';
import { distinctDays } from '../time.js';

// The compare step (each signed figure against what the rebuilt report shows; the log row completed, the
// backfill done and its cost filed) and the report step (the diff and the reconciliation posted where asked).

/**
 * The signed figure against what the rebuilt report now shows, for exactly the same period, and the table's
 * own total over the same partitions; completes the log row.
 */
export async function compare(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const pipeline = await requirePipeline(tx, backfill.pipeline);
    const hours = await listTargetHours(ctx.pool, ref.backfillId);
    const totalAfter = await totalOverDays(tx, pipeline, distinctDays(hours));
    const diff = subtractMoney(totalAfter, backfill.totalBefore);
    const figures = await compareSignedFigures(tx, backfill.id);
    await recordBackfillTotals(tx, backfill.id, totalAfter, diff);
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'compared', detail: { totalBefore: backfill.totalBefore, totalAfter, diff, figures } });
    await finishStep(tx, ref, token, { totalAfter, diff, figures });
    await finishBackfill(tx, { backfillId: backfill.id, event: 'finish', actor: ENGINE });
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'finished', detail: { totalBefore: backfill.totalBefore, totalAfter, diff } });
  });
  return 'done';
}

async function compareSignedFigures(tx: PoolClient, backfillId: number): Promise<Record<string, unknown>[]> {
  const figures = [];
  for (const signed of await listBackfillSignoffs(tx, backfillId)) {
    const reportAfter = await reportTotal(tx, signed.report, signed.period);
    const figureDiff = reportAfter === null ? null : subtractMoney(reportAfter, signed.signedTotal);
    await recordReportAfter(tx, backfillId, signed, reportAfter, figureDiff);
    figures.push({ report: signed.report, period: signed.period, signed: signed.signedTotal, after: reportAfter, diff: figureDiff });
  }
  return figures;
}

/** Posts the diff (or, after a rollback, what was restored) and the reconciliation where it was asked for. */
export async function report(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const sent = await deliver(ctx, ref, token, async () => {
    await ctx.messenger.reportDiff(ref.backfillId, intentKey(ref.backfillId, 'report', ref.key), waitOutRateLimits(ctx, ref, token));
    await ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'report', ref.key, 'reconciliation'), waitOutRateLimits(ctx, ref, token));
  });
  if (sent === 'undeliverable') return 'undeliverable';
  await withTransaction(ctx.pool, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'diff_posted', detail: {} });
    await finishStep(tx, ref, token, {});
  });
  return 'done';
}

async function reportTotal(tx: PoolClient, report: string, period: string): Promise<string | null> {
  const sql = await findReportTotalSql(tx, report);
  if (!sql) return null;
  return readReportFigure(tx, sql, period);
}
