import { findFirstUnbuiltHour, listUnreconciledOfDay, type PartitionLogRow } from '../../db/partitionLog.js';
import type { Queryable } from '../../db/pool.js';
import type { Pipeline } from '../../db/pipelines.js';
import { findWatermark } from '../../db/watermarks.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { sourceShards } from '../recompute/partitionStep.js';
import { formatHour, formatHourRange, HOUR_MS, hoursBetween, type TargetSpec } from '../time.js';

/** Why a flagged partition needs no rerun, or cannot have one yet. */
interface SkippedPartition {
  hour: Date;
  flagReason: string | null;
  why: string;
}

export interface Identified {
  hours: Date[];
  /** Flagged partitions of the night that are not targets, each with why. */
  skipped: SkippedPartition[];
  firstHour: Date;
  lastHour: Date;
  watermarkBefore: Date | null;
  /** The hour before the first target, or the current watermark when that is already earlier: never further back. */
  watermarkResetTo: Date;
}

/** How far the normal run has processed the pipeline (bench/run.ts reads it through this name too). */
export async function readWatermark(db: Queryable, pipeline: string): Promise<Date | null> {
  return findWatermark(db, pipeline);
}

/**
 * Turns a request into the partitions a backfill replaces. A night selects its unreconciled partitions and
 * keeps only those whose data is wrong or incomplete in the table; an explicit range is taken as asked,
 * but only over hours the pipeline has already processed (later hours belong to the normal run).
 */
export async function identifyTargets(db: Queryable, pipeline: Pipeline, spec: TargetSpec,
  limits: { maxPartitions: number; limitOverride?: string | undefined }): Promise<Identified> {
  const watermark = await readWatermark(db, pipeline.name);
  const { hours, skipped } = spec.kind === 'night'
    ? await nightTargets(db, pipeline, spec.date, watermark)
    : await rangeTargets(db, pipeline, spec.from, spec.to, watermark);

  const first = hours[0];
  const last = hours.at(-1);
  if (!first || !last) {
    const lines = skipped.map((s) => `  ${formatHour(s.hour)}: ${s.why}`);
    throw new BackfillError(ErrorCode.NothingToBackfill,
      `No backfill needed for ${describeSpec(spec)}: no partition there is wrong or missing in the table.\n${lines.join('\n')}`,
      { details: { skipped } });
  }
  if (hours.length > limits.maxPartitions && !limits.limitOverride?.trim()) {
    throw new BackfillError(ErrorCode.RangeTooLong,
      `${describeSpec(spec)} is ${hours.length} partitions, more than the limit of ${limits.maxPartitions}. ` +
      'Back up to the first bad partition instead of rerunning everything "to be safe"; if every one of these hours really is wrong, ' +
      'repeat the request with an override reason (CLI: --override-limit "<why>").');
  }
  const dayBefore = new Date(first.getTime() - HOUR_MS);
  const resetTo = watermark && watermark < dayBefore ? watermark : dayBefore;
  return { hours, skipped, firstHour: first, lastHour: last, watermarkBefore: watermark, watermarkResetTo: resetTo };
}

async function nightTargets(db: Queryable, pipeline: Pipeline, date: string, watermark: Date | null) {
  const rows = await listUnreconciledOfDay(db, pipeline.name, date);
  if (rows.length === 0) {
    throw new BackfillError(ErrorCode.NothingToBackfill,
      `No backfill needed for the night of ${date}: the partition log has no unreconciled partition on that date. ` +
      'To rerun hours anyway, name them as a range, e.g. 2026-11-15T05:00..2026-11-15T10:00.');
  }
  const hours: Date[] = [];
  const skipped: SkippedPartition[] = [];
  for (const row of rows) {
    const why = await whyNoRerun(db, pipeline, row, watermark);
    if (why) skipped.push({ hour: row.hour, flagReason: row.flagReason, why });
    else hours.push(row.hour);
  }
  return { hours, skipped };
}

/** undefined when the partition needs a rerun; otherwise the reason it does not (or cannot yet). */
async function whyNoRerun(db: Queryable, pipeline: Pipeline, row: PartitionLogRow, watermark: Date | null): Promise<string | undefined> {
  // Past the watermark and never built: the normal run's job. Built but past the watermark (the normal run
  // stopped before it, e.g. at a signed figure it would change) is still a backfill's to repair.
  if ((!watermark || row.hour > watermark) && row.shardsLanded === 0) {
    return `not processed yet (the watermark is at ${watermark ? formatHour(watermark) : 'nothing'}): ` +
      'the normal run (tick) processes it once its source has landed, no backfill needed';
  }
  if (row.flagReason === 'corrupt_batch') return undefined;
  if (row.shardsLanded < row.shardsExpected) {
    const available = await sourceShards(db, pipeline, row.hour);
    if (available > row.shardsLanded) return undefined;
    return `built with ${row.shardsLanded} of ${row.shardsExpected} shards and the source still has only ${available}: ` +
      'wait for the missing shard to land, then backfill';
  }
  const late = row.flagReason === 'late_load' ? 'landed late but whole' : row.flagReason === 'flapping_connector'
    ? 'short at first, completed by retries' : row.flagReason === 'upstream_outage' ? 'caught up by the normal run once the source was back' : 'whole';
  return `${late} (${row.shardsLanded} of ${row.shardsExpected} shards): no backfill needed`;
}

async function rangeTargets(db: Queryable, pipeline: Pipeline, from: Date, to: Date, watermark: Date | null) {
  const unbuilt = await findFirstUnbuiltHour(db, pipeline.name, from, to);
  if (unbuilt && (!watermark || unbuilt > watermark)) {
    throw new BackfillError(ErrorCode.BadInput,
      `${formatHourRange(from, to)} includes ${formatHour(unbuilt)}, which the pipeline has never built (the watermark is at ` +
      `${watermark ? formatHour(watermark) : 'nothing yet'}): new hours belong to the normal run (\`backfill tick\`). End the range before it.`);
  }
  return { hours: hoursBetween(from, to), skipped: [] as SkippedPartition[] };
}

function describeSpec(spec: TargetSpec): string {
  return spec.kind === 'night' ? `the night of ${spec.date}` : formatHourRange(spec.from, spec.to);
}
