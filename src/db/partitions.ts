import type { Pipeline } from './pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from './pool.js';
import { describeTableColumns } from './rowStore.js';
import { prepared } from './prepared.js';

// One partition (hour) of a pipeline's target table: its lock, its rows deleted, and what it holds (rows, total,
// checksum). Identifiers come from the pipeline's catalog row, quoted once.

/** What a partition holds: compared before and after every replace. */
export interface PartitionSnapshot {
  rows: number;
  /** sum(measure) as a numeric string, never a float. */
  total: string;
  /** rowsChecksum of its rows: two runs of the step must give the same one. */
  checksum: string;
}

const PARTITION_LOCK = `pg_advisory_xact_lock(hashtextextended('partition:' || $1::text || ':' || $2::timestamptz::text, 0))`;

/** Serializes every writer of one partition until the end of the caller's transaction. */
export async function lockPartition(tx: Queryable, pipelineName: string, hour: Date): Promise<void> {
  await tx.query(`SELECT ${PARTITION_LOCK}`, [pipelineName, hour]);
}

/**
 * lockPartition, and hash joins preferred for the rest of the transaction (preferHashJoins, src/db/rowStore.ts:
 * the same setting, local to it), in one statement: how a stage and a publish begin their writes.
 * PERF: two round trips of every stage and every publish; at 60 rows a partition is some 70 statements.
 */
export async function lockPartitionPreferringHashJoins(tx: Queryable, pipelineName: string, hour: Date): Promise<void> {
  await tx.query(prepared(`SELECT set_config('enable_nestloop', 'off', true), ${PARTITION_LOCK}`), [pipelineName, hour]);
}

/** Deletes the hour's rows of the target (the write path runs the step right after, in the same transaction). */
export async function deletePartitionRows(tx: Queryable, pipeline: Pipeline, hour: Date): Promise<void> {
  await tx.query(`DELETE FROM ${quoteQualified(pipeline.targetTable)} WHERE ${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`, [hour]);
}

/** The form of rowsChecksum: its version, then the md5. */
const CHECKSUM_VERSION = 'h1:';

/** What a checksum reads of rows of the target's shape: its columns, quoted, in table order, and which compare exactly. */
export interface ChecksumShape {
  columns: readonly string[];
  /** Quoted names of the columns whose `=` holds exactly when their text is the same (describeTableColumns). */
  exact: ReadonlySet<string>;
}

/** The checksum shape of a table of the target's shape, from the catalog (one read of pg_attribute); also the store's columns (rowStoreOf). */
export async function checksumShapeOf(db: Queryable, table: string): Promise<ChecksumShape & { columns: string[] }> {
  const { columns, exact } = await describeTableColumns(db, table);
  return { columns: columns.map(quoteIdent), exact: new Set(exact.map(quoteIdent)) };
}

/**
 * The checksum of a set of rows `t` of the target's shape: rowsChecksum. One expression for every snapshot and for
 * the rollback's check against the published one, so they compare.
 */
export function rowsChecksum(shape: ChecksumShape): string {
  return checksumOver('t', shape);
}

/**
 * The checksum of rows `alias` (rowsChecksum), counting only the rows `filter` holds for: `h1:` and the md5 of
 * their count and the sum of a 64-bit hash of each row. Each row's hash is over its columns by their own types'
 * hash functions (those PostgreSQL keeps stable for hash partitioning), where `=` is exact for the type, and over
 * their text otherwise, the way the reconciliation compares them; then mixed (hashint8extended), so that rows
 * differing in opposite ways cannot cancel out in the sum, as the record's own hash, a polynomial of its columns'
 * hashes, would let them (test/db/checksum.test.ts). Equal sets of rows give equal checksums in any order; any
 * other set a different one, but with a chance of 2⁻⁶⁴.
 *
 * PERF: the checksum was the md5 of every row's text sorted by key: 67–99 ms at 50,000 rows against 20 ms hashing
 * (a count-and-sum scan: 9–17 ms), and at 1,000,000 rows 1.47 s against 0.34 s, as the sort spilled to disk; the one
 * text it built grew with the rows, past PostgreSQL's 1 GB limit at about ten million rows a partition.
 */
export function checksumOver(alias: string, shape: ChecksumShape, filter?: string): string {
  // The text under "C": a column's own collation (one that ignores case, say) would hash 'A' as 'a'.
  const fields = shape.columns.map((column) => (shape.exact.has(column) ? `${alias}.${column}` : `${alias}.${column}::text COLLATE "C"`));
  // sum() of bigint is the exact numeric sum, kept in 128 bits while it fits: the same figure as summing each
  // hash cast to numeric, which took 15% longer at 1,000,000 rows (0.34 s against 0.29 s in psql).
  const rowHash = `hashint8extended(hash_record_extended(ROW(${fields.join(', ')}), 0), 0)`;
  const only = filter ? ` FILTER (WHERE ${filter})` : '';
  return `('${CHECKSUM_VERSION}' || md5(count(*)${only} || ':' || coalesce(sum(${rowHash})${only}, 0)))`;
}

/**
 * The checksum before rowsChecksum (until 2026-12-06): the md5 of every row's text in key order, 32 hexadecimal
 * digits. A rollback compares the partition now against the checksum its publish recorded, in the form it was
 * recorded in: a publish of an earlier version is checked with this one.
 */
function legacyChecksumOver(alias: string, quotedKeys: readonly string[]): string {
  return `md5(coalesce(string_agg(${alias}::text, '|' ORDER BY ${quotedKeys.map((key) => `${alias}.${key}`).join(', ')}), ''))`;
}

/** rowsChecksum, or where `recorded` was taken in the earlier form (legacyChecksumOver), that form: what compares with it. */
export function rowsChecksumLike(recorded: string | null, shape: ChecksumShape & { keys: readonly string[] }): string {
  return recorded !== null && /^[0-9a-f]{32}$/.test(recorded) ? legacyChecksumOver('t', shape.keys) : rowsChecksum(shape);
}

/** The hour's rows of the target, or of `table` (a table of the target's shape about to become that partition). */
export async function snapshotPartition(db: Queryable, pipeline: Pipeline, hour: Date, table = quoteQualified(pipeline.targetTable)): Promise<PartitionSnapshot> {
  const shape = await checksumShapeOf(db, quoteQualified(pipeline.targetTable));
  return snapshotRows(db, { ...shape, measure: quoteIdent(pipeline.measureColumn) },
    `${table} t WHERE t.${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`, [hour]);
}

/**
 * The snapshot of rows `t` of the target's shape (`FROM` `rows`, with its parameters): their count, the
 * measure's total and rowsChecksum, by the measure column and the checksum's shape.
 */
export async function snapshotRows(db: Queryable, columns: ChecksumShape & { measure: string }, rows: string, params: readonly unknown[]): Promise<PartitionSnapshot> {
  const { rows: found } = await db.query<PartitionSnapshot>(
    `SELECT count(*)::bigint AS rows,
            coalesce(sum(t.${columns.measure}), 0)::numeric(18,2)::text AS total,
            ${rowsChecksum(columns)} AS checksum
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
