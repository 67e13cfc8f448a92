import type { RunConfig } from '../../backends.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { SecretRef } from './definition.js';
import { urlPolicyOf, type HostResolver, type UrlPolicy } from './urlPolicy.js';

// What every remote re-trigger kind is called with: the replay (which backfill, consumer and partitions, and
// its key), and the worker's environment (settings, secrets, the consumers' queues, how hosts resolve).

/** One replay of one consumer: the same call, whichever attempt makes it. */
export interface ReplayCall {
  backfillId: number;
  consumer: string;
  partitions: Date[];
  /** Part of undoing the backfill: a second replay of the same consumer, with a key of its own. */
  rollback: boolean;
}

/**
 * The name of this replay for whoever receives it: the webhook's and the REST call's idempotency key, the
 * BullMQ job's id. Every attempt of the step sends the same one, so a receiver that dedupes drops a retry; a
 * rollback's replay is another run of the consumer and gets another name. No ":" (BullMQ refuses it in an id).
 */
export function replayKey(call: Pick<ReplayCall, 'backfillId' | 'consumer' | 'rollback'>): string {
  return `backfill-${call.backfillId}-${call.rollback ? 'rollback-replay' : 'replay'}-${call.consumer}`;
}

/** What a remote replay needs besides its definition: the settings, the secrets, and (bullmq) the queues. */
export interface RetriggerEnvironment {
  config: Pick<RunConfig, 'WEBHOOK_SIGNING_SECRET' | 'WEBHOOK_TIMEOUT_MS' | 'RETRIGGER_SECRETS' | 'RETRIGGER_ALLOWED_HOSTS'>;
  replayJobs?: ReplayJobs | undefined;
  /** How a URL's host is resolved before it is called; unset: the system's resolver. */
  resolveHost?: HostResolver | undefined;
}

/** The hosts this worker may reach, and how it resolves them. */
export function urlPolicyFor(env: RetriggerEnvironment): UrlPolicy {
  return urlPolicyOf(env.config, env.resolveHost);
}

/** The secret's value from the worker's environment, or a refusal naming the variable to set. */
export function resolveSecret(env: RetriggerEnvironment, consumer: string, ref: SecretRef): string {
  const value = env.config.RETRIGGER_SECRETS?.[ref.env];
  if (value === undefined) {
    throw new BackfillError(ErrorCode.Config, `The re-trigger of ${consumer} needs ${ref.env}, which is not set in this worker's environment: set it on every worker and restart them.`);
  }
  return value;
}

/** Where the job goes: the queue, and which backend holds it. */
export interface ReplayJobTarget {
  queue: string;
  /** 'default': the bot's own queue backend (REDIS_URL, or BullMQ on its PostgreSQL); else a redis:// or postgres:// URL. */
  connection: string;
  /** The consumer's queue prefix (a schema bullmq_<prefix> on PostgreSQL); unset: BullMQ's default on Redis, the bot's schema on PostgreSQL. */
  prefix?: string | undefined;
}

export type ReplayJobState = 'completed' | 'failed' | 'active' | 'waiting' | 'delayed' | 'prioritized' | 'waiting-children' | 'unknown';

export interface ReplayJobs {
  /** Adds the job under `jobId`, or does nothing when a job with that id is already in the queue. */
  add(target: ReplayJobTarget, job: { name: string; jobId: string; data: Record<string, unknown> }): Promise<{ added: boolean }>;
  /** The job's state, and why it failed when it did. */
  state(target: ReplayJobTarget, jobId: string): Promise<{ state: ReplayJobState; failedReason?: string | undefined }>;
}

/**
 * The webhook signing secret `npm start` and `npm run worker` cannot run without, or a sentence that says how to
 * make one. A re-trigger run elsewhere (the CLI's workers) asks for it when a webhook is called.
 */
export function requireWebhookSecret(config: Pick<RunConfig, 'WEBHOOK_SIGNING_SECRET'>): string {
  if (!config.WEBHOOK_SIGNING_SECRET) {
    throw new BackfillError(ErrorCode.Config,
      'WEBHOOK_SIGNING_SECRET is not set: it signs every webhook re-trigger, so receivers can tell the bot from anyone else. Make one with `openssl rand -hex 32`, set it on every bot and worker, and give it to the webhooks\' owners.');
  }
  return config.WEBHOOK_SIGNING_SECRET;
}
