import { findBackfillConsumer, markConsumerUndeliverable, recordAnnounceRateLimited, type StoredAnnouncement } from '../../db/backfillConsumers.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction } from '../../db/pool.js';
import { lockStepClaim } from '../../db/steps.js';
import { BackfillError, ErrorCode, isBackfillError } from '../../errors.js';
import { intentKey, type DeliveryOptions } from '../messenger.js';
import { ENGINE, type StepContext } from './runStep.js';
import { finishStep } from './stepClaims.js';
import { consumerOf, type StepRef } from './stepGraph.js';

// What every step that sends a message shares: a message Slack will never take is a fact, not a retry; a rate
// limit is waited out inside the attempt; before each send the claim is confirmed; a notice to the incident
// channel never stops the step that sends it.

/**
 * Delivers a step's message. When Slack answers that it will never take it (user_not_found, account_inactive,
 * …), that is a fact, not a retry: the step ends undeliverable with Slack's reason, an announcement's consumer
 * is marked so (the gate still waits for it until an operator overrides), and the incident channel is told
 * what to do. Any other error goes on to the retry.
 */
export async function deliver<T>(ctx: StepContext, ref: StepRef, token: string, send: () => Promise<T>): Promise<T | 'undeliverable'> {
  try {
    return await send();
  } catch (error) {
    if (!isBackfillError(error, ErrorCode.Undeliverable)) throw error;
    const slackError = typeof error.details.slackError === 'string' ? error.details.slackError : 'undeliverable';
    const consumer = ref.kind === 'announce' || ref.kind === 'notify' ? consumerOf(ref) : null;
    const owner = consumer ? (await backfillConsumer(ctx, ref)).owner : null;
    await tellIncident(ctx, ref, () => ctx.messenger.incidentNotice(ref.backfillId, { kind: 'undeliverable', backfillId: ref.backfillId, step: ref.kind, owner, consumer, slackError }, intentKey(ref.backfillId, 'undeliverable', ref.key)));
    await withTransaction(ctx.pool, async (tx) => {
      if (ref.kind === 'announce') {
        await markConsumerUndeliverable(tx, ref.backfillId, consumer, slackError);
      }
      await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'undeliverable', detail: { step: ref.kind, key: ref.key, consumer, owner, slackError, message: error.message } });
      await finishStep(tx, ref, token, { slackError }, { status: 'undeliverable' });
    });
    return 'undeliverable';
  }
}

/**
 * How a step's message waits out Slack's rate limit (429, Retry-After): as long as Slack says, as often as it
 * says, inside the attempt. The attempt neither fails nor ends, so a rate limit burns none of JOB_ATTEMPTS;
 * the lease stays this worker's (keepClaim renews it every third of STEP_LEASE_MS while the body runs, and
 * BullMQ renews the job's lock), and the message's intent row stays as it was: Slack posted nothing, so the
 * next try is the same post, never a second message.
 *
 * Why here rather than releasing the step back to pending with a delay of Retry-After: every 429 would then be
 * a claim, a release and a delayed job (a row, a transaction and a queue round trip per wait, with 100 owners
 * behind a one-a-second limit that is thousands), and an attempt count the queue keeps would have to be told
 * that these releases do not count. A waiting step holds a worker slot, but while Slack is the bottleneck a
 * free slot would post nothing more. What the release would have given (someone can see the wait, a stop
 * ends it) is kept: each wait is a row the gate shows (announce_retry_at), and before every send (the first,
 * and each after a wait) the claim is confirmed in the database, so a stopped step, or one taken over while
 * this worker was frozen in a wait longer than its lease, sends nothing more (ClaimLost).
 */
export function waitOutRateLimits(ctx: StepContext, ref: StepRef, token: string): DeliveryOptions {
  return {
    waitOutRateLimit: async (retryAfterSeconds) => {
      if (ref.kind === 'announce') await recordAnnounceRateLimited(ctx.pool, ref.backfillId, consumerOf(ref), retryAfterSeconds);
      ctx.log?.info({ retryAfterSeconds }, `${ref.kind} ${ref.key}: Slack is rate-limiting; next try in ${retryAfterSeconds} s`);
      // The status shows who is still being told; a refresh never throws, and is not waited for.
      void ctx.messenger.changed(ref.backfillId);
      await new Promise((resolve) => setTimeout(resolve, retryAfterSeconds * 1000));
    },
    // Asked by the messenger right before each try, after the wait: the wait may have outlasted the lease.
    confirmSending: () => requireClaim(ctx, ref, token),
  };
}

/** The step is still this worker's (running, under its token), or ClaimLost: a stop or a takeover came. */
async function requireClaim(ctx: StepContext, ref: StepRef, token: string): Promise<void> {
  const step = await withTransaction(ctx.pool, (tx) => lockStepClaim(tx, ref));
  if (step?.status === 'running' && step.token === token) return;
  throw new BackfillError(ErrorCode.ClaimLost,
    `${ref.kind} ${ref.key} of backfill #${ref.backfillId} is no longer this worker's (it is ${step?.status ?? 'gone'}): it sends nothing (a stop ended the step, or a worker that took it over delivers the message)`,
    { details: { status: step?.status } });
}

/** A message to the incident channel that must not stop the step that sends it (the fact is already a row). */
export async function tellIncident(ctx: StepContext, ref: StepRef, send: () => Promise<void>): Promise<void> {
  try {
    await send();
  } catch (error) {
    if (!isBackfillError(error, ErrorCode.Undeliverable)) throw error;
    await recordEvent(ctx.pool, { backfillId: ref.backfillId, actor: ENGINE, kind: 'undeliverable', detail: { step: ref.kind, key: ref.key, to: 'incident channel', message: error.message } });
  }
}

export async function backfillConsumer(ctx: StepContext, ref: StepRef): Promise<{ owner: string } & StoredAnnouncement> {
  const row = await findBackfillConsumer(ctx.pool, ref.backfillId, consumerOf(ref));
  if (!row) throw new BackfillError(ErrorCode.UnknownConsumer, `consumer ${ref.key} is not part of backfill #${ref.backfillId}`);
  return row;
}
