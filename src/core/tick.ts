import { recordEvent } from '../db/events.js';
import { requirePipeline } from '../db/pipelines.js';
import { withTransaction } from '../db/pool.js';
import type { EngineContext } from './context.js';
import { replacePartition, snapshotPartition, sourceShards } from './partitionStep.js';
import type { Queryable } from '../db/pool.js';
import { recordCatchUp } from './catchUps.js';
import { formatHour, HOUR_MS } from './time.js';

export interface StaleReader {
  consumer: string;
  owner: string;
  partitionHour: Date;
  readAt: Date;
}

export interface TickResult {
  processed: Date[];
  watermark: Date | null;
  /** Why it stopped: the next hour's source is incomplete, or it reached `until`. */
  stoppedBecause: string;
  /** Consumers that read a partition this tick filled before it had landed: they must be told it is now real. */
  staleReaders: StaleReader[];
  /** The recorded catch-up whose notices tell those readers, when there were any. */
  catchUpId: number | undefined;
}

/**
 * The normal run: processes the hours after the watermark, in order, with the same replace-the-partition
 * step a backfill uses, advancing the watermark one hour per transaction. It stops at the first hour whose
 * source has not fully landed, because the watermark means every hour at or before it is correct, and at the
 * first already-built hour whose rerun would change a figure someone signed: that takes a backfill.
 */
export async function tick(ctx: EngineContext, input: { pipeline: string; actor: string; until?: Date | undefined; maxHours?: number | undefined }): Promise<TickResult> {
  const pipeline = await requirePipeline(ctx.pool, input.pipeline);
  const processed: Date[] = [];
  const filled: Date[] = [];
  let stoppedBecause = 'reached the limit of this run';
  let watermark: Date | null = null;
  for (let n = 0; n < (input.maxHours ?? 24 * 366); n += 1) {
    const step = await withTransaction(ctx.pool, async (tx) => {
      const { rows } = await tx.query<{ processedThrough: Date }>(
        'SELECT processed_through AS "processedThrough" FROM backfill.watermarks WHERE pipeline = $1::text FOR UPDATE', [pipeline.name]);
      const current = rows[0]?.processedThrough;
      if (!current) return { stop: `no watermark for ${pipeline.name} yet`, watermark: null };
      const next = new Date(current.getTime() + HOUR_MS);
      if (input.until && next > input.until) return { stop: `reached ${formatHour(input.until)}`, watermark: current };
      const shards = await sourceShards(tx, pipeline, next);
      await tx.query('SAVEPOINT tick_hour');
      if (shards < pipeline.shardsExpected) {
        return { stop: `the source for ${formatHour(next)} has ${shards} of ${pipeline.shardsExpected} shards`, watermark: current };
      }
      // An hour the table never held before: whoever read it until now read a hole.
      const built = await tx.query<{ rows: number }>(
        'SELECT row_count AS rows FROM backfill.partition_log WHERE pipeline = $1::text AND partition_hour = $2::timestamptz', [pipeline.name, next]);
      const firstBuild = (built.rows[0]?.rows ?? 0) === 0;
      const before = firstBuild ? undefined : await snapshotPartition(tx, pipeline, next);
      const after = await replacePartition(tx, pipeline, next);
      if (before && before.checksum !== after.checksum) {
        const signed = await signedReadersOf(tx, pipeline.name, next);
        if (signed.length > 0) {
          // A rerun that moves a signed figure is a backfill, announced first; the normal run never does it silently.
          await tx.query('ROLLBACK TO SAVEPOINT tick_hour');
          return { stop: `${formatHour(next)} would change signed ${signed.join(', ')}: start a backfill so its readers are told first`, watermark: current };
        }
      }
      await tx.query(
        `UPDATE backfill.watermarks SET processed_through = $2::timestamptz, updated_at = now(), updated_by = $3::text WHERE pipeline = $1::text`,
        [pipeline.name, next, input.actor]);
      return { stop: null, watermark: next, hour: next, firstBuild };
    });
    watermark = step.watermark;
    if (step.stop !== null) {
      stoppedBecause = step.stop;
      break;
    }
    if (step.hour) processed.push(step.hour);
    if (step.hour && step.firstBuild) filled.push(step.hour);
  }
  const staleReaders = await findStaleReaders(ctx, pipeline.name, filled);
  const catchUpId = staleReaders.length > 0 ? await recordCatchUp(ctx, { pipeline, filled, actor: input.actor }) : undefined;
  if (processed.length > 0) {
    await recordEvent(ctx.pool, {
      actor: input.actor, kind: 'tick',
      detail: { pipeline: pipeline.name, from: formatHour(processed[0] as Date), to: formatHour(processed.at(-1) as Date), partitions: processed.length,
        staleReaders: staleReaders.map((r) => ({ consumer: r.consumer, owner: r.owner, partition: formatHour(r.partitionHour), readAt: r.readAt })) },
    });
  }
  return { processed, watermark, stoppedBecause, staleReaders, catchUpId };
}

/** Signed reports (report and day) that read this hour: a change under them needs an announcement. */
async function signedReadersOf(tx: Queryable, pipeline: string, hour: Date): Promise<string[]> {
  const { rows } = await tx.query<{ figure: string }>(
    `SELECT DISTINCT s.report || ' ' || to_char(s.period, 'YYYY-MM-DD') AS figure
     FROM backfill.read_log r JOIN backfill.signoffs s ON s.report = r.consumer AND s.period = (r.partition_hour AT TIME ZONE 'UTC')::date
     WHERE r.pipeline = $1::text AND r.partition_hour = $2::timestamptz ORDER BY 1`, [pipeline, hour]);
  return rows.map((row) => row.figure);
}

/** Every read of hours this tick filled for the first time: those readers saw a hole where the data now is. */
async function findStaleReaders(ctx: EngineContext, pipeline: string, hours: Date[]): Promise<StaleReader[]> {
  if (hours.length === 0) return [];
  const { rows } = await ctx.pool.query<StaleReader>(
    `SELECT DISTINCT ON (r.consumer, r.partition_hour) r.consumer, c.owner, r.partition_hour AS "partitionHour", r.read_at AS "readAt"
     FROM backfill.read_log r
     JOIN backfill.consumers c ON c.name = r.consumer
     WHERE r.pipeline = $1::text AND r.partition_hour = ANY ($2::timestamptz[])
     ORDER BY r.consumer, r.partition_hour, r.read_at`, [pipeline, hours]);
  return rows;
}
