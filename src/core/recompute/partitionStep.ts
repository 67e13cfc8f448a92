import type { PoolClient, Queryable } from '../../db/pool.js';
import { quoteIdent, quoteQualified } from '../../db/pool.js';
import type { Pipeline } from '../../db/pipelines.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { formatHour } from '../time.js';

/** What a partition holds: compared before and after every replace. */
export interface PartitionSnapshot {
  rows: number;
  /** sum(measure) as a numeric string, never a float. */
  total: string;
  /** md5 over every row in key order: two runs of the step must give the same one. */
  checksum: string;
}

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
  await tx.query(`DELETE FROM ${quoteQualified(pipeline.targetTable)} WHERE ${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`, [hour]);
  const inserted = await tx.query(pipeline.stepSql, [hour]);
  const snapshot = await snapshotPartition(tx, pipeline, hour);
  // Every row the step wrote must land in the partition it was asked for. A step that writes other hours
  // would append to partitions nobody deleted: refuse it, and the caller's transaction rolls back.
  if (inserted.rowCount !== snapshot.rows) {
    throw new BackfillError(ErrorCode.StepFailed,
      `the ${pipeline.name} step wrote ${inserted.rowCount ?? 0} rows but ${formatHour(hour)} holds ${snapshot.rows}: ` +
      `it must insert only rows whose ${pipeline.partitionColumn} is $1. Nothing was changed.`);
  }
  const shards = await sourceShards(tx, pipeline, hour);
  await tx.query(
    `INSERT INTO backfill.partition_log (pipeline, partition_hour, landed_at, shards_expected, shards_landed, row_count)
     VALUES ($1::text, $2::timestamptz, now(), $3::int, $4::int, $5::bigint)
     ON CONFLICT (pipeline, partition_hour) DO UPDATE
       SET shards_landed = EXCLUDED.shards_landed, row_count = EXCLUDED.row_count,
           landed_at = coalesce(backfill.partition_log.landed_at, EXCLUDED.landed_at)`,
    [pipeline.name, hour, pipeline.shardsExpected, Math.min(shards, pipeline.shardsExpected), snapshot.rows]);
  return snapshot;
}

/** Serializes every writer of one partition until the end of the caller's transaction. */
export async function lockPartition(tx: PoolClient, pipelineName: string, hour: Date): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('partition:' || $1::text || ':' || $2::timestamptz::text, 0))`,
    [pipelineName, hour]);
}

/**
 * The checksum of a set of rows `t` of the target's shape: md5 over every row's text in key order. One
 * expression for every snapshot and for the rollback's check against the published one, so they compare.
 */
export function rowsChecksum(keyColumns: readonly string[]): string {
  return `md5(coalesce(string_agg(t::text, '|' ORDER BY ${keyColumns.map((key) => `t.${quoteIdent(key)}`).join(', ')}), ''))`;
}

/** The hour's rows of the target, or of `table` (a table of the target's shape about to become that partition). */
export async function snapshotPartition(db: Queryable, pipeline: Pipeline, hour: Date, table = quoteQualified(pipeline.targetTable)): Promise<PartitionSnapshot> {
  const { rows } = await db.query<{ rows: number; total: string; checksum: string }>(
    `SELECT count(*)::bigint AS rows,
            coalesce(sum(t.${quoteIdent(pipeline.measureColumn)}), 0)::numeric(18,2)::text AS total,
            ${rowsChecksum(pipeline.keyColumns)} AS checksum
     FROM ${table} t
     WHERE t.${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`, [hour]);
  const row = rows[0];
  if (!row) throw new Error('snapshot query returned no row');
  return row;
}

/** sum(measure) over whole UTC days: what a daily report over those partitions shows. */
export async function totalOverDays(db: Queryable, pipeline: Pipeline, days: string[]): Promise<string> {
  const { rows } = await db.query<{ total: string }>(
    `SELECT coalesce(sum(${quoteIdent(pipeline.measureColumn)}), 0)::numeric(18,2)::text AS total
     FROM ${quoteQualified(pipeline.targetTable)}
     WHERE (${quoteIdent(pipeline.partitionColumn)} AT TIME ZONE 'UTC')::date = ANY ($1::date[])`, [days]);
  return rows[0]?.total ?? '0.00';
}

export async function sourceShards(db: Queryable, pipeline: Pipeline, hour: Date): Promise<number> {
  const { rows } = await db.query<{ shards: number | string }>(pipeline.sourceShardsSql, [hour]);
  const first = rows[0];
  return first ? Number(Object.values(first)[0] ?? 0) : 0;
}
