import { UnrecoverableError, type Job, type Queue } from 'bullmq';
import { executeStep, type StepContext, type StepOutcome } from '../src/core/procedure.js';
import { isBackfillError } from '../src/errors.js';
import { logger } from '../src/log.js';
import { dispatch } from '../src/queue/stepQueue.js';
import { ESCALATE_JOB, escalatePayloadSchema, REMIND_JOB, remindPayloadSchema, RETENTION_JOB, retentionPayloadSchema, STALE_READER_JOB, staleReaderPayloadSchema, stepPayloadSchema } from '../src/queue/registry.js';
import { tellStaleReader } from '../src/core/retrigger/catchUps.js';
import { sendReminder } from '../src/core/announce/reminders.js';
import { failEscalation, sendEscalation, type EscalationOutcome } from '../src/core/announce/escalation.js';
import { pruneStoredRows, RETENTION_ACTOR } from '../src/core/recovery/retention.js';
import { StatusRefreshes } from '../src/queue/statusRefreshes.js';
import { CoalescedDispatch } from '../src/queue/coalescedDispatch.js';

/**
 * A thin shell over the core: parse, run the step, enqueue whatever became runnable. The core records a
 * failure against the step; on the last attempt (or one that retrying cannot fix) BullMQ is told not to retry.
 */
export function createStepProcessor(ctx: StepContext, queue: Queue, refreshes = new StatusRefreshes(ctx.messenger, ctx.log ?? logger())) {
  // Jobs of one backfill finishing side by side share the dispatch after their commits (src/queue/coalescedDispatch.ts).
  const dispatches = new CoalescedDispatch((backfillId: number) => dispatch(ctx, queue, backfillId));
  return async (job: Job): Promise<StepOutcome | EscalationOutcome | 'reminded' | 'not_due' | 'told' | { pruned: number }> => {
    if (job.name === RETENTION_JOB) {
      retentionPayloadSchema.parse(job.data);
      // Only what no rollback can need: the rows of a backfill whose rollback is still allowed wait for an operator.
      const pruned = await pruneStoredRows(ctx, { actor: RETENTION_ACTOR, includeRollbackRows: false });
      if (pruned.length > 0) (ctx.log ?? logger()).info({ job: job.name, pruned: pruned.length }, `retention dropped the stored rows of ${pruned.length} backfill(s)`);
      return { pruned: pruned.length };
    }
    if (job.name === STALE_READER_JOB) {
      return (await tellStaleReader(ctx, staleReaderPayloadSchema.parse(job.data))) ? 'told' : 'already_done';
    }
    if (job.name === REMIND_JOB) {
      const { backfillId, consumer } = remindPayloadSchema.parse(job.data);
      const sent = await sendReminder(ctx, backfillId, consumer);
      if (sent) refreshes.request(backfillId);
      (ctx.log ?? logger()).info({ job: job.name, backfillId, consumer, sent }, sent ? `reminded the owner of ${consumer}` : `no reminder due for ${consumer}`);
      return sent ? 'reminded' : 'not_due';
    }
    const finalAttempt = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
    if (job.name === ESCALATE_JOB) return escalate(ctx, refreshes, escalatePayloadSchema.parse(job.data), finalAttempt);
    const step = stepPayloadSchema.parse(job.data);
    try {
      // executeStep records a failure against the step itself (retry, or on the last attempt fail it and the backfill).
      const outcome = await executeStep(ctx, step, { finalAttempt });
      // A run that changed nothing (the step was done, is another worker's, or may not run yet) leaves the dispatch
      // and the status to whoever changes it. PERF: a stage taken into another's claim (a companion) is such a run,
      // and each dispatch reads the runnable steps and asks the queue after each.
      if (changedNothing(outcome)) return outcome;
      await dispatches.request(step.backfillId);
      refreshes.request(step.backfillId);
      return outcome;
    } catch (error) {
      refreshes.request(step.backfillId);
      const retryable = !isBackfillError(error) || error.retryable;
      if (finalAttempt || !retryable) throw new UnrecoverableError(error instanceof Error ? error.message : String(error));
      throw error;
    }
  };
}

function changedNothing(outcome: StepOutcome): boolean {
  return outcome === 'already_done' || outcome === 'claimed_elsewhere' || outcome === 'not_runnable';
}

/**
 * One escalation step (src/core/announce/escalation.ts). A failure is retried like a step's; the last one marks the
 * step failed, so that nothing names it as next any more.
 */
async function escalate(ctx: StepContext, refreshes: StatusRefreshes, key: { backfillId: number; consumer: string; step: number }, finalAttempt: boolean): Promise<EscalationOutcome> {
  try {
    const outcome = await sendEscalation(ctx, key);
    if (outcome !== 'not_due' && outcome !== 'already_done') refreshes.request(key.backfillId);
    (ctx.log ?? logger()).info({ job: ESCALATE_JOB, ...key, outcome }, `escalation step ${key.step} of ${key.consumer}: ${outcome}`);
    return outcome;
  } catch (error) {
    if (!finalAttempt) throw error;
    await failEscalation(ctx, key, error);
    refreshes.request(key.backfillId);
    throw new UnrecoverableError(error instanceof Error ? error.message : String(error));
  }
}
