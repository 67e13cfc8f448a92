import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside } from '../../redaction.js';
import { replayKey, resolveSecret, urlPolicyFor, type ReplayCall, type ReplayJobs, type ReplayJobState, type ReplayJobTarget, type RetriggerEnvironment } from './call.js';
import type { Retrigger } from './definition.js';
import { checkQueueHost } from './urlPolicy.js';

// A re-trigger as a job on the consumer's own BullMQ queue, for consumers that run workers of their own. The
// core knows no BullMQ (ARCHITECTURE.md): it asks through ReplayJobs, which src/queue/replayJobs.ts implements
// on Redis or on BullMQ's PostgreSQL backend, as the Messenger is implemented in src/slack. The job's id is the
// replay's key, so a retried step finds the job its earlier attempt added instead of adding a second one.

type JobRetrigger = Extract<Retrigger, { kind: 'bullmq' }>;

const DEFAULT_POLL_MS = 1_000;
const DEFAULT_TIMEOUT_MS = 10 * 60_000;

export interface JobOutcome {
  queue: string;
  jobId: string;
  added: boolean;
  state: ReplayJobState;
}

/** Enqueues the replay job; with `wait`, waits for the consumer's worker to complete it, and fails if it failed. */
export async function runJobRetrigger(retrigger: JobRetrigger, call: ReplayCall, env: RetriggerEnvironment): Promise<JobOutcome> {
  if (!env.replayJobs) {
    throw new BackfillError(ErrorCode.Config, `The re-trigger of ${call.consumer} is a BullMQ job, and this process was started without queues for re-triggers: run the steps in a worker (npm run worker, or npm start).`);
  }
  const connection = retrigger.connection === undefined || typeof retrigger.connection === 'string'
    ? retrigger.connection ?? 'default'
    : resolveSecret(env, call.consumer, retrigger.connection);
  // The bot's own backend is the operator's; a consumer's is the catalog's, so it reaches only allowed hosts.
  if (connection !== 'default') await checkQueueHost(connection, urlPolicyFor(env), (url) => `the queue ${retrigger.queue} of ${call.consumer} at ${url}`);
  const target: ReplayJobTarget = { queue: retrigger.queue, connection, prefix: retrigger.prefix };
  const jobId = replayKey(call);
  const data = {
    backfillId: call.backfillId, consumer: call.consumer, partitions: call.partitions.map((hour) => hour.toISOString()),
    idempotencyKey: jobId, rollback: call.rollback,
  };
  const { added } = await env.replayJobs.add(target, { name: retrigger.jobName, jobId, data });
  if (!retrigger.wait) return { queue: retrigger.queue, jobId, added, state: 'waiting' };
  const state = await waitForJob(env.replayJobs, target, jobId, retrigger, call.consumer);
  return { queue: retrigger.queue, jobId, added, state };
}

async function waitForJob(jobs: ReplayJobs, target: ReplayJobTarget, jobId: string, retrigger: JobRetrigger, consumer: string): Promise<ReplayJobState> {
  const timeoutMs = retrigger.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { state, failedReason } = await jobs.state(target, jobId);
    if (state === 'completed') return state;
    if (state === 'failed') {
      throw new BackfillError(ErrorCode.StepFailed, `${consumer}'s job ${jobId} on queue ${target.queue} failed: ${failedReason === undefined ? 'no reason given' : quoteOutside(failedReason)}`, { retryable: false });
    }
    if (state === 'unknown') {
      // Removed before it was seen to end (removeOnComplete: 0, or someone cleaned the queue): nobody can say
      // whether it ran, so the replay is not called done.
      throw new BackfillError(ErrorCode.StepFailed, `${consumer}'s job ${jobId} is gone from queue ${target.queue} before its end was seen: keep finished jobs a while (removeOnComplete by age or count)`, { retryable: false });
    }
    if (Date.now() >= deadline) {
      // Retryable: the next attempt finds the same job by its id and waits for it again.
      throw new BackfillError(ErrorCode.StepFailed, timedOut(consumer, jobId, target, state, timeoutMs), { retryable: true });
    }
    await new Promise((resolve) => setTimeout(resolve, retrigger.pollMs ?? DEFAULT_POLL_MS));
  }
}

/**
 * The last attempt's message is the backfill's failure, read by someone who must act on it: whether any worker
 * took the job tells a missing worker (or one on another queue or prefix) from a slow one, and the job left in
 * the queue means a later run of the consumer's worker still replays it.
 */
function timedOut(consumer: string, jobId: string, target: ReplayJobTarget, state: ReplayJobState, timeoutMs: number): string {
  const where = `queue ${target.queue}${target.prefix === undefined ? '' : ` (prefix ${target.prefix})`}`;
  const raise = `raise timeoutMs in ${consumer}'s retrigger in the catalog`;
  const advice = state === 'active'
    ? `its worker is still running it: if it needs longer, ${raise}`
    : `${state === 'waiting' || state === 'prioritized' ? 'no worker has taken it' : 'it has not run to its end'}: check that ${consumer}'s worker runs and listens on ${where}, or ${raise}`;
  return `${consumer}'s job ${jobId} on ${where} timed out: still ${state} after ${timeoutMs} ms; ${advice}. The job stays in the queue, and a retry waits for that same job instead of adding another`;
}
