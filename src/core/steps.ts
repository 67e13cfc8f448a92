import { requireBackfill, listBackfillSignoffs, type BackfillRow } from '../db/backfills.js';
import { recordEvent } from '../db/events.js';
import { requirePipeline } from '../db/pipelines.js';
import { withTransaction, type PoolClient } from '../db/pool.js';
import { BackfillError, describeError, ErrorCode, isBackfillError } from '../errors.js';
import type { EngineContext } from './context.js';
import { formatMoney, formatSignedMoney, subtractMoney } from './money.js';
import { totalOverDays } from './partitionStep.js';
import { readReportFigure } from './readers.js';
import { callWebhook, parseRetrigger, runSqlRetrigger } from './retrigger.js';
import { pauseBackfill, publishPartition, stagePartition, type PublishHooks } from './stagePublish.js';
import { transition, type BackfillState } from './stateMachine.js';
import { distinctDays, formatHour } from './time.js';

export const STEP_KINDS = ['announce', 'stage', 'publish', 'watermark', 'replay', 'compare', 'notify', 'report'] as const;
export type StepKind = (typeof STEP_KINDS)[number];

export interface StepRef {
  backfillId: number;
  kind: StepKind;
  key: string;
}

export interface OwnerMessage {
  backfillId: number;
  consumer: string;
  owner: string;
  text: string;
}

/**
 * Where messages go. The Slack bot sends DMs with buttons and posts in the incident channel; the CLI prints.
 * The core decides what is said and when; a messenger only delivers.
 */
export interface Messenger {
  /** The announcement to an owner who must acknowledge; returns where it landed, so it can be updated. */
  announce(message: OwnerMessage): Promise<{ channel: string; ts: string } | undefined>;
  /** An owner whose rule is "after": told once the run is done. */
  notifyOwner(message: OwnerMessage): Promise<void>;
  /** The diff of a finished backfill, to wherever it was asked for. */
  reportDiff(backfillId: number): Promise<void>;
  /** The reconciliation by key (staged, published), to the incident thread: when paused, and at the end. */
  reportReconciliation(backfillId: number): Promise<void>;
  /** An owner has not acknowledged after the configured delay: say it again, and say so where it was asked. */
  remind(message: OwnerMessage): Promise<void>;
  /** A plain message to one person (a stale reader told the numbers are now real). */
  directMessage(user: string, text: string): Promise<void>;
  /** Something about the backfill changed: refresh whatever shows its status. Must not throw. */
  changed(backfillId: number): Promise<void>;
}

export interface StepContext extends EngineContext {
  messenger: Messenger;
  /** Test seams around a publish's commit (a stop arriving, a late writer); never set in production. */
  hooks?: PublishHooks;
}

export type StepOutcome = 'done' | 'already_done' | 'not_runnable';

const ENGINE = 'backfill-bot';

/** The states a backfill must be in for each kind of step to run (and to commit). */
const RUNS_IN: Record<StepKind, readonly BackfillState[]> = {
  announce: ['announced', 'held', 'approved'],
  stage: ['running'],
  publish: ['running'],
  watermark: ['running'],
  replay: ['replaying', 'rolling_back'],
  compare: ['comparing'],
  notify: ['done', 'rolling_back'],
  report: ['done', 'rolled_back'],
};

/**
 * Runs one step at least once, with effect exactly once: the step row is re-read first (a duplicate delivery
 * of a done step returns), and the effect commits in the same transaction that marks the step done. Only the
 * webhook and notify effects leave the database; those are keyed so a receiver can drop a repeat.
 */
export async function executeStep(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  const claimed = await claimStep(ctx, ref);
  if (claimed !== 'claimed') return claimed;
  switch (ref.kind) {
    case 'announce': return announce(ctx, ref);
    case 'stage': return stage(ctx, ref);
    case 'publish': return publish(ctx, ref);
    case 'watermark': return moveWatermark(ctx, ref);
    case 'replay': return replay(ctx, ref);
    case 'compare': return compare(ctx, ref);
    case 'notify': return notify(ctx, ref);
    case 'report': return report(ctx, ref);
    default: {
      const unreachable: never = ref.kind;
      throw new Error(`unknown step kind ${String(unreachable)}`);
    }
  }
}

async function claimStep(ctx: StepContext, ref: StepRef): Promise<StepOutcome | 'claimed'> {
  return withTransaction(ctx.pool, async (tx) => {
    const { rows } = await tx.query<{ status: string; attempts: number; state: BackfillState }>(
      `SELECT s.status, s.attempts, b.state FROM backfill.backfill_steps s JOIN backfill.backfills b ON b.id = s.backfill_id
       WHERE s.backfill_id = $1::bigint AND s.kind = $2::text AND s.step_key = $3::text FOR UPDATE OF s`,
      [ref.backfillId, ref.kind, ref.key]);
    const step = rows[0];
    if (!step) throw new BackfillError(ErrorCode.StepFailed, `no step ${ref.kind} ${ref.key} in backfill #${ref.backfillId}`);
    if (step.status === 'done' || step.status === 'skipped') return 'already_done';
    if (!RUNS_IN[ref.kind].includes(step.state)) return 'not_runnable';
    await tx.query(
      `UPDATE backfill.backfill_steps SET status = 'running', attempts = attempts + 1, started_at = coalesce(started_at, now())
       WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text`, [ref.backfillId, ref.kind, ref.key]);
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'step_started', detail: { step: ref.kind, key: ref.key, attempt: step.attempts + 1 } });
    return 'claimed';
  });
}

/**
 * Finishes a step inside the caller's transaction: takes the backfill row lock (so two last steps finishing
 * at once cannot both miss that they were last), checks the backfill is still where the step belongs (a
 * cancelled or failed backfill publishes nothing: the whole transaction rolls back), marks the step done
 * and advances the state when a phase is complete.
 */
async function finishStep(tx: PoolClient, ref: StepRef, result: Record<string, unknown>): Promise<BackfillRow> {
  const backfill = await requireBackfill(tx, ref.backfillId, { forUpdate: true });
  if (!RUNS_IN[ref.kind].includes(backfill.state)) {
    throw new BackfillError(ErrorCode.WrongState, `backfill #${ref.backfillId} is ${backfill.state}; ${ref.kind} ${ref.key} does not commit`);
  }
  await tx.query(
    `UPDATE backfill.backfill_steps SET status = 'done', finished_at = now(), result = $4::jsonb, error = NULL
     WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text`,
    [ref.backfillId, ref.kind, ref.key, JSON.stringify(result)]);
  await advanceBackfill(tx, ref.backfillId);
  return backfill;
}

async function withinStep(ctx: StepContext, work: (tx: PoolClient) => Promise<void>, options: { rethrowWrongState?: boolean } = {}): Promise<StepOutcome> {
  try {
    await withTransaction(ctx.pool, work);
    return 'done';
  } catch (error) {
    if (!options.rethrowWrongState && error instanceof BackfillError && error.code === ErrorCode.WrongState) return 'not_runnable';
    throw error;
  }
}

async function stage(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  return withinStep(ctx, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const outcome = await stagePartition(tx, backfill, new Date(ref.key));
    await finishStep(tx, ref, { outcome });
  });
}

/**
 * Publishes one partition. A breach of the announced envelope pauses the backfill (both generations kept,
 * the step left pending for an operator's continue); a fenced generation's write is refused and recorded.
 */
async function publish(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  let paused: string | undefined;
  try {
    const outcome = await withinStep(ctx, async (tx) => {
      const backfill = await requireBackfill(tx, ref.backfillId);
      const result = await publishPartition(tx, backfill, new Date(ref.key), ctx.hooks);
      if (result.kind === 'paused') {
        paused = result.reason;
        throw new BackfillError(ErrorCode.WrongState, result.reason);
      }
      await finishStep(tx, ref, { outcome: result.kind });
    }, { rethrowWrongState: true });
    return outcome;
  } catch (error) {
    if (paused !== undefined) {
      await pauseBackfill(ctx.pool, ref.backfillId, paused);
      await ctx.messenger.reportReconciliation(ref.backfillId);
      await ctx.pool.query(`UPDATE backfill.backfill_steps SET status = 'pending' WHERE backfill_id = $1::bigint AND kind = 'publish' AND step_key = $2::text`, [ref.backfillId, ref.key]);
      return 'not_runnable';
    }
    if (isBackfillError(error, ErrorCode.WrongState)) {
      if (error.details.fenced) {
        await ctx.pool.query(`UPDATE backfill.backfill_steps SET status = 'skipped', error = $3::text WHERE backfill_id = $1::bigint AND kind = 'publish' AND step_key = $2::text`,
          [ref.backfillId, ref.key, error.message]);
        await recordEvent(ctx.pool, { backfillId: ref.backfillId, actor: ENGINE, kind: 'write_fenced', detail: { step: ref.kind, key: ref.key, message: error.message } });
      }
      return 'not_runnable';
    }
    throw error;
  }
}

async function moveWatermark(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  return withinStep(ctx, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const { rows } = await tx.query<{ processedThrough: Date }>(
      'SELECT processed_through AS "processedThrough" FROM backfill.watermarks WHERE pipeline = $1::text FOR UPDATE', [backfill.pipeline]);
    const from = rows[0]?.processedThrough ?? null;
    // Back to the hour before the first bad partition, never further back, and never forward.
    const to = from && from < backfill.watermarkResetTo ? from : backfill.watermarkResetTo;
    await tx.query(
      `INSERT INTO backfill.watermarks (pipeline, processed_through, updated_at, updated_by) VALUES ($1::text, $2::timestamptz, now(), $3::text)
       ON CONFLICT (pipeline) DO UPDATE SET processed_through = EXCLUDED.processed_through, updated_at = now(), updated_by = EXCLUDED.updated_by`,
      [backfill.pipeline, to, `backfill #${backfill.id}`]);
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'watermark_moved', detail: { from: from ? formatHour(from) : null, to: formatHour(to) } });
    await finishStep(tx, ref, { from, to });
  });
}

/** A replay or notify key is the consumer, with "@rollback" when it is part of undoing the backfill. */
function consumerOf(ref: StepRef): string {
  return ref.key.split('@')[0] ?? ref.key;
}

async function replay(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  const backfill = await requireBackfill(ctx.pool, ref.backfillId);
  const consumer = consumerOf(ref);
  const { rows } = await ctx.pool.query<{ retrigger: unknown }>('SELECT retrigger FROM backfill.consumers WHERE name = $1::text', [consumer]);
  const retrigger = parseRetrigger(consumer, rows[0]?.retrigger);
  const hours = await targetHours(ctx, ref.backfillId);
  if (retrigger.kind === 'sql') {
    return withinStep(ctx, async (tx) => {
      const result = await runSqlRetrigger(tx, retrigger, hours);
      await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'replayed', detail: { consumer, via: 'sql', rollback: ref.key !== consumer, ...result } });
      await finishStep(tx, ref, { via: 'sql', ...result });
    });
  }
  const result = await callWebhook(retrigger, {
    backfillId: backfill.id, consumer, partitions: hours,
    secret: ctx.config.WEBHOOK_SIGNING_SECRET, timeoutMs: ctx.config.WEBHOOK_TIMEOUT_MS,
  });
  return withinStep(ctx, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'replayed', detail: { consumer, via: 'webhook', url: retrigger.url, status: result.status, rollback: ref.key !== consumer } });
    await finishStep(tx, ref, { via: 'webhook', status: result.status });
  });
}

/**
 * The signed figure against what the rebuilt report now shows, for exactly the same period, and the table's
 * own total over the same partitions; completes the log row.
 */
async function compare(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  return withinStep(ctx, async (tx) => {
    const backfill = await requireBackfill(tx, ref.backfillId);
    const pipeline = await requirePipeline(tx, backfill.pipeline);
    const hours = await targetHours(ctx, ref.backfillId);
    const totalAfter = await totalOverDays(tx, pipeline, distinctDays(hours));
    const diff = subtractMoney(totalAfter, backfill.totalBefore);
    const figures = [];
    for (const signed of await listBackfillSignoffs(tx, backfill.id)) {
      const reportAfter = await reportTotal(tx, signed.report, signed.period);
      const figureDiff = reportAfter === null ? null : subtractMoney(reportAfter, signed.signedTotal);
      await tx.query(
        `UPDATE backfill.backfill_signoffs SET report_after = $4::numeric, diff = $5::numeric
         WHERE backfill_id = $1::bigint AND report = $2::text AND period = $3::date`,
        [backfill.id, signed.report, signed.period, reportAfter, figureDiff]);
      figures.push({ report: signed.report, period: signed.period, signed: signed.signedTotal, after: reportAfter, diff: figureDiff });
    }
    await tx.query(
      `UPDATE backfill.backfills SET total_after = $2::numeric, diff = $3::numeric, finished_at = now() WHERE id = $1::bigint`,
      [backfill.id, totalAfter, diff]);
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'compared', detail: { totalBefore: backfill.totalBefore, totalAfter, diff, figures } });
    await finishStep(tx, ref, { totalAfter, diff, figures });
    await transition(tx, { backfillId: backfill.id, to: 'done', actor: ENGINE });
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'finished', detail: { totalBefore: backfill.totalBefore, totalAfter, diff } });
  });
}

/** Sends one owner the announcement generated when the backfill was created; the gate waits for it. */
async function announce(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  const { owner, announcement } = await backfillConsumer(ctx, ref);
  const landed = await ctx.messenger.announce({ backfillId: ref.backfillId, consumer: ref.key, owner, text: announcement });
  return withinStep(ctx, async (tx) => {
    await tx.query(
      `UPDATE backfill.backfill_consumers SET message_channel = $3::text, message_ts = $4::text
       WHERE backfill_id = $1::bigint AND consumer = $2::text`, [ref.backfillId, ref.key, landed?.channel ?? null, landed?.ts ?? null]);
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'announcement_sent', detail: { consumer: ref.key, owner } });
    await finishStep(tx, ref, { owner, channel: landed?.channel ?? null, ts: landed?.ts ?? null });
  });
}

/** Posts the diff (or, after a rollback, what was restored) and the reconciliation where it was asked for. */
async function report(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  await ctx.messenger.reportDiff(ref.backfillId);
  await ctx.messenger.reportReconciliation(ref.backfillId);
  return withinStep(ctx, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'diff_posted', detail: {} });
    await finishStep(tx, ref, {});
  });
}

async function backfillConsumer(ctx: StepContext, ref: StepRef): Promise<{ owner: string; announcement: string }> {
  const { rows } = await ctx.pool.query<{ owner: string; announcement: string }>(
    'SELECT owner, announcement FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint AND consumer = $2::text', [ref.backfillId, consumerOf(ref)]);
  const row = rows[0];
  if (!row) throw new BackfillError(ErrorCode.UnknownConsumer, `consumer ${ref.key} is not part of backfill #${ref.backfillId}`);
  return row;
}

async function notify(ctx: StepContext, ref: StepRef): Promise<StepOutcome> {
  const backfill = await requireBackfill(ctx.pool, ref.backfillId);
  const { owner } = await backfillConsumer(ctx, ref);
  const consumer = consumerOf(ref);
  const text = backfill.state === 'rolling_back'
    ? `Backfill #${backfill.id} of ${backfill.pipeline} was rolled back by <@${backfill.rolledBackBy ?? '?'}>: the prior rows are restored and ${consumer} was re-triggered on them. ` +
      `The figures are back to what they were before the backfill (total ${formatMoney(backfill.totalBefore)}).`
    : `Backfill #${backfill.id} of ${backfill.pipeline} has run (${backfill.reason}): ${consumer} was re-triggered. ` +
      `Total over the affected days ${formatMoney(backfill.totalBefore)} → ${backfill.totalAfter ? formatMoney(backfill.totalAfter) : '—'}` +
      ` (difference ${backfill.diff ? formatSignedMoney(backfill.diff) : '—'}).`;
  await ctx.messenger.notifyOwner({ backfillId: backfill.id, consumer, owner, text });
  return withinStep(ctx, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'notified', detail: { consumer, owner, after: true, rollback: ref.key !== consumer } });
    await finishStep(tx, ref, { owner });
  });
}

/**
 * Records a failed attempt. On the last one the step fails and so does the backfill, saying which step;
 * nothing that depends on it is started, since the dispatcher only enqueues for a live backfill.
 */
export async function failStep(ctx: StepContext, ref: StepRef, error: unknown, final: boolean): Promise<void> {
  await withTransaction(ctx.pool, async (tx) => {
    const message = describeError(error);
    await tx.query(
      `UPDATE backfill.backfill_steps SET status = $4::text, error = $5::text, finished_at = CASE WHEN $4::text = 'failed' THEN now() END
       WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text AND status <> 'done'`,
      [ref.backfillId, ref.kind, ref.key, final ? 'failed' : 'pending', message]);
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: final ? 'step_failed' : 'step_retried', detail: { step: ref.kind, key: ref.key, error: message } });
    if (!final) return;
    const failure = `${ref.kind} ${ref.key} failed: ${message}`;
    const moved = await transition(tx, { backfillId: ref.backfillId, to: 'failed', actor: ENGINE, set: { failure, finished_at: new Date() } });
    if (moved) {
      await tx.query(`UPDATE backfill.backfill_steps SET status = 'skipped' WHERE backfill_id = $1::bigint AND status = 'pending'`, [ref.backfillId]);
      await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'failed', detail: { step: ref.kind, key: ref.key, failure } });
    }
  });
}

/** Moves running → replaying → comparing when a phase's steps are all done. Safe to call any time. */
export async function advanceBackfill(tx: PoolClient, backfillId: number): Promise<void> {
  const { rows } = await tx.query<{ state: BackfillState; openRunning: number; openReplays: number; openRollback: number }>(
    `SELECT b.state,
            count(*) FILTER (WHERE s.kind IN ('stage', 'publish', 'watermark') AND s.status <> 'done')::int AS "openRunning",
            count(*) FILTER (WHERE s.kind = 'replay' AND s.step_key NOT LIKE '%@rollback' AND s.status <> 'done')::int AS "openReplays",
            count(*) FILTER (WHERE s.kind IN ('replay', 'notify') AND s.step_key LIKE '%@rollback' AND s.status <> 'done')::int AS "openRollback"
     FROM backfill.backfills b LEFT JOIN backfill.backfill_steps s ON s.backfill_id = b.id
     WHERE b.id = $1::bigint GROUP BY b.state`, [backfillId]);
  const row = rows[0];
  if (!row) return;
  if (row.state === 'rolling_back' && row.openRollback === 0) {
    await transition(tx, { backfillId, to: 'rolled_back', actor: ENGINE, set: { finished_at: new Date() } });
    return;
  }
  if (row.state === 'running' && row.openRunning === 0) {
    await transition(tx, { backfillId, to: 'replaying', actor: ENGINE });
    row.state = 'replaying';
  }
  if (row.state === 'replaying' && row.openReplays === 0) {
    await transition(tx, { backfillId, to: 'comparing', actor: ENGINE });
  }
}

async function targetHours(ctx: EngineContext, backfillId: number): Promise<Date[]> {
  const { rows } = await ctx.pool.query<{ hour: Date }>(
    'SELECT partition_hour AS hour FROM backfill.backfill_targets WHERE backfill_id = $1::bigint ORDER BY partition_hour', [backfillId]);
  return rows.map((row) => row.hour);
}

async function reportTotal(tx: PoolClient, report: string, period: string): Promise<string | null> {
  const { rows } = await tx.query<{ sql: string | null }>('SELECT report_total_sql AS sql FROM backfill.consumers WHERE name = $1::text', [report]);
  const sql = rows[0]?.sql;
  if (!sql) return null;
  return readReportFigure(tx, sql, period);
}
