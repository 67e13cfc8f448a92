import type { Queue, Worker } from 'bullmq';
import { createStepProcessor } from '../jobs/stepProcessor.js';
import { STEP_QUEUE } from './queue/registry.js';
import type { StepContext } from './core/procedure.js';
import { cancelRunningStatements } from './db/pool.js';
import { queueBackendOf } from './backends.js';
import { createWorker } from './queue/connection.js';
import { BullmqReplayJobs } from './queue/replayJobs.js';
import { createStepQueue, dispatch, removeQueuedJobs, restoreRetention, scheduleRetention } from './queue/stepQueue.js';
import { logger, type Logger } from './log.js';
import { StatusRefreshes } from './queue/statusRefreshes.js';

export interface Workers {
  queue: Queue;
  worker: Worker;
  /** Dispatch now (e.g. right after a person's action opened a gate). */
  kick(backfillId?: number): Promise<void>;
  /** Take a stopped backfill's not-yet-started jobs out of the queue. */
  dequeue(backfillId: number): Promise<number>;
  close(): Promise<void>;
}

const SWEEP_MS = 5_000;
const CLOSE_DEADLINE_MS = 10_000;
/** After cancelling, how long the cancelled steps get to give their claims back before the worker is forced shut. */
const CANCEL_GRACE_MS = 2_000;

/**
 * Starts the step worker and the dispatcher sweep. Several processes may run this against one Redis and one
 * database: job ids and the step rows keep them from doing anything twice.
 */
export async function startWorkers(given: StepContext, options: { sweepMs?: number; closeDeadlineMs?: number } = {}): Promise<Workers> {
  // The consumers' queues for bullmq re-triggers: opened on first use, closed with the worker.
  const ownReplayJobs = given.replayJobs ? undefined : new BullmqReplayJobs(given.config);
  const ctx: StepContext = ownReplayJobs ? { ...given, replayJobs: ownReplayJobs } : given;
  const queue = createStepQueue(ctx.config);
  const log = (ctx.log ?? logger()).child({ component: 'worker' });
  const refreshes = new StatusRefreshes(ctx.messenger, log);
  const worker = createWorker(queueBackendOf(ctx.config), STEP_QUEUE, createStepProcessor(ctx, queue, refreshes), { concurrency: ctx.config.WORKER_CONCURRENCY });
  worker.on('error', (error) => log.error({ err: error }, 'the step worker reported an error'));
  await worker.waitUntilReady();
  await scheduleRetention(queue, ctx.config.RETENTION_INTERVAL_MS);
  const kick = async (backfillId?: number) => {
    await dispatch(ctx, queue, backfillId);
    // The full sweep also rebuilds what lives only in the queue: the retention schedule.
    if (backfillId === undefined) await restoreRetention(queue, ctx.config.RETENTION_INTERVAL_MS);
  };
  await kick();
  // A sweep never overlaps the one before: a slow sweep skips the ticks that come while it runs.
  let sweep: Promise<void> | undefined;
  const timer = setInterval(() => {
    if (sweep) return;
    sweep = kick().catch((error: unknown) => log.warn({ err: error }, 'the dispatcher sweep failed; the next one tries again')).finally(() => {
      sweep = undefined;
    });
  }, options.sweepMs ?? SWEEP_MS);
  timer.unref();
  return {
    queue,
    worker,
    kick,
    dequeue: (backfillId: number) => removeQueuedJobs(queue, backfillId),
    close: async () => {
      clearInterval(timer);
      // A sweep still adding jobs must finish before the queue closes: on the PostgreSQL backend a call on a
      // closed queue never settles.
      await sweep;
      await closeWorker(ctx, worker, queue, options.closeDeadlineMs ?? CLOSE_DEADLINE_MS, log);
      // The last steps' status refreshes (src/queue/statusRefreshes.ts): the message shows where the run ended.
      if (!(await within(refreshes.idle().then(() => true), options.closeDeadlineMs ?? CLOSE_DEADLINE_MS))) log.warn('worker close: a status refresh was still running at the deadline');
      await ownReplayJobs?.close();
    },
  };
}

/**
 * Stops taking jobs and waits for the running ones until the deadline. Past it, every statement the context's
 * pool still runs (the process is stopping: the pool is its own) is cancelled in PostgreSQL (their transactions roll back and their steps go back to pending for
 * another worker, whose claim check makes the retry safe), then the worker is closed by force: nothing the
 * process started keeps running in the database after it is gone.
 */
async function closeWorker(ctx: StepContext, worker: Worker, queue: Queue, deadlineMs: number, log: Logger): Promise<void> {
  // worker.close() waits for active jobs with no bound of its own (and can hang while Redis is away).
  const closed = worker.close().then(() => true);
  if (!(await within(closed, deadlineMs))) {
    const cancelled = await cancelRunningStatements(ctx.pool).catch((error: unknown) => {
      log.error({ err: error }, 'worker close: could not cancel the running statements');
      return 0;
    });
    if (cancelled > 0) log.warn({ cancelled, deadlineMs }, `worker close: cancelled ${cancelled} statement(s) still running after ${deadlineMs} ms`);
    if (!(await within(closed, CANCEL_GRACE_MS))) await worker.close(true);
  }
  await queue.close();
}

async function within(done: Promise<boolean>, ms: number): Promise<boolean> {
  const timedOut = new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms).unref());
  return Promise.race([done, timedOut]);
}
