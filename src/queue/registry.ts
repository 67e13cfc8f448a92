import { z } from 'zod';
import { STEP_KINDS, type StepRef } from '../core/procedure.js';

/** The one queue every backfill step goes through; the job name is the step kind. */
export const STEP_QUEUE = 'backfill-steps';

export const stepPayloadSchema = z.object({
  backfillId: z.number().int().positive(),
  kind: z.enum(STEP_KINDS),
  key: z.string().min(1),
}) satisfies z.ZodType<StepRef>;

/** A delayed job: re-send an unanswered announcement. Not a step: whether it is due is read from the rows. */
export const REMIND_JOB = 'remind';

export const remindPayloadSchema = z.object({
  backfillId: z.number().int().positive(),
  consumer: z.string().min(1),
});

/**
 * A delayed job: one step of an owner's escalation path. Not a step either: whether it is due, and whether the
 * owner has answered, is read from the rows (src/core/announce/escalation.ts).
 */
export const ESCALATE_JOB = 'escalate';

export const escalatePayloadSchema = z.object({
  backfillId: z.number().int().positive(),
  consumer: z.string().min(1),
  step: z.number().int().positive(),
});

/** Tell one stale reader that hours it read while missing are now real (a catch-up notice row). */
export const STALE_READER_JOB = 'tell-stale-reader';

export const staleReaderPayloadSchema = z.object({
  catchUpId: z.number().int().positive(),
  consumer: z.string().min(1),
  period: z.string().regex(/^\d{4}-\d{2}-\d{2}$/),
});

/** Drop the staged and saved rows no rollback can need any more (a job scheduler, every RETENTION_INTERVAL_MS). */
export const RETENTION_JOB = 'retention';

export const retentionPayloadSchema = z.object({});
