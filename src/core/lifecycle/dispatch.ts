import { listAdvancingBackfillIds, listApprovedReady } from '../../db/backfills.js';
import { recordEvents } from '../../db/events.js';
import { withTransaction, type Queryable } from '../../db/pool.js';
import { listRunnableSteps } from '../../db/steps.js';
import type { EngineContext } from '../context.js';
import { advanceBackfill } from './stepClaims.js';
import { SETTLED, type StepRef } from './stepGraph.js';
import { transition } from './stateMachine.js';

/**
 * Which steps may run now, decided from the rows alone so any process can answer the same, by the predicate
 * the step graph (stepGraph.ts) builds: the one the claim checks too. Pending steps, and running ones whose
 * lease ran out (their worker died; Redis may have lost the job too). A running step under a live lease is
 * left alone: a second copy of it could not claim it anyway.
 */
export interface RunnableStep extends StepRef {
  /**
   * Set when the step is running under a lease that ran out: the claim to take over is this attempt's. Its old
   * job may still be held by a dead worker's BullMQ lock, so the takeover gets a job id of its own.
   */
  takeoverOf?: number | undefined;
}

export async function findRunnableSteps(db: Queryable, backfillId?: number): Promise<RunnableStep[]> {
  const rows = await listRunnableSteps(db, backfillId);
  return rows.map((row) => ({ ...row, takeoverOf: row.takeoverOf ?? undefined }));
}

/**
 * approved → running for every backfill whose gate opened and whose announcements have all gone out (an
 * override skips an acknowledgement, never the message); records when it ran and who ran it.
 */
export async function startApproved(ctx: EngineContext, backfillId?: number): Promise<number[]> {
  const rows = await listApprovedReady(ctx.pool, SETTLED, backfillId);
  const started: number[] = [];
  for (const row of rows) {
    const moved = await withTransaction(ctx.pool, async (tx) => {
      const ok = await transition(tx, { backfillId: row.id, event: 'run', actor: 'backfill-bot', set: { ran_at: new Date(), ran_by: row.requestedBy } });
      // A backfill with nothing left to publish (done by an earlier process) moves on at once.
      if (ok) await advanceBackfill(tx, row.id);
      return ok;
    });
    if (moved) started.push(row.id);
  }
  return started;
}

/** Heals a backfill whose last step committed but whose phase move was lost (it is idempotent). */
export async function advanceAll(ctx: EngineContext): Promise<void> {
  for (const id of await listAdvancingBackfillIds(ctx.pool)) await withTransaction(ctx.pool, (tx) => advanceBackfill(tx, id));
}

/** The jobs one dispatch added, each a job_enqueued event in the timeline, in one statement. */
export async function recordEnqueued(db: Queryable, jobs: readonly { step: StepRef; jobId: string }[]): Promise<void> {
  await recordEvents(db, jobs.map(({ step, jobId }) => ({ backfillId: step.backfillId, actor: 'backfill-bot', kind: 'job_enqueued', detail: { step: step.kind, key: step.key, jobId } })));
}
