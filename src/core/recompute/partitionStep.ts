import { recordPartitionBuilt } from '../../db/partitionLog.js';
import { deletePartitionRows, lockPartition, snapshotPartition, type PartitionSnapshot } from '../../db/partitions.js';
import { runPipelineSql } from '../../db/pipelineSql.js';
import type { Pipeline } from '../../db/pipelines.js';
import type { PoolClient, Queryable } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { formatHour } from '../time.js';

// The partition's lock and measures are statements of src/db/partitions.ts; tests of the write path take them
// from here with it.
export { lockPartition, snapshotPartition, totalOverDays, type PartitionSnapshot } from '../../db/partitions.js';

/**
 * The one write path, for the nightly tick and for a backfill alike: replace one partition.
 * Must run inside a transaction owned by the caller, so the caller can record the step as done in the
 * same commit. Readers never see the gap (MVCC), and the per-partition advisory lock makes two runs of
 * the same hour serialize: without it the second DELETE sees none of the first run's rows and both
 * inserts survive, doubling the hour.
 *
 * NOTE: there is deliberately no append path. The step SQL is only ever run right after the delete.
 */
export async function replacePartition(tx: PoolClient, pipeline: Pipeline, hour: Date): Promise<PartitionSnapshot> {
  await lockPartition(tx, pipeline.name, hour);
  await deletePartitionRows(tx, pipeline, hour);
  const inserted = await runPipelineSql(tx, pipeline.stepSql, [hour]);
  const snapshot = await snapshotPartition(tx, pipeline, hour);
  // Every row the step wrote must land in the partition it was asked for. A step that writes other hours
  // would append to partitions nobody deleted: refuse it, and the caller's transaction rolls back.
  if (inserted.rowCount !== snapshot.rows) {
    throw new BackfillError(ErrorCode.StepFailed,
      `the ${pipeline.name} step wrote ${inserted.rowCount ?? 0} rows but ${formatHour(hour)} holds ${snapshot.rows}: ` +
      `it must insert only rows whose ${pipeline.partitionColumn} is $1. Nothing was changed.`);
  }
  const shards = await sourceShards(tx, pipeline, hour);
  await recordPartitionBuilt(tx, { pipeline: pipeline.name, hour, shardsExpected: pipeline.shardsExpected, shardsLanded: Math.min(shards, pipeline.shardsExpected), rows: snapshot.rows });
  return snapshot;
}

/** How many of the hour's source shards have landed, by the pipeline's own source_shards_sql ($1 = the hour). */
export async function sourceShards(db: Queryable, pipeline: Pipeline, hour: Date): Promise<number> {
  const { rows } = await runPipelineSql<{ shards: number | string }>(db, pipeline.sourceShardsSql, [hour]);
  const first = rows[0];
  return first ? Number(Object.values(first)[0] ?? 0) : 0;
}
