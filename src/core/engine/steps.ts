import { listBackfillSignoffs, markPublishedAny, recordBackfillTotals, requireBackfill } from '../../db/backfills.js';
import { findBackfillConsumer, markConsumerUndeliverable, recordAnnounceRateLimited, recordAnnouncementLanded, type StoredAnnouncement } from '../../db/backfillConsumers.js';
import { findReportTotalSql, findRetrigger } from '../../db/consumers.js';
import { recordEvent } from '../../db/events.js';
import { requirePipeline } from '../../db/pipelines.js';
import { withTransaction, type PoolClient } from '../../db/pool.js';
import { lockStepClaim } from '../../db/steps.js';
import { recordReportAfter } from '../../db/signatures.js';
import { listTargetHours } from '../../db/targets.js';
import { lockWatermark, upsertWatermark } from '../../db/watermarks.js';
import { BackfillError, ErrorCode, isBackfillError } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { intentKey, type DeliveryOptions, type Messenger } from '../messenger.js';
import { storedAnnouncement, type Notice } from '../notices.js';
import { subtractMoney } from '../money.js';
import { totalOverDays } from '../../db/partitions.js';
import { readReportFigure } from '../../db/pipelineSql.js';
import { parseRetrigger, runRemoteRetrigger, runSqlRetrigger, type ReplayJobs } from '../retrigger/retrigger.js';
import { claimStep, failClaimedStep, finishStep, keepClaim, releaseClaim, runClaimed, type ClaimOutcome } from './stepClaims.js';
import { consumerOf, phaseOf, type StepRef } from './stepGraph.js';
import { pauseForBreach, publishPartition, stagePartition, type PublishHooks } from '../recompute/stagePublish.js';
import { checkRetrigger, pauseIfCatalogChanged } from './catalogGuard.js';
import { transition } from './stateMachine.js';
import { emitRunEvents } from '../lineage/emit.js';
import { distinctDays, formatHour } from '../time.js';
import { logger } from '../../log.js';

export type { Messenger, OwnerMessage } from '../messenger.js';
export { STEP_KINDS, type StepKind, type StepRef } from './stepGraph.js';

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

const ENGINE = 'backfill-bot';

/** A step's body: runs under a claim, commits its effect with finishStep(…, token) in one transaction. */
type StepBody = (ctx: StepContext, ref: StepRef, token: string) => Promise<StepOutcome>;

const BODIES: Record<StepRef['kind'], StepBody> = {
  announce, stage, publish, watermark: moveWatermark, replay, compare, notify, report,
};

/**
 * Runs one step at least once, with effect exactly once: claimed by compare-and-set, its lease renewed while it
 * runs, and its effect committed in the transaction that checks the backfill's state and the claim (the fence) and marks it done.
 * A failed attempt gives the claim back (pending, for a retry) or, on the last attempt, fails the step and the
 * backfill; the error is rethrown for the queue.
 */
export async function executeStep(ctx: StepContext, ref: StepRef, options: { finalAttempt?: boolean } = {}): Promise<StepOutcome> {
  const claim = await claimStep(ctx.pool, ref, ctx.config.STEP_LEASE_MS);
  if (claim.outcome !== 'claimed') return claim.outcome;
  // Every line the step writes says which backfill, step and run (generation) it is about.
  const log = (ctx.log ?? logger()).child({ backfillId: ref.backfillId, step: ref.kind, key: ref.key, generation: claim.generation });
  const stepCtx: StepContext = { ...ctx, log };
  const started = performance.now();
  const stopRenewing = keepClaim(ctx.pool, ref, claim.token, ctx.config.STEP_LEASE_MS);
  let outcome: StepOutcome | 'error' = 'error';
  let failure: unknown;
  try {
    // Its transactions carry the claim's name: a takeover ends the session of one this run left open (frozen).
    outcome = await runClaimed(ref, claim.token, () => BODIES[ref.kind](stepCtx, ref, claim.token));
    return outcome;
  } catch (error) {
    failure = error;
    outcome = await settleFailure(stepCtx, ref, claim.token, error, options.finalAttempt ?? true);
    return outcome;
  } finally {
    stopRenewing();
    reportStep(stepCtx, ref, outcome, (performance.now() - started) / 1000, failure);
    // After the step's commit: the OpenLineage run event its move made due (START, COMPLETE, FAIL). Never throws.
    await emitRunEvents(ctx, ref.backfillId);
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
  } else if (await releaseClaim(ctx.pool, ref, token, 'pending', error)) {
    await recordEvent(ctx.pool, { backfillId: ref.backfillId, actor: ENGINE, kind: 'step_retried', detail: { step: ref.kind, key: ref.key, error: (error as Error).message } });
  }
  throw error;
}

async function stage(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const paused = await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    // What it stages is what was announced: a catalog changed since pauses the backfill instead (catalogGuard.ts).
    const pause = await pauseIfCatalogChanged(tx, ref, token, backfill);
    if (pause > 0) return pause;
    const outcome = await stagePartition(tx, backfill, new Date(ref.key));
    await finishStep(tx, ref, token, { outcome });
    return 0;
  });
  if (paused === 0) return 'done';
  await tellIncident(ctx, ref, () => ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'paused', String(paused))));
  return 'blocked';
}

/**
 * Publishes one partition. A partition outside its announced envelope (and not accepted by name) pauses the
 * backfill instead, in one transaction with the breach and the blocking of every step the pause catches
 * running; the reconciliation then goes to the incident thread. So does a catalog changed since the backfill
 * was announced, before anything is written (catalogGuard.ts).
 */
async function publish(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const outcome = await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const catalogPause = await pauseIfCatalogChanged(tx, ref, token, backfill);
    if (catalogPause > 0) return { paused: catalogPause, rows: 0, pipeline: backfill.pipeline };
    const result = await publishPartition(tx, backfill, new Date(ref.key), ctx.hooks);
    if (result.kind === 'breach') return { paused: await pauseForBreach(tx, ref, token, result.reason), rows: 0, pipeline: backfill.pipeline };
    // A publish by swap's result keeps what it cost beside its outcome: the catalog changes, and the real lock wait before them.
    await finishStep(tx, ref, token, { outcome: result.kind, generation: result.generation ?? null, ...(result.kind === 'published' ? result.swap : {}) });
    // From its first publish on, the backfill holds its hours until it finishes or is rolled back.
    if (result.kind === 'published') await markPublishedAny(tx, ref.backfillId);
    return { paused: 0, rows: result.kind === 'published' ? result.rows : 0, pipeline: backfill.pipeline };
  });
  if (outcome.paused === 0) {
    // Counted once committed: a publish the fence rolled back never went live.
    ctx.metrics?.rowsPublished(outcome.pipeline, outcome.rows);
    return 'done';
  }
  await tellIncident(ctx, ref, () => ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'paused', String(outcome.paused))));
  return 'blocked';
}

async function moveWatermark(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const from = (await lockWatermark(tx, backfill.pipeline)) ?? null;
    // Back to the hour before the first bad partition, never further back, and never forward.
    const to = from && from < backfill.watermarkResetTo ? from : backfill.watermarkResetTo;
    await upsertWatermark(tx, backfill.pipeline, to, `backfill #${backfill.id}`);
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'watermark_moved', detail: { from: from ? formatHour(from) : null, to: formatHour(to) } });
    await finishStep(tx, ref, token, { from, to });
  });
  return 'done';
}

async function replay(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const consumer = consumerOf(ref);
  const rollback = phaseOf(ref) === 'rollback';
  const definition = await findRetrigger(ctx.pool, consumer);
  // What it calls is what its owner was told of: a re-trigger changed since pauses the backfill instead (catalogGuard.ts).
  const verdict = await checkRetrigger(ctx.pool, ref, token, definition);
  if (verdict.paused > 0) {
    await tellIncident(ctx, ref, () => ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'paused', String(verdict.paused))));
    return 'blocked';
  }
  const noted = verdict.changed ? { catalogChanged: verdict.changed } : {};
  const retrigger = parseRetrigger(consumer, definition);
  const hours = await targetHours(ctx, ref.backfillId);
  if (retrigger.kind === 'sql') {
    await withTransaction(ctx.pool, async (tx) => {
      const result = await runSqlRetrigger(tx, retrigger, hours);
      await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'replayed', detail: { consumer, via: 'sql', rollback, ...result, ...noted } });
      await finishStep(tx, ref, token, { via: 'sql', ...result });
    });
    return 'done';
  }
  // Webhook, BullMQ job or REST call: outside any transaction (it may wait for the consumer's run to end),
  // under the replay's own key, so a retry after a lost commit is recognised by the receiver.
  const result = await runRemoteRetrigger(retrigger, { backfillId: ref.backfillId, consumer, partitions: hours, rollback }, { config: ctx.config, replayJobs: ctx.replayJobs });
  await withTransaction(ctx.pool, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'replayed', detail: { consumer, ...result, rollback, ...noted } });
    await finishStep(tx, ref, token, result);
  });
  return 'done';
}

/**
 * The signed figure against what the rebuilt report now shows, for exactly the same period, and the table's
 * own total over the same partitions; completes the log row.
 */
async function compare(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  await withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const pipeline = await requirePipeline(tx, backfill.pipeline);
    const hours = await targetHours(ctx, ref.backfillId);
    const totalAfter = await totalOverDays(tx, pipeline, distinctDays(hours));
    const diff = subtractMoney(totalAfter, backfill.totalBefore);
    const figures = await compareSignedFigures(tx, backfill.id);
    await recordBackfillTotals(tx, backfill.id, totalAfter, diff);
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'compared', detail: { totalBefore: backfill.totalBefore, totalAfter, diff, figures } });
    await finishStep(tx, ref, token, { totalAfter, diff, figures });
    await transition(tx, { backfillId: backfill.id, to: 'done', actor: ENGINE });
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'finished', detail: { totalBefore: backfill.totalBefore, totalAfter, diff } });
  });
  return 'done';
}

async function compareSignedFigures(tx: PoolClient, backfillId: number): Promise<Record<string, unknown>[]> {
  const figures = [];
  for (const signed of await listBackfillSignoffs(tx, backfillId)) {
    const reportAfter = await reportTotal(tx, signed.report, signed.period);
    const figureDiff = reportAfter === null ? null : subtractMoney(reportAfter, signed.signedTotal);
    await recordReportAfter(tx, backfillId, signed, reportAfter, figureDiff);
    figures.push({ report: signed.report, period: signed.period, signed: signed.signedTotal, after: reportAfter, diff: figureDiff });
  }
  return figures;
}

/** Sends one owner the announcement generated when the backfill was created; the gate waits for it. */
async function announce(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const row = await backfillConsumer(ctx, ref);
  const { owner } = row;
  const landed = await deliver(ctx, ref, token, () =>
    ctx.messenger.announce({ backfillId: ref.backfillId, consumer: ref.key, owner, notice: storedAnnouncement(row), intent: intentKey(ref.backfillId, 'announce', ref.key) },
      waitOutRateLimits(ctx, ref, token)));
  if (landed === 'undeliverable') return 'undeliverable';
  await withTransaction(ctx.pool, async (tx) => {
    await recordAnnouncementLanded(tx, ref.backfillId, ref.key, { channel: landed?.channel ?? null, ts: landed?.ts ?? null });
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'announcement_sent', detail: { consumer: ref.key, owner } });
    await finishStep(tx, ref, token, { owner, channel: landed?.channel ?? null, ts: landed?.ts ?? null });
  });
  return 'done';
}

/** Posts the diff (or, after a rollback, what was restored) and the reconciliation where it was asked for. */
async function report(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const sent = await deliver(ctx, ref, token, async () => {
    await ctx.messenger.reportDiff(ref.backfillId, intentKey(ref.backfillId, 'report', ref.key), waitOutRateLimits(ctx, ref, token));
    await ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'report', ref.key, 'reconciliation'), waitOutRateLimits(ctx, ref, token));
  });
  if (sent === 'undeliverable') return 'undeliverable';
  await withTransaction(ctx.pool, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'diff_posted', detail: {} });
    await finishStep(tx, ref, token, {});
  });
  return 'done';
}

async function notify(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const backfill = await requireBackfill(ctx.pool, ref.backfillId);
  const { owner } = await backfillConsumer(ctx, ref);
  const consumer = consumerOf(ref);
  const rollback = phaseOf(ref) === 'rollback';
  const about = { backfillId: backfill.id, pipeline: backfill.pipeline, consumer, totalBefore: backfill.totalBefore };
  const notice: Notice = rollback
    ? { kind: 'rolled_back', ...about, rolledBackBy: backfill.rolledBackBy }
    : { kind: 'after_run', ...about, reason: backfill.reason, totalAfter: backfill.totalAfter, diff: backfill.diff };
  const sent = await deliver(ctx, ref, token, () =>
    ctx.messenger.notifyOwner({ backfillId: backfill.id, consumer, owner, notice, intent: intentKey(backfill.id, 'notify', ref.key) }, waitOutRateLimits(ctx, ref, token)));
  if (sent === 'undeliverable') return 'undeliverable';
  await withTransaction(ctx.pool, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'notified', detail: { consumer, owner, after: true, rollback } });
    await finishStep(tx, ref, token, { owner });
  });
  return 'done';
}

/**
 * Delivers a step's message. When Slack answers that it will never take it (user_not_found, account_inactive,
 * …), that is a fact, not a retry: the step ends undeliverable with Slack's reason, an announcement's consumer
 * is marked so (the gate still waits for it until an operator overrides), and the incident channel is told
 * what to do. Any other error goes on to the retry.
 */
async function deliver<T>(ctx: StepContext, ref: StepRef, token: string, send: () => Promise<T>): Promise<T | 'undeliverable'> {
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
function waitOutRateLimits(ctx: StepContext, ref: StepRef, token: string): DeliveryOptions {
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
async function tellIncident(ctx: StepContext, ref: StepRef, send: () => Promise<void>): Promise<void> {
  try {
    await send();
  } catch (error) {
    if (!isBackfillError(error, ErrorCode.Undeliverable)) throw error;
    await recordEvent(ctx.pool, { backfillId: ref.backfillId, actor: ENGINE, kind: 'undeliverable', detail: { step: ref.kind, key: ref.key, to: 'incident channel', message: error.message } });
  }
}

async function backfillConsumer(ctx: StepContext, ref: StepRef): Promise<{ owner: string } & StoredAnnouncement> {
  const row = await findBackfillConsumer(ctx.pool, ref.backfillId, consumerOf(ref));
  if (!row) throw new BackfillError(ErrorCode.UnknownConsumer, `consumer ${ref.key} is not part of backfill #${ref.backfillId}`);
  return row;
}

async function targetHours(ctx: EngineContext, backfillId: number): Promise<Date[]> {
  return listTargetHours(ctx.pool, backfillId);
}

async function reportTotal(tx: PoolClient, report: string, period: string): Promise<string | null> {
  const sql = await findReportTotalSql(tx, report);
  if (!sql) return null;
  return readReportFigure(tx, sql, period);
}
