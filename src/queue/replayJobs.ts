import type { Queue } from 'bullmq';
import { queueBackendOf, type QueueBackend, type RunConfig } from '../backends.js';
import type { ReplayJobs, ReplayJobState, ReplayJobTarget } from '../core/retrigger/call.js';
import { createQueue } from './connection.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { logger } from '../log.js';

// The consumers' own BullMQ queues, for re-triggers of kind bullmq (src/core/retrigger/jobRetrigger.ts). Built
// with the project's one constructor (connection.ts), so a consumer's queue works on Redis and on BullMQ's
// PostgreSQL backend alike. A queue is opened on first use and kept until close(): a worker replays many
// backfills, and opening one per replay would cost a connection each time.

/** BullMQ's own key prefix on Redis: what a consumer's worker uses unless it sets one. */
const BULLMQ_DEFAULT_PREFIX = 'bull';

/** The backend of a target: the bot's own (its Redis, or its PostgreSQL), or the URL the catalog names. */
export function replayBackendOf(config: RunConfig, target: ReplayJobTarget): QueueBackend {
  const prefix = target.prefix ?? BULLMQ_DEFAULT_PREFIX;
  if (target.connection === 'default') return queueBackendOf({ ...config, QUEUE_PREFIX: prefix });
  const url = new URL(target.connection);
  return url.protocol === 'redis:' || url.protocol === 'rediss:'
    ? queueBackendOf({ ...config, REDIS_URL: target.connection, QUEUE_PREFIX: prefix })
    : queueBackendOf({ ...config, REDIS_URL: undefined, DATABASE_URL: target.connection, QUEUE_PREFIX: prefix });
}

export class BullmqReplayJobs implements ReplayJobs {
  private readonly queues = new Map<string, Queue>();

  constructor(private readonly config: RunConfig) {}

  async add(target: ReplayJobTarget, job: { name: string; jobId: string; data: Record<string, unknown> }): Promise<{ added: boolean }> {
    const queue = this.queueOf(target);
    // BullMQ ignores an add under a known id; asking first tells the timeline whether this attempt added it.
    if (await this.answered(target, queue.getJob(job.jobId))) return { added: false };
    await this.answered(target, queue.add(job.name, job.data, { jobId: job.jobId }));
    return { added: true };
  }

  async state(target: ReplayJobTarget, jobId: string): Promise<{ state: ReplayJobState; failedReason?: string | undefined }> {
    const job = await this.answered(target, this.queueOf(target).getJob(jobId));
    if (!job) return { state: 'unknown' };
    const state = await this.answered(target, job.getState());
    return { state, failedReason: state === 'failed' ? job.failedReason : undefined };
  }

  async close(): Promise<void> {
    const queues = [...this.queues.values()];
    this.queues.clear();
    await Promise.all(queues.map((queue) => queue.close()));
  }

  /**
   * The call's answer, or a retryable failure once WEBHOOK_TIMEOUT_MS has passed without one. The queues'
   * connections retry for ever (BullMQ insists), so a consumer's Redis or database that is down would otherwise
   * hold the replay step, and its claim, with no end. The call left behind settles into nothing.
   */
  private async answered<T>(target: ReplayJobTarget, call: Promise<T>): Promise<T> {
    const ms = this.config.WEBHOOK_TIMEOUT_MS;
    call.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new BackfillError(ErrorCode.StepFailed,
        `the queue ${target.queue} did not answer within ${ms} ms (WEBHOOK_TIMEOUT_MS): check that its Redis or database is up and reachable from the workers`,
        { retryable: true })), ms);
    });
    try {
      return await Promise.race([call, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  private queueOf(target: ReplayJobTarget): Queue {
    const backend = replayBackendOf(this.config, target);
    const key = JSON.stringify([backend, target.queue]);
    let queue = this.queues.get(key);
    if (!queue) {
      queue = createQueue(backend, target.queue);
      // A connection that keeps failing says so once, not on every reconnect; the replay's deadline does the rest.
      let warned = false;
      queue.on('error', (error) => {
        if (!warned) logger().warn({ queue: target.queue, err: error.message }, "a consumer's replay queue cannot reach its backend");
        warned = true;
      });
      this.queues.set(key, queue);
    }
    return queue;
  }
}
