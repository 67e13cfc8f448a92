import { recordEvent } from '../db/events.js';
import { withTransaction, type Queryable } from '../db/pool.js';
import type { EngineContext } from './context.js';
import { advanceBackfill } from './stepClaims.js';
import { runnableSql, SETTLED, STEP_KINDS, type StepKind, type StepRef } from './stepGraph.js';
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
  const { rows } = await db.query<{ backfillId: number; kind: StepKind; key: string; takeoverOf?: number }>(
    `SELECT s.backfill_id AS "backfillId", s.kind, s.step_key AS key, CASE WHEN s.status = 'running' THEN s.attempts END AS "takeoverOf"
     FROM backfill.backfill_steps s JOIN backfill.backfills b ON b.id = s.backfill_id
     WHERE (s.status = 'pending' OR (s.status = 'running' AND s.lease_expires_at < clock_timestamp()))
       AND ($1::bigint IS NULL OR s.backfill_id = $1::bigint)
       AND ${runnableSql()}
     ORDER BY s.backfill_id, array_position($2::text[], s.kind), s.step_key`, [backfillId ?? null, [...STEP_KINDS]]);
  return rows.map((row) => (row.takeoverOf === null ? { ...row, takeoverOf: undefined } : row));
}

/**
 * approved → running for every backfill whose gate opened and whose announcements have all gone out (an
 * override skips an acknowledgement, never the message); records when it ran and who ran it.
 */
export async function startApproved(ctx: EngineContext, backfillId?: number): Promise<number[]> {
  const { rows } = await ctx.pool.query<{ id: number; requestedBy: string }>(
    `SELECT id, requested_by AS "requestedBy" FROM backfill.backfills b
     WHERE state = 'approved' AND ($1::bigint IS NULL OR id = $1::bigint)
       AND NOT EXISTS (SELECT 1 FROM backfill.backfill_steps s WHERE s.backfill_id = b.id AND s.kind = 'announce' AND s.status <> ALL ($2::text[]))`,
    [backfillId ?? null, SETTLED]);
  const started: number[] = [];
  for (const row of rows) {
    const moved = await withTransaction(ctx.pool, async (tx) => {
      const ok = await transition(tx, { backfillId: row.id, to: 'running', actor: 'backfill-bot', set: { ran_at: new Date(), ran_by: row.requestedBy } });
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
  const { rows } = await ctx.pool.query<{ id: number }>(`SELECT id FROM backfill.backfills WHERE state IN ('running', 'replaying', 'rolling_back')`);
  for (const row of rows) await withTransaction(ctx.pool, (tx) => advanceBackfill(tx, row.id));
}

export async function recordEnqueued(db: Queryable, step: StepRef, jobId: string): Promise<void> {
  await recordEvent(db, { backfillId: step.backfillId, actor: 'backfill-bot', kind: 'job_enqueued', detail: { step: step.kind, key: step.key, jobId } });
}
