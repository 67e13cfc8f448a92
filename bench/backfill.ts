// One whole backfill through the queue, as an operator runs it: `start` (the preview, the targets and the
// announced envelope), the gate overridden (and the capacity approved by a second operator when the range is
// over CAPACITY_LIMIT), the workers kicked as the app kicks them after an approval, then nothing but the
// worker processes until it is done. Timed from the approval to the `finished` event (clock_timestamp() of the
// timeline), and split by the timeline into the phases that take the time.

import type { Queue } from 'bullmq';
import type { EngineContext } from '../src/core/context.js';
import { approveCapacity, overrideGate } from '../src/core/announce/gate.js';
import { rollbackBackfill, stopBackfill } from '../src/core/recovery/recovery.js';
import { startBackfill } from '../src/core/announce/start.js';
import { ACTIVE_STATES, type BackfillState } from '../src/core/states.js';
import { formatHour } from '../src/core/time.js';
import type { Pool } from '../src/db/pool.js';
import { DEMO_PIPELINE } from '../dev/demo/constants.js';
import { dispatch, removeQueuedJobs } from '../src/queue/stepQueue.js';
import { median, sum } from './stats.js';
import { WORKER_APPLICATION } from './workerProcesses.js';

const ACTOR = 'U07BENCH';
/** A second operator: over CAPACITY_LIMIT partitions a backfill needs one, and an override does not stand in. */
const SECOND_ACTOR = 'U07BENCH2';
const POLL_MS = 50;

export interface Phases {
  /** approval → the first stage step started (announcements delivered, approved → running, dispatch). */
  toFirstStageMs: number;
  /** first stage started → last partition staged. */
  stageWallMs: number;
  /** Each partition's stage step, step_started → staged, summed, and its median. */
  stageBusyMs: number;
  stageMedianMs: number;
  /** first publish started → last partition published (the canary, then the waves). */
  publishWallMs: number;
  publishBusyMs: number;
  publishMedianMs: number;
  /** Publish by swap: the median and the longest catalog window (DETACH … ATTACH) in which readers waited. */
  swapMedianMs: number | null;
  swapMaxMs: number | null;
  /** last partition published → finished: watermark, consumer replays, compare. */
  tailMs: number;
}

export interface BackfillRun {
  id: number;
  /** false: it was still running when the time allowed ran out, and was stopped (seconds is then that limit). */
  finished: boolean;
  published: number;
  /** startBackfill alone: the preview (plan), the targets and the expected rows, in seconds. */
  startSeconds: number;
  previewedBy: string;
  /** approval → finished, from the timeline (or the time allowed, when it did not finish). */
  seconds: number;
  /** approval → the bench saw it done with no step pending (polled every POLL_MS). */
  settledSeconds: number;
  rowsAfter: number;
  diff: string | null;
  /** From the timeline, for a backfill that finished. */
  phases: Phases | null;
}

/**
 * Runs one backfill; one still running after `timeoutSeconds` is stopped as an operator would stop it (fenced,
 * its queued jobs removed) and the statements its workers are running are terminated, so the next measurement
 * does not share the machine with them.
 */
export async function runBackfill(ctx: EngineContext, queue: Queue, hours: Date[], timeoutSeconds: number): Promise<BackfillRun> {
  const first = hours[0];
  const last = hours.at(-1);
  if (!first || !last) throw new Error('no hours to backfill');
  const target = `${first.toISOString().slice(0, 16)}..${last.toISOString().slice(0, 16)}`;
  const limitOverride = ctx.config.MAX_PARTITIONS < hours.length ? `bench: fixed ${hours.length}-hour range` : undefined;

  const startStarted = performance.now();
  const { backfill } = await startBackfill(ctx, { pipeline: DEMO_PIPELINE, target, reason: 'bench', actor: ACTOR, limitOverride });
  const startSeconds = (performance.now() - startStarted) / 1000;
  if (backfill.state !== 'announced') throw new Error(`backfill #${backfill.id} started ${backfill.state}, expected announced (waiting for owners)`);
  if (backfill.needsSecondApproval) await approveCapacity(ctx, { backfillId: backfill.id, actor: SECOND_ACTOR });
  const gate = await overrideGate(ctx, { backfillId: backfill.id, actor: ACTOR, reason: 'bench: throughput measurement on a throwaway database' });
  if (!gate.approved) throw new Error(`overriding the gate of backfill #${backfill.id} did not approve it (state ${gate.backfill.state})`);
  const approved = performance.now();
  await dispatch(ctx, queue, backfill.id);
  const state = await waitUntilSettled(ctx.pool, backfill.id, approved + timeoutSeconds * 1000);
  const settledSeconds = (performance.now() - approved) / 1000;
  if (!state) {
    await stopBackfill(ctx, { backfillId: backfill.id, actor: ACTOR, reason: `bench: not done ${timeoutSeconds.toFixed(0)} s after its approval` });
    await removeQueuedJobs(queue, backfill.id);
    await cancelWorkerStatements(ctx.pool);
    const { rows } = await ctx.pool.query<{ published: number }>(
      `SELECT count(*) FILTER (WHERE status = 'published')::int AS published FROM backfill.backfill_targets WHERE backfill_id = $1::bigint`, [backfill.id]);
    return {
      id: backfill.id, finished: false, published: rows[0]?.published ?? 0, startSeconds, previewedBy: backfill.previewedBy,
      seconds: timeoutSeconds, settledSeconds, rowsAfter: 0, diff: null, phases: null,
    };
  }
  if (state.state !== 'done') throw new Error(`backfill #${backfill.id} ended ${state.state}: ${state.failure ?? state.pausedReason ?? 'no failure recorded'}`);
  const timeline = await timelineOf(ctx.pool, backfill.id);
  return {
    id: backfill.id, finished: true, published: hours.length, startSeconds, previewedBy: backfill.previewedBy,
    seconds: (timeline.finished - timeline.approved) / 1000, settledSeconds,
    rowsAfter: state.rowsAfter, diff: state.diff, phases: timeline.phases,
  };
}

interface Settled {
  state: BackfillState;
  failure: string | null;
  pausedReason: string | null;
  rowsAfter: number;
  diff: string | null;
}

/**
 * A stopped backfill with partitions published holds its hours; rolled back (through the workers, which run
 * its rollback replays) it lets the next one run. Returns the seconds that took.
 */
export async function rollBackStopped(ctx: EngineContext, queue: Queue, run: BackfillRun, timeoutSeconds: number): Promise<number> {
  const started = performance.now();
  if (run.published === 0) return 0;
  await rollbackBackfill(ctx, { backfillId: run.id, actor: ACTOR, reason: 'bench: the backfill did not finish in the time allowed' });
  await dispatch(ctx, queue, run.id);
  const state = await waitUntilSettled(ctx.pool, run.id, started + timeoutSeconds * 1000);
  if (state?.state !== 'rolled_back') throw new Error(`rolling back backfill #${run.id} ended ${state?.state ?? `unfinished after ${timeoutSeconds} s`}`);
  return (performance.now() - started) / 1000;
}

/**
 * Cancels what the worker processes' connections are running (their step then fails, and finds itself fenced
 * by the stop), until none of them runs anything: a running statement outlives its client otherwise.
 */
async function cancelWorkerStatements(pool: Pool): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt += 1) {
    const { rows } = await pool.query<{ cancelled: number }>(
      `SELECT count(pg_cancel_backend(pid))::int AS cancelled FROM pg_stat_activity
       WHERE datname = current_database() AND application_name = $1::text AND state = 'active'`, [WORKER_APPLICATION]);
    if ((rows[0]?.cancelled ?? 0) === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** Done (or failed, stopped, paused with nothing running) and no step left pending or running; undefined at the deadline. */
async function waitUntilSettled(pool: Pool, backfillId: number, deadline: number): Promise<Settled | undefined> {
  while (performance.now() < deadline) {
    const { rows } = await pool.query<Settled & { open: number; running: number }>(
      `SELECT b.state, b.failure, b.paused_reason AS "pausedReason", b.diff::text AS diff,
              (SELECT coalesce(sum(rows_after), 0) FROM backfill.backfill_targets t WHERE t.backfill_id = b.id)::bigint AS "rowsAfter",
              (SELECT count(*) FROM backfill.backfill_steps s WHERE s.backfill_id = b.id AND s.status IN ('pending', 'running'))::int AS open,
              (SELECT count(*) FROM backfill.backfill_steps s WHERE s.backfill_id = b.id AND s.status = 'running')::int AS running
       FROM backfill.backfills b WHERE b.id = $1::bigint`, [backfillId]);
    const row = rows[0];
    if (!row) throw new Error(`backfill #${backfillId} is gone`);
    if (!ACTIVE_STATES.includes(row.state) && row.open === 0) return row;
    if ((row.state === 'paused' && row.running === 0) || row.state === 'failed') return row;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  return undefined;
}

interface TimelineEvent {
  kind: string;
  at: Date;
  step: string | null;
  key: string | null;
  partition: string | null;
  swapMs: number | null;
  /** A companion's step_started: the step it ran with. */
  with: string | null;
}

async function timelineOf(pool: Pool, backfillId: number): Promise<{ approved: number; finished: number; phases: Phases }> {
  const { rows } = await pool.query<TimelineEvent>(
    `SELECT kind, at, detail->>'step' AS step, detail->>'key' AS key, detail->>'partition' AS partition, (detail->>'swapMs')::float8 AS "swapMs", detail->>'with' AS with
     FROM backfill.events WHERE backfill_id = $1::bigint AND kind IN ('approved', 'step_started', 'staged', 'recomputed', 'finished')
     ORDER BY id`, [backfillId]);
  const first = (kind: string) => {
    const event = rows.find((row) => row.kind === kind);
    if (!event) throw new Error(`backfill #${backfillId} has no ${kind} event`);
    return event.at.getTime();
  };
  const approved = first('approved');
  const finished = first('finished');
  const stage = stepSpans(rows, 'stage', 'staged');
  const publish = stepSpans(rows, 'publish', 'recomputed');
  return {
    approved, finished,
    phases: {
      toFirstStageMs: stage.firstStart - approved,
      stageWallMs: stage.lastEnd - stage.firstStart,
      stageBusyMs: sum(stage.spans),
      stageMedianMs: median(stage.spans),
      publishWallMs: publish.lastEnd - publish.firstStart,
      publishBusyMs: sum(publish.spans),
      publishMedianMs: median(publish.spans),
      ...swapWindows(rows),
      tailMs: finished - publish.lastEnd,
    },
  };
}

function swapWindows(rows: TimelineEvent[]): { swapMedianMs: number | null; swapMaxMs: number | null } {
  const windows = rows.flatMap((row) => (row.kind === 'recomputed' && row.swapMs !== null ? [row.swapMs] : []));
  return windows.length === 0 ? { swapMedianMs: null, swapMaxMs: null } : { swapMedianMs: median(windows), swapMaxMs: Math.max(...windows) };
}

/**
 * Per partition: the last start of its step (a retried step starts again) to the event its step records just
 * before it commits ('staged', 'recomputed'), in ms.
 */
function stepSpans(rows: TimelineEvent[], step: string, doneKind: string): { spans: number[]; firstStart: number; lastEnd: number } {
  const started = new Map<string, number>();
  // A small hour staged with others (a companion: its step_started names the stage it ran `with`) began when the
  // hour before it in that transaction was done: its span is its own, not the wait for the hours before it.
  const ranWith = new Map<string, string>();
  for (const row of rows) {
    if (row.kind !== 'step_started' || row.step !== step || !row.key) continue;
    const hour = formatHour(new Date(row.key));
    started.set(hour, row.at.getTime());
    if (row.with) ranWith.set(hour, formatHour(new Date(row.with)));
    else ranWith.delete(hour);
  }
  const spans: number[] = [];
  const lastOfRun = new Map<string, number>();
  let lastEnd = 0;
  for (const row of rows) {
    if (row.kind !== doneKind || !row.partition) continue;
    const lead = ranWith.get(row.partition) ?? row.partition;
    const start = lastOfRun.get(lead) ?? started.get(row.partition);
    if (start === undefined) throw new Error(`${doneKind} ${row.partition} has no ${step} step start`);
    spans.push(row.at.getTime() - start);
    lastOfRun.set(lead, row.at.getTime());
    lastEnd = Math.max(lastEnd, row.at.getTime());
  }
  if (spans.length === 0) throw new Error(`no ${doneKind} events`);
  return { spans, firstStart: Math.min(...started.values()), lastEnd };
}
