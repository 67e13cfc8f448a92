import type { JobsOptions, Queue } from 'bullmq';
import { queueBackendOf, type RunConfig } from '../backends.js';
import { createQueue } from './connection.js';
import type { EngineContext } from '../core/context.js';
import { advanceAll, findRunnableSteps, recordEnqueued, startApproved, type RunnableStep } from '../core/lifecycle/dispatch.js';
import type { StepRef } from '../core/procedure.js';
import { ESCALATE_JOB, escalatePayloadSchema, REMIND_JOB, remindPayloadSchema, RETENTION_JOB, STALE_READER_JOB, staleReaderPayloadSchema, STEP_QUEUE, stepPayloadSchema } from './registry.js';
import { listUntoldNotices } from '../db/catchUps.js';
import { findDueReminders } from '../db/reminders.js';
import { findDispatchState, hasOutstandingEscalations, listOutstandingEscalations } from '../db/escalations.js';
import { prepareEscalations } from '../core/announce/escalation.js';
import type { BackfillState } from '../core/states.js';

/** The step queue on the backend src/backends.ts chose for this configuration. */
export function createStepQueue(config: RunConfig): Queue {
  return createQueue(queueBackendOf(config), STEP_QUEUE);
}

/**
 * <backfill>-<kind>-<key>, with the characters BullMQ reserves (":") taken out: the same step, the same id.
 * A takeover of attempt n (its worker died holding the claim) is <…>-takeover<n>: deterministic too, and not
 * blocked by the dead worker's job, which BullMQ only releases once its own lock runs out.
 */
function jobIdFor(step: StepRef & { takeoverOf?: number | undefined }): string {
  const base = `bf${step.backfillId}-${step.kind}-${step.key.replace(/[^A-Za-z0-9_.-]/g, '')}`;
  return step.takeoverOf === undefined ? base : `${base}-takeover${step.takeoverOf}`;
}

/**
 * BullMQ takes a job without a priority before any prioritized one. A stage, the bulk of a backfill's work, is
 * prioritized below everything else: on a target published by rewrite the canary and each wave publish as soon
 * as their own partitions are staged, instead of behind every stage queued before them, and the stages of later
 * hours fill the slots a wave leaves. (A publish by swap waits for every stage anyway: stepGraph.ts.) Order is
 * all it changes: which step may run is the step graph's, checked again at claim.
 */
const STAGE_PRIORITY = 10;

/**
 * Turns rows into jobs. Runs after every state change, on start-up and on a timer, so work lost with a
 * process or with Redis is enqueued again from Postgres; a job id that already exists is not added twice.
 * With a backfill named (after one of its steps), the work of the gate (starting an approved backfill,
 * reminders) is looked for only while its state can have any.
 */
export async function dispatch(ctx: EngineContext, queue: Queue, backfillId?: number): Promise<StepRef[]> {
  const known = backfillId === undefined ? undefined : await findDispatchState(ctx.pool, backfillId);
  const state = known?.state;
  if (state === undefined || state === 'approved') await startApproved(ctx, backfillId);
  if (backfillId === undefined) await advanceAll(ctx);
  const runnable = await findRunnableSteps(ctx.pool, backfillId);
  // PERF: most runnable steps are already queued (every stage of a backfill is runnable at once, and each
  // finished step dispatches again): their job ids are asked after side by side, not one round trip each, and
  // only of the look's window (DISPATCH_WINDOW, src/db/steps.ts), not of every stage still to run. The
  // missing ones are then added one by one, in the order of the rows: the queue's order is the graph's.
  const queued = await Promise.all(runnable.map((step) => willRun(queue, jobIdFor(step))));
  const added = await addSteps(ctx, queue, runnable.filter((_step, index) => !queued[index]));
  if (state === undefined || GATE_STATES.includes(state)) await scheduleReminders(ctx, queue, backfillId);
  // An escalation still to send: as the backfill's state was read, or (every backfill) looked up now.
  if (known === undefined || known.escalationsOutstanding) await scheduleEscalations(ctx, queue, backfillId);
  if (backfillId === undefined) await scheduleStaleReaderNotices(ctx, queue);
  return added;
}

/**
 * A job for each step, added one by one in the order given (the queue's order is the graph's), then recorded in the
 * timeline in one statement: what was added before a failure too, then the failure is thrown.
 */
async function addSteps(ctx: EngineContext, queue: Queue, steps: RunnableStep[]): Promise<StepRef[]> {
  const added: { step: StepRef; jobId: string }[] = [];
  try {
    for (const step of steps) {
      const jobId = jobIdFor(step);
      await queue.add(step.kind, stepPayloadSchema.parse({ backfillId: step.backfillId, kind: step.kind, key: step.key }), {
        jobId,
        attempts: ctx.config.JOB_ATTEMPTS,
        backoff: { type: 'exponential', delay: ctx.config.JOB_BACKOFF_MS },
        removeOnComplete: { age: 24 * 3600, count: 5000 },
        removeOnFail: { age: 7 * 24 * 3600 },
        ...(step.kind === 'stage' ? { priority: STAGE_PRIORITY } : {}),
      });
      added.push({ step: { backfillId: step.backfillId, kind: step.kind, key: step.key }, jobId });
    }
  } finally {
    await recordEnqueued(ctx.pool, added);
  }
  return added.map(({ step }) => step);
}

/** The states in which an announcement can still be unanswered and due a reminder (findDueReminders). */
const GATE_STATES: readonly BackfillState[] = ['announced', 'held'];

/**
 * Adds the job for work the database still calls outstanding, unless a job with its id will run anyway
 * (waiting, delayed, active). Returns whether a job was added.
 */
async function addWhileOutstanding(queue: Queue, name: string, data: object, options: JobsOptions & { jobId: string }): Promise<boolean> {
  if (await willRun(queue, options.jobId)) return false;
  await queue.add(name, data, options);
  return true;
}

/**
 * Whether a job under this id will run (waiting, prioritized, delayed, active). A finished one (it failed for
 * good, or returned because the backfill was paused) would swallow an add, since BullMQ ignores a known id: it
 * is removed, and the id is free.
 */
async function willRun(queue: Queue, jobId: string): Promise<boolean> {
  const state = await queue.getJobState(jobId);
  if (state === 'unknown') return false;
  if (state !== 'completed' && state !== 'failed') return true;
  await queue.remove(jobId);
  return false;
}

/** Untold catch-up notices become jobs; the notice row, not Redis, says whether it was told. */
async function scheduleStaleReaderNotices(ctx: EngineContext, queue: Queue): Promise<void> {
  for (const notice of await listUntoldNotices(ctx.pool)) {
    await addWhileOutstanding(queue, STALE_READER_JOB, staleReaderPayloadSchema.parse({ catchUpId: notice.catchUpId, consumer: notice.consumer, period: notice.period }), {
      jobId: `cu${notice.catchUpId}-${notice.consumer}-${notice.period}`,
      attempts: ctx.config.JOB_ATTEMPTS,
      backoff: { type: 'exponential', delay: ctx.config.JOB_BACKOFF_MS },
      removeOnComplete: { age: 24 * 3600 },
    });
  }
}

/**
 * One delayed reminder per unanswered announcement, due the configured delay after it went out, counted by
 * the database's clock. A completed job for a consumer still unreminded came early (sendReminder refused it):
 * it is added again, delayed by what is left.
 */
async function scheduleReminders(ctx: EngineContext, queue: Queue, backfillId?: number): Promise<void> {
  for (const due of await findDueReminders(ctx.pool, ctx.config.ANNOUNCE_REMINDER_MS, backfillId)) {
    const jobId = `bf${due.backfillId}-remind-${due.consumer}`;
    const existing = await queue.getJob(jobId);
    // A failed one stays failed, as before: only an early one (completed, nothing sent) is scheduled again.
    if (existing) {
      if ((await existing.getState()) !== 'completed') continue;
      await existing.remove();
    }
    await queue.add(REMIND_JOB, remindPayloadSchema.parse({ backfillId: due.backfillId, consumer: due.consumer }), {
      jobId,
      delay: due.dueInMs,
      attempts: ctx.config.JOB_ATTEMPTS,
      backoff: { type: 'exponential', delay: ctx.config.JOB_BACKOFF_MS },
      removeOnComplete: { age: 24 * 3600 },
    });
  }
}

/**
 * One delayed job per escalation step still to send, due when its row says by the database's clock, under a
 * deterministic id (bf<backfill>-escalate-<consumer>-<step>: a stop's dequeue takes it out with the rest). First
 * the rows are brought up to date: steps an answer made pointless are stopped, steps whose announcement went out
 * are dated. A finished job whose step is still outstanding came early or lost its worker: it is added again.
 */
async function scheduleEscalations(ctx: EngineContext, queue: Queue, backfillId?: number): Promise<void> {
  // PERF: every step's dispatch comes here (unless the backfill's state said none is outstanding); a backfill past
  // its gate has no step left to stop, date or send, and one lookup of the partial index says so instead of a
  // transaction and three statements.
  if (!(await hasOutstandingEscalations(ctx.pool, backfillId))) return;
  await prepareEscalations(ctx, backfillId);
  for (const due of await listOutstandingEscalations(ctx.pool, backfillId)) {
    await addWhileOutstanding(queue, ESCALATE_JOB, escalatePayloadSchema.parse({ backfillId: due.backfillId, consumer: due.consumer, step: due.step }), {
      jobId: `bf${due.backfillId}-escalate-${due.consumer}-${due.step}`,
      delay: due.dueInMs,
      attempts: ctx.config.JOB_ATTEMPTS,
      backoff: { type: 'exponential', delay: ctx.config.JOB_BACKOFF_MS },
      removeOnComplete: { age: 24 * 3600 },
    });
  }
}

/**
 * One retention job per interval for every worker of this queue (the scheduler's id is fixed, so each worker's
 * upsert is the same schedule): it drops the rows no rollback can need any more (src/core/recovery/retention.ts).
 */
export async function scheduleRetention(queue: Queue, everyMs: number): Promise<void> {
  await queue.upsertJobScheduler(RETENTION_JOB, { every: everyMs }, {
    name: RETENTION_JOB, data: {}, opts: { attempts: 1, removeOnComplete: { count: 20 }, removeOnFail: { count: 50 } },
  });
}

/**
 * The schedule lives only in the queue: emptied (Redis flushed or restarted empty), it would be gone until a
 * worker restarts. The workers' sweep puts it back, and only when it is missing, so a schedule in place keeps
 * its next run.
 */
export async function restoreRetention(queue: Queue, everyMs: number): Promise<void> {
  if (await queue.getJobScheduler(RETENTION_JOB)) return;
  await scheduleRetention(queue, everyMs);
}

/**
 * Removes a backfill's jobs that have not started (a stop). A job already running cannot be pulled out of its
 * worker; it finds its step skipped, or its write refused at commit by the state check inside its transaction.
 */
export async function removeQueuedJobs(queue: Queue, backfillId: number): Promise<number> {
  const jobs = await queue.getJobs(['waiting', 'delayed', 'prioritized', 'waiting-children']);
  let removed = 0;
  for (const job of jobs) {
    if (!job.id?.startsWith(`bf${backfillId}-`)) continue;
    await job.remove().then(() => {
      removed += 1;
    }, () => undefined);
  }
  return removed;
}
