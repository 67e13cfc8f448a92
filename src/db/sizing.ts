import type { Pipeline } from './pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from './pool.js';

// What the size of a backfill is estimated from (src/core/identify/sizing.ts): the live rows of its partitions,
// and the widths of the target's rows and keys over a sample.

/** The live rows of these hours of the target. */
export async function countLiveRows(db: Queryable, pipeline: Pipeline, hours: Date[]): Promise<number> {
  const target = quoteQualified(pipeline.targetTable);
  const partition = quoteIdent(pipeline.partitionColumn);
  const { rows: live } = await db.query<{ n: number }>(`SELECT count(*)::bigint AS n FROM ${target} WHERE ${partition} = ANY ($1::timestamptz[])`, [hours]);
  return live[0]?.n ?? 0;
}

/** Average width of a target row and of its (partition, keys) over at most `sampleRows` rows, of the hours when given. */
export async function sampleWidths(db: Queryable, pipeline: Pipeline, hours: Date[] | undefined, sampleRows: number): Promise<{ row: number; key: number }> {
  const keyRow = [pipeline.partitionColumn, ...pipeline.keyColumns].map((column) => `s.${quoteIdent(column)}`).join(', ');
  // Two shapes rather than "$1 IS NULL OR …", so the targeted hours' sample can use the partition index.
  const where = hours ? `WHERE t.${quoteIdent(pipeline.partitionColumn)} = ANY ($2::timestamptz[])` : '';
  const { rows } = await db.query<{ row: number | null; key: number | null }>(
    `SELECT round(avg(pg_column_size(s.*)))::int AS row, round(avg(pg_column_size(ROW(${keyRow}))))::int AS key
     FROM (SELECT * FROM ${quoteQualified(pipeline.targetTable)} t ${where} LIMIT $1::int) s`,
    hours ? [sampleRows, hours] : [sampleRows]);
  return { row: rows[0]?.row ?? 0, key: rows[0]?.key ?? 0 };
}
