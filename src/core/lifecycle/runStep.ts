import { recordEvent } from '../../db/events.js';
import { ErrorCode, isBackfillError } from '../../errors.js';
import { logger } from '../../log.js';
import type { EngineContext } from '../context.js';
import type { Messenger } from '../messenger.js';
import type { ReplayJobs } from '../retrigger/call.js';
import type { PublishHooks } from '../recompute/stagePublish.js';
import { releaseCompanionClaims } from '../../db/steps.js';
import { claimStep, failClaimedStep, keepClaim, releaseClaim, releaseForRetry, runClaimed, type ClaimOutcome, type CompanionClaim } from './stepClaims.js';
import type { StepRef } from './stepGraph.js';

// How one step runs, whatever it does: claimed by compare-and-set, its lease renewed while its body runs, its
// effect committed by the body in the transaction that checks the backfill's state and the claim (the fence),
// and a failure settled (retried, blocked by a pause, fenced by a stop, or final). The bodies are the
// procedure's (src/core/procedure.ts): this file knows none of them.

export interface StepContext extends EngineContext {
  messenger: Messenger;
  /** The consumers' own queues, for re-triggers of kind bullmq (src/queue/replayJobs.ts; startWorkers opens them). */
  replayJobs?: ReplayJobs;
  /** Test seams around a publish's commit (a stop arriving, a late writer); never set in production. */
  hooks?: PublishHooks;
}

/**
 * done: this run committed the step's effect. already_done: a duplicate delivery of a finished step.
 * not_runnable: the graph says not now (a later sweep enqueues it again). claimed_elsewhere: another worker
 * holds the step, or took it over. blocked: a pause caught it; a continue re-runs it. undeliverable: Slack will
 * never take its message, recorded as a fact.
 */
export type StepOutcome = 'done' | 'blocked' | 'undeliverable' | ClaimOutcome;

/**
 * A step's body: runs under a claim, commits its effect with finishStep(…, token) in one transaction; with the
 * companions its kind took into the claim (CompanionClaim), finishSteps for them all behind the same fence.
 */
export type StepBody = (ctx: StepContext, ref: StepRef, token: string, companions: readonly StepRef[]) => Promise<StepOutcome>;

/** Who the timeline names for what the engine did by itself. */
export const ENGINE = 'backfill-bot';

/**
 * Runs one step at least once, with effect exactly once: claimed by compare-and-set, its lease renewed while it
 * runs, and its effect committed in the transaction that checks the backfill's state and the claim (the fence) and marks it done.
 * A failed attempt gives the claim back (pending, for a retry) or, on the last attempt, fails the step and the
 * backfill; the error is rethrown for the queue.
 */
export async function runStep(ctx: StepContext, ref: StepRef, body: StepBody,
  options: { finalAttempt?: boolean; afterStep?: () => Promise<void>; companions?: CompanionClaim } = {}): Promise<StepOutcome> {
  const claim = await claimStep(ctx.pool, ref, ctx.config.STEP_LEASE_MS, options.companions);
  if (claim.outcome !== 'claimed') return claim.outcome;
  // Every line the step writes says which backfill and step it is about.
  const log = (ctx.log ?? logger()).child({ backfillId: ref.backfillId, step: ref.kind, key: ref.key });
  const stepCtx: StepContext = { ...ctx, log };
  const started = performance.now();
  const stopRenewing = keepClaim(ctx.pool, ref, claim.token, ctx.config.STEP_LEASE_MS);
  let outcome: StepOutcome | 'error' = 'error';
  let failure: unknown;
  try {
    // Its transactions carry the claim's name: a takeover ends the session of one this run left open (frozen).
    outcome = await runClaimed(ref, claim.token, () => body(stepCtx, ref, claim.token, claim.companions));
    return outcome;
  } catch (error) {
    failure = error;
    // Companions the run took with it committed nothing: they go back unrun, for their own jobs (a pause or a stop
    // has already moved them, a takeover may have taken one: this gives back only what the token still holds).
    if (claim.companions.length > 0) await releaseCompanionClaims(ctx.pool, ref, claim.token);
    outcome = await settleFailure(stepCtx, ref, claim.token, error, options.finalAttempt ?? true);
    return outcome;
  } finally {
    stopRenewing();
    reportStep(stepCtx, ref, outcome, (performance.now() - started) / 1000, failure);
    await options.afterStep?.();
  }
}

/** The step's line and its duration; `error` is a failure settleFailure rethrew (retried, or final). */
function reportStep(ctx: StepContext, ref: StepRef, outcome: StepOutcome | 'error', seconds: number, failure: unknown): void {
  ctx.metrics?.stepFinished(ref.kind, outcome, seconds);
  const fields = { outcome, durationMs: Math.round(seconds * 1000), ...(failure === undefined ? {} : { err: failure }) };
  if (outcome === 'error') ctx.log?.warn(fields, `${ref.kind} ${ref.key} failed`);
  else ctx.log?.info(fields, `${ref.kind} ${ref.key}: ${outcome}`);
}

/**
 * What a failed body means. A lost claim: someone else owns the step now, touch nothing. A backfill that moved
 * on under the step (paused: blocked; stopped, cancelled, failed, rolled back: skipped). Anything else is a real
 * failure: retried while attempts last, then final.
 */
async function settleFailure(ctx: StepContext, ref: StepRef, token: string, error: unknown, finalAttempt: boolean): Promise<StepOutcome> {
  if (isBackfillError(error, ErrorCode.ClaimLost)) {
    await recordEvent(ctx.pool, { backfillId: ref.backfillId, actor: ENGINE, kind: 'claim_lost', detail: { step: ref.kind, key: ref.key, message: error.message } });
    return 'claimed_elsewhere';
  }
  if (isBackfillError(error, ErrorCode.WrongState)) {
    const paused = error.details.state === 'paused';
    // The pause or stop may already have revoked the claim; either way this run's writes rolled back: say so.
    await releaseClaim(ctx.pool, ref, token, paused ? 'blocked' : 'skipped', error);
    await recordEvent(ctx.pool, { backfillId: ref.backfillId, actor: ENGINE, kind: paused ? 'step_blocked' : 'write_fenced', detail: { step: ref.kind, key: ref.key, message: error.message } });
    return paused ? 'blocked' : 'not_runnable';
  }
  const retryable = !isBackfillError(error) || error.retryable;
  if (!retryable || finalAttempt) {
    await failClaimedStep(ctx.pool, ref, token, error);
  } else {
    await releaseForRetry(ctx.pool, ref, token, error);
  }
  throw error;
}
