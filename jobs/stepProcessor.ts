import { UnrecoverableError, type Job, type Queue } from 'bullmq';
import { executeStep, failStep, type StepContext, type StepOutcome } from '../src/core/steps.js';
import { isBackfillError } from '../src/errors.js';
import { dispatch } from '../src/queue/stepQueue.js';
import { REMIND_JOB, remindPayloadSchema, STALE_READER_JOB, staleReaderPayloadSchema, stepPayloadSchema } from './registry.js';
import { tellStaleReader } from '../src/core/catchUps.js';
import { sendReminder } from '../src/core/reminders.js';

/**
 * A thin shell over the core: parse, run the step, enqueue whatever became runnable. A failure is recorded
 * against the step; on the last attempt (or one that retrying cannot fix) the backfill fails and BullMQ
 * is told not to retry.
 */
export function createStepProcessor(ctx: StepContext, queue: Queue) {
  return async (job: Job): Promise<StepOutcome | 'reminded' | 'not_due' | 'told'> => {
    if (job.name === STALE_READER_JOB) {
      return (await tellStaleReader(ctx, staleReaderPayloadSchema.parse(job.data))) ? 'told' : 'already_done';
    }
    if (job.name === REMIND_JOB) {
      const { backfillId, consumer } = remindPayloadSchema.parse(job.data);
      const sent = await sendReminder(ctx, backfillId, consumer);
      if (sent) await ctx.messenger.changed(backfillId);
      return sent ? 'reminded' : 'not_due';
    }
    const step = stepPayloadSchema.parse(job.data);
    try {
      const outcome = await executeStep(ctx, step);
      await dispatch(ctx, queue, step.backfillId);
      await ctx.messenger.changed(step.backfillId);
      return outcome;
    } catch (error) {
      const retryable = !isBackfillError(error) || error.retryable;
      const final = !retryable || job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      await failStep(ctx, step, error, final);
      await ctx.messenger.changed(step.backfillId);
      if (final) throw new UnrecoverableError(error instanceof Error ? error.message : String(error));
      throw error;
    }
  };
}
