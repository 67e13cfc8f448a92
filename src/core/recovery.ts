import { listTargets, requireBackfill, type BackfillRow } from '../db/backfills.js';
import { recordEvent } from '../db/events.js';
import { requirePipeline } from '../db/pipelines.js';
import { quoteIdent, quoteQualified, withTransaction } from '../db/pool.js';
import { BackfillError, ErrorCode } from '../errors.js';
import type { EngineContext } from './context.js';
import { lockPartition, snapshotPartition } from './partitionStep.js';
import { transition, wrongState } from './stateMachine.js';
import { formatHour } from './time.js';

/**
 * Stops a backfill for good: fences its generation (no write of it may commit any more, checked inside each
 * write transaction), skips what has not started, and records who and why. Removing its queued jobs is the
 * caller's part (the queue is not the core's); a job that slips through finds the step skipped or the fence.
 */
export async function stopBackfill(ctx: EngineContext, input: { backfillId: number; actor: string; reason: string }): Promise<BackfillRow> {
  if (!input.reason.trim()) throw new BackfillError(ErrorCode.BadInput, 'A stop needs a reason, e.g. "wrong step version deployed": the incident timeline keeps it.');
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    const moved = await transition(tx, {
      backfillId: backfill.id, to: 'stopped', actor: input.actor,
      set: { stopped_by: input.actor, stop_reason: input.reason.trim(), finished_at: new Date() },
    });
    if (!moved) throw wrongState(backfill.id, backfill.state, 'only a backfill that is still in flight can be stopped');
    await tx.query('UPDATE backfill.backfills SET fenced_generation = generation WHERE id = $1::bigint', [backfill.id]);
    await tx.query(`UPDATE backfill.backfill_steps SET status = 'skipped' WHERE backfill_id = $1::bigint AND status = 'pending'`, [backfill.id]);
    await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'stopped', detail: { reason: input.reason.trim(), fencedGeneration: backfill.generation } });
    return requireBackfill(tx, backfill.id);
  });
}

/**
 * An operator looked at the reconciliation of a paused backfill and accepts the difference: the staged
 * partitions outside the envelope are marked accepted (with who and why) and the expansion resumes.
 * Duplicate keys are never accepted: that data is wrong, whatever anyone says.
 */
export async function continueBackfill(ctx: EngineContext, input: { backfillId: number; actor: string; reason: string }): Promise<BackfillRow> {
  if (!input.reason.trim()) throw new BackfillError(ErrorCode.BadInput, 'Continuing past an unpredicted difference needs a reason: the timeline keeps it next to the difference.');
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    if (backfill.state !== 'paused') throw wrongState(backfill.id, backfill.state, 'only a paused backfill can be continued');
    const { rows } = await tx.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM backfill.reconciliations WHERE backfill_id = $1::bigint AND generation = $2::int AND phase = 'staged' AND keys_duplicated > 0`,
      [backfill.id, backfill.generation]);
    if ((rows[0]?.n ?? 0) > 0) {
      throw new BackfillError(ErrorCode.WrongState, `Backfill #${backfill.id} has duplicate keys in its staged data: that cannot be accepted. Roll it back or stop it, fix the step, and start a new one.`);
    }
    await tx.query(
      `UPDATE backfill.backfill_targets SET accepted_by = $2::text, accepted_reason = $3::text
       WHERE backfill_id = $1::bigint AND status = 'staged' AND accepted_by IS NULL`, [backfill.id, input.actor, input.reason.trim()]);
    await transition(tx, { backfillId: backfill.id, to: 'running', actor: input.actor, set: { paused_reason: null } });
    await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'continued', detail: { reason: input.reason.trim(), accepted: backfill.pausedReason } });
    return requireBackfill(tx, backfill.id);
  });
}

/**
 * Restores the preserved generation of every published partition in one transaction, when that prior state
 * is complete and nothing valid has been written to those partitions since the publish (their checksum is
 * still the published one); otherwise refuses, naming the partitions and why. Then the consumers replay in
 * dependency order and their owners are told, as for a backfill.
 */
export async function rollbackBackfill(ctx: EngineContext, input: { backfillId: number; actor: string }): Promise<{ backfill: BackfillRow; restored: Date[] }> {
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    if (!['done', 'failed', 'stopped', 'paused'].includes(backfill.state)) {
      throw wrongState(backfill.id, backfill.state, 'only a finished, failed, stopped or paused backfill can be rolled back');
    }
    const pipeline = await requirePipeline(tx, backfill.pipeline);
    const published = (await listTargets(tx, backfill.id)).filter((t) => t.status === 'published');
    if (published.length === 0) {
      throw new BackfillError(ErrorCode.WrongState, `Backfill #${backfill.id} published no partition: the live data is what it was before, so there is nothing to roll back.`);
    }
    const problems: string[] = [];
    for (const target of published) {
      await lockPartition(tx, pipeline.name, target.partitionHour);
      const preserved = await tx.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM backfill.preserved_rows WHERE backfill_id = $1::bigint AND generation = $2::int AND partition_hour = $3::timestamptz',
        [backfill.id, backfill.generation, target.partitionHour]);
      if (preserved.rows[0]?.n !== target.rowsBefore) {
        problems.push(`${formatHour(target.partitionHour)}: the preserved rows are incomplete (${preserved.rows[0]?.n ?? 0} of ${target.rowsBefore})`);
        continue;
      }
      const now = await snapshotPartition(tx, pipeline, target.partitionHour);
      if (now.checksum !== target.publishedChecksum) {
        problems.push(`${formatHour(target.partitionHour)}: written since the publish (${now.rows} rows now), and restoring would lose those writes`);
      }
    }
    if (problems.length > 0) {
      throw new BackfillError(ErrorCode.WrongState,
        `Backfill #${backfill.id} cannot be rolled back:\n${problems.map((p) => `  ${p}`).join('\n')}\nRepair it with a new backfill instead (a new generation); nothing was changed.`);
    }
    const table = quoteQualified(pipeline.targetTable);
    for (const target of published) {
      await tx.query(`DELETE FROM ${table} WHERE ${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`, [target.partitionHour]);
      await tx.query(
        `INSERT INTO ${table} SELECT (jsonb_populate_record(NULL::${table}, row_data)).*
         FROM backfill.preserved_rows WHERE backfill_id = $1::bigint AND generation = $2::int AND partition_hour = $3::timestamptz`,
        [backfill.id, backfill.generation, target.partitionHour]);
      const restored = await snapshotPartition(tx, pipeline, target.partitionHour);
      if (restored.checksum !== target.checksumBefore) {
        throw new BackfillError(ErrorCode.StepFailed, `restoring ${formatHour(target.partitionHour)} did not give back the prior rows (checksum differs); nothing was changed`);
      }
      await tx.query(`UPDATE backfill.backfill_targets SET status = 'restored' WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [backfill.id, target.partitionHour]);
    }
    await transition(tx, { backfillId: backfill.id, to: 'rolling_back', actor: input.actor, set: { rolled_back_by: input.actor, rolled_back_at: new Date() } });
    await tx.query(`UPDATE backfill.backfill_steps SET status = 'skipped' WHERE backfill_id = $1::bigint AND status IN ('pending', 'running')`, [backfill.id]);
    // Consumers replay on the restored rows, in dependency order, and every owner hears about it.
    await tx.query(
      `INSERT INTO backfill.backfill_steps (backfill_id, kind, step_key)
       SELECT $1::bigint, 'replay', consumer || '@rollback' FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint
       UNION ALL SELECT $1::bigint, 'notify', consumer || '@rollback' FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint
       UNION ALL SELECT $1::bigint, 'report', 'rollback'
       ON CONFLICT DO NOTHING`, [backfill.id]);
    await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'rolled_back', detail: { partitions: published.map((t) => formatHour(t.partitionHour)), generation: backfill.generation } });
    return { backfill: await requireBackfill(tx, backfill.id), restored: published.map((t) => t.partitionHour) };
  });
}
