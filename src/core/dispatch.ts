import { recordEvent } from '../db/events.js';
import { withTransaction, type Queryable } from '../db/pool.js';
import type { EngineContext } from './context.js';
import { advanceBackfill, STEP_KINDS, type StepRef, type StepKind } from './steps.js';
import { transition } from './stateMachine.js';

/**
 * Which steps may run now, decided from the rows alone so any process can answer the same:
 *   announce (before the gate) → stage every target → publish the canary, then wave by wave
 *   → (all published) watermark → (done) replays, each once every replay
 *   it depends on is done → (all done) compare → (done) notify the "after" owners and post the diff.
 * Steps still marked running are included: their job may have died with a worker or with Redis, and a
 * repeat delivery of a finished step is a no-op.
 */
export async function findRunnableSteps(db: Queryable, backfillId?: number): Promise<StepRef[]> {
  const { rows } = await db.query<{ backfillId: number; kind: StepKind; key: string }>(
    `SELECT s.backfill_id AS "backfillId", s.kind, s.step_key AS key
     FROM backfill.backfill_steps s JOIN backfill.backfills b ON b.id = s.backfill_id
     WHERE s.status IN ('pending', 'running') AND ($1::bigint IS NULL OR s.backfill_id = $1::bigint)
       AND CASE s.kind
         WHEN 'announce' THEN b.state IN ('announced', 'held', 'approved')
         WHEN 'stage' THEN b.state = 'running'
         -- The canary (wave 0) first; each later wave only once every earlier one is published and reconciled.
         WHEN 'publish' THEN b.state = 'running' AND NOT EXISTS (
           SELECT 1 FROM backfill.backfill_steps r WHERE r.backfill_id = s.backfill_id AND r.kind = 'stage' AND r.status <> 'done')
           AND NOT EXISTS (
           SELECT 1 FROM backfill.backfill_steps p
           JOIN backfill.backfill_targets pt ON pt.backfill_id = p.backfill_id AND p.step_key = to_char(pt.partition_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24":00Z"')
           JOIN backfill.backfill_targets st ON st.backfill_id = s.backfill_id AND s.step_key = to_char(st.partition_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24":00Z"')
           WHERE p.backfill_id = s.backfill_id AND p.kind = 'publish' AND p.status <> 'done' AND pt.wave < st.wave)
         WHEN 'watermark' THEN b.state = 'running' AND NOT EXISTS (
           SELECT 1 FROM backfill.backfill_steps r WHERE r.backfill_id = s.backfill_id AND r.kind IN ('stage', 'publish') AND r.status <> 'done')
         -- A replay waits for every consumer it depends on; during a rollback the keys carry "@rollback".
         WHEN 'replay' THEN (b.state = 'replaying' AND s.step_key NOT LIKE '%@rollback' OR b.state = 'rolling_back' AND s.step_key LIKE '%@rollback')
           AND NOT EXISTS (
           SELECT 1 FROM backfill.backfill_consumers bc
           JOIN backfill.backfill_steps d ON d.backfill_id = bc.backfill_id AND d.kind = 'replay'
             AND split_part(d.step_key, '@', 1) = ANY (bc.depends_on)
             AND (d.step_key LIKE '%@rollback') = (s.step_key LIKE '%@rollback')
           WHERE bc.backfill_id = s.backfill_id AND bc.consumer = split_part(s.step_key, '@', 1) AND d.status <> 'done')
         WHEN 'compare' THEN b.state = 'comparing'
         WHEN 'notify' THEN (b.state = 'done' AND s.step_key NOT LIKE '%@rollback') OR (b.state = 'rolling_back' AND s.step_key LIKE '%@rollback' AND NOT EXISTS (
           SELECT 1 FROM backfill.backfill_steps r WHERE r.backfill_id = s.backfill_id AND r.kind = 'replay' AND r.step_key LIKE '%@rollback' AND r.status <> 'done'))
         WHEN 'report' THEN (b.state = 'done' AND s.step_key <> 'rollback') OR (b.state = 'rolled_back' AND s.step_key = 'rollback')
         ELSE false
       END
     ORDER BY s.backfill_id, array_position($2::text[], s.kind), s.step_key`, [backfillId ?? null, [...STEP_KINDS]]);
  return rows;
}

/**
 * approved → running for every backfill whose gate opened and whose announcements have all gone out (an
 * override skips an acknowledgement, never the message); records when it ran and who ran it.
 */
export async function startApproved(ctx: EngineContext, backfillId?: number): Promise<number[]> {
  const { rows } = await ctx.pool.query<{ id: number; requestedBy: string }>(
    `SELECT id, requested_by AS "requestedBy" FROM backfill.backfills b
     WHERE state = 'approved' AND ($1::bigint IS NULL OR id = $1::bigint)
       AND NOT EXISTS (SELECT 1 FROM backfill.backfill_steps s WHERE s.backfill_id = b.id AND s.kind = 'announce' AND s.status <> 'done')`,
    [backfillId ?? null]);
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
