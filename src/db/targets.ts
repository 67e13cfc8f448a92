import { checksumOver, checksumShapeOf } from './partitions.js';
import type { Pipeline } from './pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from './pool.js';
import { prepared } from './prepared.js';

// The partitions a backfill replaces (backfill.backfill_targets). Reading them whole: listTargets in backfills.ts.

/**
 * One target per expected partition, with what the partition holds now (rows, total, rowsChecksum) and what the
 * preview expects. Identifiers come from the pipeline's catalog row, quoted once.
 * PERF: one aggregate an hour (LATERAL), each reading its hour alone, and pruned at planning too (`= ANY` the
 * hours given: a target partitioned by hour is planned with their partitions only, an index lookup on a plain
 * one). The hours joined to the target and grouped sorted every row by hour (spilling at 4 MB of work_mem) before
 * the checksum, then still sorting by key, sorted each hour's: at 50,000 rows × 24 partitioned, 2.45–2.82 s
 * against 1.83–1.90 s, and 4 plain hours 370–429 ms against 283–289 ms. Without the `= ANY` each hour's subquery is planned over every
 * partition of the target, pruned only as it runs: with JIT on the server compiled them all, 14.6 s.
 */
export async function insertTargets(tx: Queryable, pipeline: Pipeline, backfillId: number, expected: { hour: Date; rows: number; total: string; keysOnce: boolean }[]): Promise<void> {
  const partition = quoteIdent(pipeline.partitionColumn);
  const shape = await checksumShapeOf(tx, quoteQualified(pipeline.targetTable));
  await tx.query(
    `INSERT INTO backfill.backfill_targets (backfill_id, partition_hour, rows_before, total_before, checksum_before, expected_rows, expected_total, expected_keys_once)
     SELECT $1::bigint, e.h, live.rows, live.total, live.checksum, e.rows, e.total, e.keys_once
     FROM unnest($2::timestamptz[], $3::bigint[], $4::numeric[], $5::boolean[]) AS e(h, rows, total, keys_once)
     CROSS JOIN LATERAL (
       SELECT count(*) AS rows, coalesce(sum(t.${quoteIdent(pipeline.measureColumn)}), 0) AS total,
              ${checksumOver('t', shape)} AS checksum
       FROM ${quoteQualified(pipeline.targetTable)} t WHERE t.${partition} = e.h AND t.${partition} = ANY ($2::timestamptz[])) live`,
    [backfillId, expected.map((e) => e.hour), expected.map((e) => e.rows), expected.map((e) => e.total), expected.map((e) => e.keysOnce)]);
}

/**
 * The days' total `before` with the backfill's targets replaced: less what they held when recorded
 * (total_before), plus what the preview expects of them (expected_total).
 */
export async function totalAfterTargets(db: Queryable, backfillId: number, before: string): Promise<string> {
  const { rows } = await db.query<{ after: string }>(
    `SELECT ($2::numeric - coalesce(sum(total_before), 0) + coalesce(sum(expected_total), 0))::numeric(18,2)::text AS after
     FROM backfill.backfill_targets WHERE backfill_id = $1::bigint`, [backfillId, before]);
  return rows[0]?.after ?? before;
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

/** Waves by partition order (src/core/recompute/waves.ts): the first target is the canary (wave 0), the rest go in waves of waveSize. */
export async function assignWaves(tx: Queryable, backfillId: number, waveSize: number): Promise<void> {
  await tx.query(
    `UPDATE backfill.backfill_targets t SET wave = CASE WHEN o.n = 1 THEN 0 ELSE 1 + (o.n - 2) / $2::int END
     FROM (SELECT partition_hour, row_number() OVER (ORDER BY partition_hour) AS n FROM backfill.backfill_targets WHERE backfill_id = $1::bigint) o
     WHERE t.backfill_id = $1::bigint AND t.partition_hour = o.partition_hour`, [backfillId, waveSize]);
}

/** No source, no corrected history: the partition is left as it is. */
export async function markTargetUnavailable(tx: Queryable, backfillId: number, hour: Date): Promise<void> {
  await tx.query(`UPDATE backfill.backfill_targets SET status = 'unavailable' WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [backfillId, hour]);
}

/**
 * Staged: for a swap, into a table of its own (stagedTable, its qualified name); for a rewrite (stagedTable null),
 * into the run's own tables (apart) or the store's shared ones.
 */
export async function markTargetStaged(tx: Queryable, backfillId: number, hour: Date, staged: { table: string | null; apart: boolean }): Promise<void> {
  await tx.query(
    prepared(`UPDATE backfill.backfill_targets SET status = 'staged', staged_relid = to_regclass($3::text)::oid, staged_apart = $4::boolean
     WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`),
    [backfillId, hour, staged.table, staged.apart]);
}

/** Published as this generation of the partition, with what it holds now. */
/**
 * The partition is published: `snapshot` is what it holds now (the diff's figures), `written` the rows the
 * publish itself wrote and their checksum (what a rollback checks nobody changed since: migration 0019).
 */
export async function markTargetPublished(tx: Queryable, backfillId: number, hour: Date, snapshot: { rows: number; total: string; checksum: string },
  written: { rows: number; checksum: string }, generation: number): Promise<void> {
  await tx.query(
    prepared(`UPDATE backfill.backfill_targets SET rows_after = $3::bigint, total_after = $4::numeric, checksum_after = $5::text,
            published_rows = $6::bigint, published_checksum = $7::text, recomputed_at = now(), status = 'published', published_generation = $8::int
     WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`),
    [backfillId, hour, snapshot.rows, snapshot.total, snapshot.checksum, written.rows, written.checksum, generation]);
}

/** The partition is outside its envelope, and why. */
export async function setTargetBreach(tx: Queryable, backfillId: number, hour: Date, reason: string): Promise<void> {
  await tx.query('UPDATE backfill.backfill_targets SET breach = $3::text WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz',
    [backfillId, hour, reason]);
}

/** What a publish decides on: the target's status, its figures before and expected, who accepted it, the table it was staged into. */
export interface PublishTargetRow {
  status: string;
  rowsBefore: number;
  totalBefore: string;
  expectedRows: string | null;
  expectedTotal: string | null;
  acceptedBy: string | null;
  stagedTable: string | null;
  stagedApart: boolean;
  /** Start kept the hour's planned rows with each key once, as a unique index proves (migrations/0032); null before. */
  expectedKeysOnce: boolean | null;
}

export async function findPublishTarget(db: Queryable, backfillId: number, hour: Date): Promise<PublishTargetRow | undefined> {
  const { rows } = await db.query<PublishTargetRow>(
    prepared(`SELECT status, rows_before AS "rowsBefore", total_before::text AS "totalBefore", expected_rows::text AS "expectedRows", expected_total::text AS "expectedTotal", accepted_by AS "acceptedBy",
            staged_relid::regclass::text AS "stagedTable", staged_apart AS "stagedApart", expected_keys_once AS "expectedKeysOnce"
     FROM backfill.backfill_targets WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`), [backfillId, hour]);
  return rows[0];
}
