import type { Pipeline } from './pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from './pool.js';

// The partitions a backfill replaces (backfill.backfill_targets). Reading them whole: listTargets in backfills.ts.

/**
 * One target per expected partition, with what the partition holds now (rows, total, checksum of the rows in key
 * order) and what the preview expects. Identifiers come from the pipeline's catalog row, quoted once.
 */
export async function insertTargets(tx: Queryable, pipeline: Pipeline, backfillId: number, expected: { hour: Date; rows: number; total: string }[]): Promise<void> {
  const order = pipeline.keyColumns.map((column) => `t.${quoteIdent(column)}`).join(', ');
  await tx.query(
    `INSERT INTO backfill.backfill_targets (backfill_id, partition_hour, rows_before, total_before, checksum_before, expected_rows, expected_total)
     SELECT $1::bigint, e.h, count(t.*), coalesce(sum(t.${quoteIdent(pipeline.measureColumn)}), 0),
            md5(coalesce(string_agg(t::text, '|' ORDER BY ${order}), '')), e.rows, e.total
     FROM unnest($2::timestamptz[], $3::bigint[], $4::numeric[]) AS e(h, rows, total)
     LEFT JOIN ${quoteQualified(pipeline.targetTable)} t ON t.${quoteIdent(pipeline.partitionColumn)} = e.h
     GROUP BY e.h, e.rows, e.total`,
    [backfillId, expected.map((e) => e.hour), expected.map((e) => e.rows), expected.map((e) => e.total)]);
}

/** The backfill's partition hours, in order. */
export async function listTargetHours(db: Queryable, backfillId: number): Promise<Date[]> {
  const { rows } = await db.query<{ hour: Date }>(
    'SELECT partition_hour AS hour FROM backfill.backfill_targets WHERE backfill_id = $1::bigint ORDER BY partition_hour', [backfillId]);
  return rows.map((row) => row.hour);
}

/** Accepts the named partitions' difference, by whom and why; their breach is cleared. */
export async function acceptTargets(tx: Queryable, backfillId: number, hours: Date[], acceptedBy: string, reason: string): Promise<void> {
  await tx.query(
    `UPDATE backfill.backfill_targets SET accepted_by = $3::text, accepted_reason = $4::text, breach = NULL
     WHERE backfill_id = $1::bigint AND partition_hour = ANY ($2::timestamptz[])`, [backfillId, hours, acceptedBy, reason]);
}

export async function markTargetRestored(tx: Queryable, backfillId: number, hour: Date): Promise<void> {
  await tx.query(`UPDATE backfill.backfill_targets SET status = 'restored' WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [backfillId, hour]);
}
