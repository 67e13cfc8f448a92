import type { Queryable } from './pool.js';
import { prepared } from './prepared.js';

// What the normal run knows of each partition it built (backfill.partition_log): rows, shards, and whether the
// nightly reconciliation found it right.

/** The rows the partition was built with; 0 when it never was. */
export async function findBuiltRowCount(db: Queryable, pipeline: string, hour: Date): Promise<number> {
  const { rows } = await db.query<{ rows: number }>(
    'SELECT row_count AS rows FROM backfill.partition_log WHERE pipeline = $1::text AND partition_hour = $2::timestamptz', [pipeline, hour]);
  return rows[0]?.rows ?? 0;
}

export interface PartitionLogRow {
  hour: Date;
  landedAt: Date | null;
  shardsExpected: number;
  shardsLanded: number;
  reconciled: boolean;
  flagReason: string | null;
}

/** The partitions of that UTC day the reconciliation did not pass, in order. */
export async function listUnreconciledOfDay(db: Queryable, pipeline: string, date: string): Promise<PartitionLogRow[]> {
  const { rows } = await db.query<PartitionLogRow>(
    `SELECT partition_hour AS hour, landed_at AS "landedAt", shards_expected AS "shardsExpected",
            shards_landed AS "shardsLanded", reconciled, flag_reason AS "flagReason"
     FROM backfill.partition_log
     WHERE pipeline = $1::text AND NOT reconciled
       AND partition_hour >= $2::date::timestamp AT TIME ZONE 'UTC'
       AND partition_hour < ($2::date + 1)::timestamp AT TIME ZONE 'UTC'
     ORDER BY partition_hour`, [pipeline, date]);
  return rows;
}

/** The first hour of [from, to] the pipeline never built with rows, if any. */
export async function findFirstUnbuiltHour(db: Queryable, pipeline: string, from: Date, to: Date): Promise<Date | undefined> {
  const { rows } = await db.query<{ hour: Date }>(
    `SELECT h AS hour FROM generate_series($2::timestamptz, $3::timestamptz, interval '1 hour') h
     WHERE NOT EXISTS (SELECT 1 FROM backfill.partition_log p WHERE p.pipeline = $1::text AND p.partition_hour = h AND p.row_count > 0)
     ORDER BY h LIMIT 1`, [pipeline, from, to]);
  return rows[0]?.hour;
}

/** The partition as the write path just built it: landed (once), its shards and rows. */
export async function recordPartitionBuilt(tx: Queryable, built: { pipeline: string; hour: Date; shardsExpected: number; shardsLanded: number; rows: number }): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.partition_log (pipeline, partition_hour, landed_at, shards_expected, shards_landed, row_count)
     VALUES ($1::text, $2::timestamptz, now(), $3::int, $4::int, $5::bigint)
     ON CONFLICT (pipeline, partition_hour) DO UPDATE
       SET shards_landed = EXCLUDED.shards_landed, row_count = EXCLUDED.row_count,
           landed_at = coalesce(backfill.partition_log.landed_at, EXCLUDED.landed_at)`,
    [built.pipeline, built.hour, built.shardsExpected, built.shardsLanded, built.rows]);
}

/** A backfill published the partition, with this many rows. */
export async function markPartitionBackfilled(tx: Queryable, pipeline: string, hour: Date, rows: number): Promise<void> {
  // reconciled stays false: the month's record is what readers saw that morning.
  await tx.query(prepared('UPDATE backfill.partition_log SET backfilled_at = now(), row_count = $3::bigint WHERE pipeline = $1::text AND partition_hour = $2::timestamptz'),
    [pipeline, hour, rows]);
}
