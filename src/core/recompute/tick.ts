import { recordEvent } from '../../db/events.js';
import { findBuiltRowCount } from '../../db/partitionLog.js';
import { requirePipeline } from '../../db/pipelines.js';
import { rollbackToSavepoint, setSavepoint, withTransaction } from '../../db/pool.js';
import { listFirstReads, listSignedReadersOf, type StaleReader } from '../../db/readLog.js';
import { lockWatermark, updateWatermark } from '../../db/watermarks.js';
import type { EngineContext } from '../context.js';
import { snapshotPartition } from '../../db/partitions.js';
import { replacePartition, sourceShards } from './partitionStep.js';
import { recordCatchUp } from '../retrigger/catchUps.js';
import { formatHour, HOUR_MS } from '../time.js';

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
      const current = await lockWatermark(tx, pipeline.name);
      // Where a pipeline starts is the operator's to say, not a guess: an hour too early rebuilds history, too late skips it.
      if (!current) return { stop: `no watermark for ${pipeline.name} yet: give it one in the catalog file (watermark: <the last hour already correct>) and apply it`, watermark: null };
      const next = new Date(current.getTime() + HOUR_MS);
      if (input.until && next > input.until) return { stop: `reached ${formatHour(input.until)}`, watermark: current };
      const shards = await sourceShards(tx, pipeline, next);
      await setSavepoint(tx, 'tick_hour');
      if (shards < pipeline.shardsExpected) {
        return { stop: `the source for ${formatHour(next)} has ${shards} of ${pipeline.shardsExpected} shards`, watermark: current };
      }
      // An hour the table never held before: whoever read it until now read a hole.
      const firstBuild = (await findBuiltRowCount(tx, pipeline.name, next)) === 0;
      const before = firstBuild ? undefined : await snapshotPartition(tx, pipeline, next);
      const after = await replacePartition(tx, pipeline, next);
      if (before && before.checksum !== after.checksum) {
        const signed = await listSignedReadersOf(tx, pipeline.name, next);
        if (signed.length > 0) {
          // A rerun that moves a signed figure is a backfill, announced first; the normal run never does it silently.
          await rollbackToSavepoint(tx, 'tick_hour');
          return { stop: `${formatHour(next)} would change signed ${signed.join(', ')}: start a backfill so its readers are told first`, watermark: current };
        }
      }
      await updateWatermark(tx, pipeline.name, next, input.actor);
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

/** Every read of hours this tick filled for the first time: those readers saw a hole where the data now is. */
async function findStaleReaders(ctx: EngineContext, pipeline: string, hours: Date[]): Promise<StaleReader[]> {
  if (hours.length === 0) return [];
  return listFirstReads(ctx.pool, pipeline, hours);
}
