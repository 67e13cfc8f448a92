import { Worker, type Queue } from 'bullmq';
import { createStepProcessor } from '../jobs/stepProcessor.js';
import { STEP_QUEUE } from '../jobs/registry.js';
import type { StepContext } from './core/steps.js';
import { createStepQueue, dispatch, redisConnection, removeQueuedJobs } from './queue/stepQueue.js';

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

/**
 * Starts the step worker and the dispatcher sweep. Several processes may run this against one Redis and one
 * database: job ids and the step rows keep them from doing anything twice.
 */
export async function startWorkers(ctx: StepContext, options: { sweepMs?: number } = {}): Promise<Workers> {
  const queue = createStepQueue(ctx.config);
  const worker = new Worker(STEP_QUEUE, createStepProcessor(ctx, queue), {
    connection: redisConnection(ctx.config),
    prefix: ctx.config.QUEUE_PREFIX,
    concurrency: ctx.config.WORKER_CONCURRENCY,
  });
  worker.on('error', (error) => console.error(`worker: ${error.message}`));
  await worker.waitUntilReady();
  const kick = async (backfillId?: number) => {
    await dispatch(ctx, queue, backfillId);
  };
  await kick();
  // A sweep never overlaps the one before: a slow sweep skips the ticks that come while it runs.
  let sweeping = false;
  const timer = setInterval(() => {
    if (sweeping) return;
    sweeping = true;
    kick().catch((error: unknown) => console.error(`dispatcher sweep: ${(error as Error).message}`)).finally(() => {
      sweeping = false;
    });
  }, options.sweepMs ?? SWEEP_MS);
  timer.unref();
  return {
    queue,
    worker,
    kick,
    dequeue: (backfillId: number) => removeQueuedJobs(queue, backfillId),
    async close() {
      clearInterval(timer);
      // worker.close() waits for active jobs with no bound of its own (and can hang while Redis is away).
      const closed = worker.close().then(() => true);
      const timedOut = new Promise<boolean>((resolve) => setTimeout(() => resolve(false), CLOSE_DEADLINE_MS).unref());
      if (!(await Promise.race([closed, timedOut]))) await worker.close(true);
      await queue.close();
    },
  };
}
