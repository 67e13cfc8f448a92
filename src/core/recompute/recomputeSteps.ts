import { markPublishedAny, requireBackfill } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import { undoneIfRefused, withTransaction, type PoolClient } from '../../db/pool.js';
import { claimCompanionStages } from '../../db/steps.js';
import { sqlStateOf } from '../../db/sqlState.js';
import { isBackfillError } from '../../errors.js';
import { lockWatermark, upsertWatermark } from '../../db/watermarks.js';
import { pauseIfCatalogChanged } from '../lifecycle/catalogGuard.js';
import { ENGINE, type StepContext, type StepOutcome } from '../lifecycle/runStep.js';
import { tellIncident } from '../lifecycle/stepDelivery.js';
import { finishStep, finishSteps, releaseForRetry, type CompanionClaim } from '../lifecycle/stepClaims.js';
import type { StepRef } from '../lifecycle/stepGraph.js';
import { intentKey } from '../messenger.js';
import { formatHour } from '../time.js';
import { pauseForBreach, publishPartition, stagePartition, type StageHow, type StageOutcome } from './stagePublish.js';

// The recompute steps: stage each partition (the pipeline's own step into the row store, reconciled by key),
// publish it (the canary, then the waves: src/core/recompute/waves.ts) and move the watermark back.

/**
 * Stages one partition, and the small hours it took into its claim (claimSmallStages), one after another in one
 * transaction behind one fence (runHours): every hour the run stages commits with it, or none does. A pause or a
 * stop caught it running moves them all (blocked, skipped), as it moves every step it catches.
 */
export async function stage(ctx: StepContext, ref: StepRef, token: string, companions: readonly StepRef[]): Promise<StepOutcome> {
  const how: StageHow = { swapMinRows: ctx.config.SWAP_MIN_ROWS };
  const outcome = await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    // What it stages is what was announced: a catalog changed since pauses the backfill instead (catalogGuard.ts).
    const pause = await pauseIfCatalogChanged(tx, ref, token, backfill);
    if (pause > 0) return { paused: pause, done: new Map<string, HourRun<StageOutcome>>() };
    const done = await runHours(tx, ref, token, companions, (step) => stagePartition(tx, backfill, new Date(step.key), how));
    await finishSteps(tx, ref, token, new Map([...done].map(([key, { value }]) => [key, { outcome: value }])));
    return { paused: 0, done };
  });
  if (outcome.paused === 0) {
    reportCompanions(ctx, ref, outcome.done);
    return 'done';
  }
  await tellIncident(ctx, ref, () => ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'paused', String(outcome.paused))));
  return 'blocked';
}

/**
 * Publishes one partition. A partition outside its announced envelope (and not accepted by name) pauses the
 * backfill instead, in one transaction with the breach and the blocking of every step the pause catches
 * running; the reconciliation then goes to the incident thread. So does a catalog changed since the backfill
 * was announced, before anything is written (catalogGuard.ts).
 *
 * A publish takes no companions: the partitions of a wave publish side by side, and one step publishing them one
 * after another made the wave, the backfill's critical path, longer (docs/benchmark.md, "a wave of small hours").
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

interface HourRun<T> {
  value: T;
  seconds: number;
}

/**
 * The step's own hour, then each companion's (claimSmallStages), in one transaction. The step's own hour failing
 * fails the run (runStep then gives its companions back unrun); a companion's failing is undone alone, in its
 * savepoint, and it is given back to be tried again by itself, with its error (releaseForRetry).
 */
async function runHours<T>(tx: PoolClient, ref: StepRef, token: string, companions: readonly StepRef[], run: (step: StepRef) => Promise<T>): Promise<Map<string, HourRun<T>>> {
  const done = new Map<string, HourRun<T>>();
  for (const step of [ref, ...companions]) {
    const started = performance.now();
    const ran = step === ref ? { done: true as const, value: await run(step) } : await undoneIfRefused(tx, 'companion_hour', () => run(step), leavesSessionUsable);
    if (ran.done) {
      done.set(step.key, { value: ran.value, seconds: (performance.now() - started) / 1000 });
    } else {
      // Its writes undone: given back with its error, as a failed attempt of its own is; having run once, it runs
      // alone from now on (claimStep).
      await releaseForRetry(tx, step, token, ran.error);
    }
  }
  return done;
}

/**
 * The further stages a first run of a small hour's stage takes into its claim: up to SMALL_HOUR_BATCH hours in all,
 * the next small ones of the backfill that never ran (claimCompanionStages). PERF: at 60 rows a partition a step's
 * claim, transaction, reads of the backfill and the pipeline, fence and dispatch cost more than its hour's own
 * statements (docs/benchmark.md, "at 60 rows, who spends the CPU", and "a wave of small hours").
 */
export const claimSmallStages = (ctx: StepContext): CompanionClaim | undefined => {
  const limit = ctx.config.SMALL_HOUR_BATCH - 1;
  if (limit === 0) return undefined;
  return async (tx, lead, token, started) => {
    const keys = await claimCompanionStages(tx, lead, token, { leaseMs: ctx.config.STEP_LEASE_MS, limit, swapMinRows: ctx.config.SWAP_MIN_ROWS }, started);
    return keys.map((key) => ({ ...lead, key }));
  };
};

/** An error after which the transaction can go on once its savepoint is rolled back: the database's or the bot's own. */
function leavesSessionUsable(error: unknown): boolean {
  return isBackfillError(error) || sqlStateOf(error) !== undefined;
}

/** Each committed companion's own line and duration, as runStep reports the step's (whose duration holds theirs too). */
function reportCompanions<T>(ctx: StepContext, ref: StepRef, done: ReadonlyMap<string, HourRun<T>>): void {
  for (const [key, { seconds }] of done) {
    if (key === ref.key) continue;
    ctx.metrics?.stepFinished(ref.kind, 'done', seconds);
    ctx.log?.info({ backfillId: ref.backfillId, step: ref.kind, key, with: ref.key, outcome: 'done', durationMs: Math.round(seconds * 1000) }, `${ref.kind} ${key}: done (with ${ref.key})`);
  }
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
