import type { BackfillReport } from '../core/file/status.js';
import type { StepRow } from '../db/steps.js';

// How far a backfill's run has come, read from its step rows: partitions staged and published k of n, the
// consumer replays, the compare; one bar over all of them; and, once a few partition steps have finished, an
// estimate of the time left. Pure: the caller passes `now`, so the same report and the same instant always
// read the same (and a test can set the clock).

/** A step that will not run again: done, or settled without work (skipped, or a message Slack refused). */
const FINISHED: ReadonlySet<StepRow['status']> = new Set(['done', 'skipped', 'undeliverable']);
/** States in which steps are doing work; outside them (a pause, a gate, the end) no time-left is shown. */
const WORKING: ReadonlySet<string> = new Set(['running', 'replaying', 'comparing', 'rolling_back']);
/**
 * Partition steps (stage or publish) that must have finished before the time left is estimated: the first
 * one carries the run's start-up (claims, the first connection to the warehouse), so one or two would
 * overstate it.
 */
export const ETA_AFTER_PARTITION_STEPS = 3;
const BAR_CELLS = 20;

interface Tally {
  done: number;
  total: number;
}

export interface BackfillProgress {
  /** False until the run's steps exist (the backfill is still at its gate). */
  started: boolean;
  staged: Tally;
  published: Tally;
  replays: Tally;
  compare: 'pending' | 'done' | 'none';
  /** Finished work over all the run's steps, 0 to 1. */
  fraction: number;
  /** Estimated milliseconds left; undefined until ETA_AFTER_PARTITION_STEPS partition steps are done, or when nothing runs. */
  msLeft: number | undefined;
}

function tally(steps: StepRow[], kind: StepRow['kind']): Tally {
  const ofKind = steps.filter((s) => s.kind === kind);
  return { done: ofKind.filter((s) => FINISHED.has(s.status)).length, total: ofKind.length };
}

/**
 * Time left: the time the finished steps took, from the first partition step's start to now, spread evenly
 * over them, times the steps still to go. A replay or the compare counts as one step like a partition's;
 * the estimate is meant to say "minutes or hours", not to be exact.
 */
function estimateMsLeft(report: BackfillReport, finished: number, remaining: number, partitionStepsDone: number, now: Date): number | undefined {
  if (!WORKING.has(report.backfill.state) || remaining === 0 || partitionStepsDone < ETA_AFTER_PARTITION_STEPS) return undefined;
  const starts = report.steps
    .filter((s) => (s.kind === 'stage' || s.kind === 'publish') && s.startedAt)
    .map((s) => s.startedAt?.getTime() ?? Infinity);
  const elapsed = now.getTime() - Math.min(...starts);
  if (!Number.isFinite(elapsed) || elapsed <= 0) return undefined;
  return Math.round((elapsed / finished) * remaining);
}

export function backfillProgress(report: BackfillReport, now: Date): BackfillProgress {
  const { steps } = report;
  const staged = tally(steps, 'stage');
  const published = tally(steps, 'publish');
  const replays = tally(steps, 'replay');
  const compares = tally(steps, 'compare');
  const total = staged.total + published.total + replays.total + compares.total;
  const finished = staged.done + published.done + replays.done + compares.done;
  return {
    started: published.total > 0,
    staged,
    published,
    replays,
    compare: compares.total === 0 ? 'none' : compares.done === compares.total ? 'done' : 'pending',
    fraction: total === 0 ? 0 : finished / total,
    msLeft: estimateMsLeft(report, finished, total - finished, staged.done + published.done, now),
  };
}

/** `██████░░░░` over `cells` cells: the fraction rounded down, so a bar is full only when all is done. */
export function progressBar(fraction: number, cells = BAR_CELLS): string {
  const filled = Math.min(cells, Math.max(0, Math.floor(fraction * cells)));
  return `${'█'.repeat(filled)}${'░'.repeat(cells - filled)}`;
}

const percent = (fraction: number): string => `${Math.floor(fraction * 100)}%`;

/** 40 s → "under a minute left", 7 min → "about 7 min left", 95 min → "about 1 h 35 min left". */
export function formatTimeLeft(ms: number): string {
  if (ms < 60_000) return 'under a minute left';
  const minutes = Math.round(ms / 60_000);
  if (minutes < 60) return `about ${minutes} min left`;
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return `about ${hours} h${rest ? ` ${rest} min` : ''} left`;
}

/** "staged 3 of 6 · published 1 of 6 · replays 0 of 3 · compare pending": what the bar is made of. */
function progressCounts(progress: BackfillProgress, separator = ' · '): string {
  const { staged, published, replays } = progress;
  return [
    `staged ${staged.done} of ${staged.total}`,
    `published ${published.done} of ${published.total}`,
    `replays ${replays.done} of ${replays.total}`,
    `compare ${progress.compare}`,
  ].join(separator);
}

/** The status message's progress, in Slack mrkdwn: the bar (monospace, so its cells line up), then the counts. */
export function slackProgress(progress: BackfillProgress): string {
  if (!progress.started) return 'not started';
  const left = progress.msLeft === undefined ? '' : ` · ${formatTimeLeft(progress.msLeft)}`;
  return `\`${progressBar(progress.fraction)}\` ${percent(progress.fraction)}\n${progressCounts(progress)}${left}`;
}

/** One terminal line: the bar redrawn in place on a TTY. */
export function terminalProgressLine(backfillId: number, progress: BackfillProgress): string {
  if (!progress.started) return `backfill #${backfillId}: not started`;
  const left = progress.msLeft === undefined ? '' : ` · ${formatTimeLeft(progress.msLeft)}`;
  return `#${backfillId} [${progressBar(progress.fraction)}] ${percent(progress.fraction).padStart(4)}  ${progressCounts(progress)}${left}`;
}

/**
 * One plain line for a log or a pipe, written when the counts change: no bar, and no time left (it changes on
 * every reading and would fill a log with lines that say nothing new).
 */
export function plainProgressLine(backfillId: number, progress: BackfillProgress): string {
  if (!progress.started) return `backfill #${backfillId}: not started`;
  return `backfill #${backfillId}: ${percent(progress.fraction)} done: ${progressCounts(progress, ', ')}`;
}
