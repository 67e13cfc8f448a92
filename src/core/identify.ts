import type { Queryable } from '../db/pool.js';
import type { Pipeline } from '../db/pipelines.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { sourceShards } from './partitionStep.js';
import { formatHour, formatHourRange, HOUR_MS, hoursBetween, type TargetSpec } from './time.js';

/** Why a flagged partition needs no rerun, or cannot have one yet. */
export interface SkippedPartition {
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

interface LogRow {
  hour: Date;
  landedAt: Date | null;
  shardsExpected: number;
  shardsLanded: number;
  reconciled: boolean;
  flagReason: string | null;
}

export async function readWatermark(db: Queryable, pipeline: string): Promise<Date | null> {
  const { rows } = await db.query<{ processedThrough: Date }>(
    'SELECT processed_through AS "processedThrough" FROM backfill.watermarks WHERE pipeline = $1::text', [pipeline]);
  return rows[0]?.processedThrough ?? null;
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
  const { rows } = await db.query<LogRow>(
    `SELECT partition_hour AS hour, landed_at AS "landedAt", shards_expected AS "shardsExpected",
            shards_landed AS "shardsLanded", reconciled, flag_reason AS "flagReason"
     FROM backfill.partition_log
     WHERE pipeline = $1::text AND NOT reconciled
       AND partition_hour >= $2::date::timestamp AT TIME ZONE 'UTC'
       AND partition_hour < ($2::date + 1)::timestamp AT TIME ZONE 'UTC'
     ORDER BY partition_hour`, [pipeline.name, date]);
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
async function whyNoRerun(db: Queryable, pipeline: Pipeline, row: LogRow, watermark: Date | null): Promise<string | undefined> {
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
  const { rows } = await db.query<{ hour: Date }>(
    `SELECT h AS hour FROM generate_series($2::timestamptz, $3::timestamptz, interval '1 hour') h
     WHERE NOT EXISTS (SELECT 1 FROM backfill.partition_log p WHERE p.pipeline = $1::text AND p.partition_hour = h AND p.row_count > 0)
     ORDER BY h LIMIT 1`, [pipeline.name, from, to]);
  const unbuilt = rows[0]?.hour;
  if (unbuilt && (!watermark || unbuilt > watermark)) {
    throw new BackfillError(ErrorCode.BadInput,
      `${formatHourRange(from, to)} includes ${formatHour(unbuilt)}, which the pipeline has never built (the watermark is at ` +
      `${watermark ? formatHour(watermark) : 'nothing yet'}): new hours belong to the normal run (\`backfill tick\`). End the range before it.`);
  }
  return { hours: hoursBetween(from, to), skipped: [] as SkippedPartition[] };
}

export function describeSpec(spec: TargetSpec): string {
  return spec.kind === 'night' ? `the night of ${spec.date}` : formatHourRange(spec.from, spec.to);
}
