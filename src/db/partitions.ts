import type { Pipeline } from './pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from './pool.js';

// One partition (hour) of a pipeline's target table: its lock, its rows deleted, and what it holds (rows, total,
// checksum). Identifiers come from the pipeline's catalog row, quoted once.

/** What a partition holds: compared before and after every replace. */
export interface PartitionSnapshot {
  rows: number;
  /** sum(measure) as a numeric string, never a float. */
  total: string;
  /** md5 over every row in key order: two runs of the step must give the same one. */
  checksum: string;
}

/** Serializes every writer of one partition until the end of the caller's transaction. */
export async function lockPartition(tx: Queryable, pipelineName: string, hour: Date): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('partition:' || $1::text || ':' || $2::timestamptz::text, 0))`,
    [pipelineName, hour]);
}

/** Deletes the hour's rows of the target (the write path runs the step right after, in the same transaction). */
export async function deletePartitionRows(tx: Queryable, pipeline: Pipeline, hour: Date): Promise<void> {
  await tx.query(`DELETE FROM ${quoteQualified(pipeline.targetTable)} WHERE ${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`, [hour]);
}

/**
 * The checksum of a set of rows `t` of the target's shape: md5 over every row's text in key order. One
 * expression for every snapshot and for the rollback's check against the published one, so they compare.
 */
export function rowsChecksum(keyColumns: readonly string[]): string {
  return checksumOver('t', keyColumns.map(quoteIdent));
}

/** rowsChecksum over rows `alias`, by key columns already quoted, counting only the rows `filter` holds for. */
export function checksumOver(alias: string, quotedKeys: readonly string[], filter?: string): string {
  const ordered = `string_agg(${alias}::text, '|' ORDER BY ${quotedKeys.map((key) => `${alias}.${key}`).join(', ')})`;
  return `md5(coalesce(${ordered}${filter ? ` FILTER (WHERE ${filter})` : ''}, ''))`;
}

/** The hour's rows of the target, or of `table` (a table of the target's shape about to become that partition). */
export async function snapshotPartition(db: Queryable, pipeline: Pipeline, hour: Date, table = quoteQualified(pipeline.targetTable)): Promise<PartitionSnapshot> {
  return snapshotRows(db, { measure: quoteIdent(pipeline.measureColumn), keys: pipeline.keyColumns.map(quoteIdent) },
    `${table} t WHERE t.${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`, [hour]);
}

/**
 * The snapshot of rows `t` of the target's shape (`FROM` `rows`, with its parameters): their count, the
 * measure's total and rowsChecksum, by the measure and key columns already quoted.
 */
export async function snapshotRows(db: Queryable, columns: { measure: string; keys: readonly string[] }, rows: string, params: readonly unknown[]): Promise<PartitionSnapshot> {
  const { rows: found } = await db.query<PartitionSnapshot>(
    `SELECT count(*)::bigint AS rows,
            coalesce(sum(t.${columns.measure}), 0)::numeric(18,2)::text AS total,
            ${checksumOver('t', columns.keys)} AS checksum
     FROM ${rows}`, [...params]);
  const row = found[0];
  if (!row) throw new Error('snapshot query returned no row');
  return row;
}

/** sum(measure) over whole UTC days: what a daily report over those partitions shows. */
export async function totalOverDays(db: Queryable, pipeline: Pipeline, days: readonly string[]): Promise<string> {
  const within = wholeUtcDays(quoteIdent(pipeline.partitionColumn), days, 1);
  const { rows } = await db.query<{ total: string }>(
    `SELECT coalesce(sum(${quoteIdent(pipeline.measureColumn)}), 0)::numeric(18,2)::text AS total
     FROM ${quoteQualified(pipeline.targetTable)} WHERE ${within.condition}`, within.params);
  return rows[0]?.total ?? '0.00';
}

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * The rows of whole UTC days (YYYY-MM-DD, in any order, repeats allowed), as ranges of the partition column
 * `column` (quoted): `(column >= $n AND column < $n+1) OR …`, one range for each run of consecutive days, its
 * bounds the parameters from `$firstParam` on (midnight UTC of the first day, and of the day after the last).
 * For a timestamptz column they hold the rows `(column AT TIME ZONE 'UTC')::date` puts on those days.
 *
 * PERF: that expression of the column, the way the days' totals were read before, can use no index and prune no
 * partition: every start and compare read the whole target to sum a day (1.2 million rows for one day of the
 * bench's 1.24 million; all of them for one day of a year). Ranges prune a target partitioned by hour to the days'
 * partitions before the statement runs, and are an index range on a plain one. Ranges alone: with the expression
 * beside them, its default estimate made the planner scan whole partitions by their index.
 */
export function wholeUtcDays(column: string, days: readonly string[], firstParam: number): { condition: string; params: Date[] } {
  const starts = [...new Set(days.map(midnightUtc))].sort((a, b) => a - b);
  const ranges: [number, number][] = [];
  for (const start of starts) {
    const last = ranges.at(-1);
    if (last && last[1] === start) last[1] = start + DAY_MS;
    else ranges.push([start, start + DAY_MS]);
  }
  if (ranges.length === 0) return { condition: 'false', params: [] };
  const condition = ranges.map((_range, index) => {
    const from = firstParam + 2 * index;
    return `(${column} >= $${from}::timestamptz AND ${column} < $${from + 1}::timestamptz)`;
  }).join(' OR ');
  return { condition: `(${condition})`, params: ranges.flatMap(([from, to]) => [new Date(from), new Date(to)]) };
}

function midnightUtc(day: string): number {
  const ms = /^\d{4}-\d{2}-\d{2}$/.test(day) ? Date.parse(`${day}T00:00:00Z`) : Number.NaN;
  if (Number.isNaN(ms)) throw new Error(`not a day (YYYY-MM-DD): ${day}`);
  return ms;
}
