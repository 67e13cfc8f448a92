import { markPublishedAny, requireBackfill } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction } from '../../db/pool.js';
import { lockWatermark, upsertWatermark } from '../../db/watermarks.js';
import { pauseIfCatalogChanged } from '../lifecycle/catalogGuard.js';
import { ENGINE, type StepContext, type StepOutcome } from '../lifecycle/runStep.js';
import { tellIncident } from '../lifecycle/stepDelivery.js';
import { finishStep } from '../lifecycle/stepClaims.js';
import type { StepRef } from '../lifecycle/stepGraph.js';
import { intentKey } from '../messenger.js';
import { formatHour } from '../time.js';
import { pauseForBreach, publishPartition, stagePartition } from './stagePublish.js';

// The recompute steps: stage each partition (the pipeline's own step into the row store, reconciled by key),
// publish it (the canary, then the waves: src/core/recompute/waves.ts) and move the watermark back.

export async function stage(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const paused = await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    // What it stages is what was announced: a catalog changed since pauses the backfill instead (catalogGuard.ts).
    const pause = await pauseIfCatalogChanged(tx, ref, token, backfill);
    if (pause > 0) return pause;
    const outcome = await stagePartition(tx, backfill, new Date(ref.key), { swapMinRows: ctx.config.SWAP_MIN_ROWS });
    await finishStep(tx, ref, token, { outcome });
    return 0;
  });
  if (paused === 0) return 'done';
  await tellIncident(ctx, ref, () => ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'paused', String(paused))));
  return 'blocked';
}

/**
 * Publishes one partition. A partition outside its announced envelope (and not accepted by name) pauses the
 * backfill instead, in one transaction with the breach and the blocking of every step the pause catches
 * running; the reconciliation then goes to the incident thread. So does a catalog changed since the backfill
 * was announced, before anything is written (catalogGuard.ts).
 */
export async function publish(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const outcome = await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const catalogPause = await pauseIfCatalogChanged(tx, ref, token, backfill);
    if (catalogPause > 0) return { paused: catalogPause, rows: 0, pipeline: backfill.pipeline };
    const result = await publishPartition(tx, backfill, new Date(ref.key), ctx.hooks);
    if (result.kind === 'breach') return { paused: await pauseForBreach(tx, ref, token, result.reason), rows: 0, pipeline: backfill.pipeline };
    // A publish by swap's result keeps what it cost beside its outcome: the catalog changes, and the real lock wait before them.
    await finishStep(tx, ref, token, { outcome: result.kind, generation: result.generation ?? null, ...(result.kind === 'published' ? result.swap : {}) });
    // From its first publish on, the backfill holds its hours until it finishes or is rolled back.
    if (result.kind === 'published') await markPublishedAny(tx, ref.backfillId);
    return { paused: 0, rows: result.kind === 'published' ? result.rows : 0, pipeline: backfill.pipeline };
  });
  if (outcome.paused === 0) {
    // Counted once committed: a publish the fence rolled back never went live.
    ctx.metrics?.rowsPublished(outcome.pipeline, outcome.rows);
    return 'done';
  }
  await tellIncident(ctx, ref, () => ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'paused', String(outcome.paused))));
  return 'blocked';
}

export async function moveWatermark(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const from = (await lockWatermark(tx, backfill.pipeline)) ?? null;
    // Back to the hour before the first bad partition, never further back, and never forward.
    const to = from && from < backfill.watermarkResetTo ? from : backfill.watermarkResetTo;
    await upsertWatermark(tx, backfill.pipeline, to, `backfill #${backfill.id}`);
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'watermark_moved', detail: { from: from ? formatHour(from) : null, to: formatHour(to) } });
    await finishStep(tx, ref, token, { from, to });
  });
  return 'done';
}
