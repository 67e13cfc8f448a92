import { rowsChecksum } from './partitions.js';
import { runPipelineSql } from './pipelineSql.js';
import type { Queryable } from './pool.js';
import {
  keysEqual, liveSource, nothingChanged, rowText, runRows, runSource, sameRowsSince, stepRows, versionsAgainstBaseline, versionsSinceSnapshot,
  type CountedAtStaging, type RowSource, type RowStore, type VersionChanges, type VersionsSince,
} from './rowStore.js';

// Stage, publish and restore by rewrite: the statements over the run's staged and saved rows (RewriteTables: in
// tables of the run's own, or the store's shared ones), its baseline, and the live partition they replace. Each
// takes the run's parameters: $1 backfill, $2 generation, $3 hour.

/**
 * Where a run published by rewrite keeps its rows: staged, the step's rows; saved, exactly what its publish
 * deleted. Either table is shaped like the store's shared ones (bf_backfill, bf_generation, then the target's
 * columns), so every statement reads it as runSource and runRows do (src/core/recompute/storeTables.ts).
 */
export interface RewriteTables {
  staged: string;
  saved: string;
}

/**
 * The step's rows for the hour into the staged table, made anew for this run (the pipeline's step query, through
 * the one door for catalog SQL). Returns how many it produced, and how many of them are in the hour, counted
 * from what the INSERT itself returned (not a second read of the staged rows).
 */
export async function stageStepRows(tx: Queryable, store: RowStore, staged: string, run: [number, number, Date]): Promise<{ produced: number; inHour: number }> {
  const [backfillId, generation, hour] = run;
  await tx.query(`DELETE FROM ${runRows(store, staged)}`, run);
  const { rows } = await runPipelineSql<{ produced: number; inHour: number }>(tx,
    `WITH staged AS (
       INSERT INTO ${staged} (bf_backfill, bf_generation, ${store.stepColumns.join(', ')})
       SELECT $2::bigint, $3::int, q.* FROM ${stepRows(store)}
       RETURNING ${store.partition} AS hour)
     SELECT count(*)::int AS produced, count(*) FILTER (WHERE hour = $1::timestamptz)::int AS "inHour" FROM staged`, [hour, backfillId, generation]);
  return { produced: rows[0]?.produced ?? 0, inHour: rows[0]?.inHour ?? 0 };
}

/** One statement deletes the live partition and saves exactly what it deleted. Returns how many. */
export async function saveAndDeletePrior(tx: Queryable, store: RowStore, saved: string, run: [number, number, Date]): Promise<number> {
  const inserted = await tx.query(
    `WITH gone AS (DELETE FROM ${liveSource(store)} RETURNING t.*)
     INSERT INTO ${saved} (bf_backfill, bf_generation, ${store.columns.join(', ')})
     SELECT $1::bigint, $2::int, ${store.columns.map((column) => `gone.${column}`).join(', ')} FROM gone`, run);
  return inserted.rowCount ?? 0;
}

/**
 * saveAndDeletePrior, and in the same statement whether it deleted exactly the live rows staging counted in its
 * snapshot (versionsSinceSnapshot over the row versions it deleted).
 */
export async function saveAndDeleteSince(tx: Queryable, store: RowStore, saved: string, run: [number, number, Date], counted: CountedAtStaging): Promise<{ rows: number; unchanged: boolean }> {
  // `kept` runs to completion unread, as every data-modifying WITH does: one saved row for each row in `gone`.
  const { rows } = await tx.query<VersionsSince>(
    `${deleteIntoSaved(store, saved)}
     SELECT ${versionsSinceSnapshot('gone.bf_xmin', '$4', '$5')} FROM gone`, [...run, counted.snapshotXmin, counted.versionsSeen]);
  const row = rows[0];
  if (!row) throw new Error('the publish delete returned no row');
  return { rows: Number(row.rows), unchanged: sameRowsSince(row, counted) };
}

/** The CTEs of a delete that saves what it deletes: `gone`, the rows deleted with their versions (bf_xmin); `kept`, one row for each saved. */
function deleteIntoSaved(store: RowStore, saved: string): string {
  return `WITH gone AS (DELETE FROM ${liveSource(store)} RETURNING t.*, t.xmin AS bf_xmin),
     kept AS (
       INSERT INTO ${saved} (bf_backfill, bf_generation, ${store.columns.join(', ')})
       SELECT $1::bigint, $2::int, ${store.columns.map((column) => `gone.${column}`).join(', ')} FROM gone
       RETURNING 1)`;
}

/**
 * saveAndDeletePrior, and in the same statement what it deleted against the baseline kept with row versions when
 * the partition was staged (`baseline`, versionsAgainstBaseline): unchanged when it deleted exactly the rows
 * staging measured.
 */
export async function saveAndDeleteComparing(tx: Queryable, store: RowStore, saved: string, run: [number, number, Date], baseline: string): Promise<{ rows: number; unchanged: boolean }> {
  const { rows } = await tx.query<VersionChanges & { rows: number }>(
    `${deleteIntoSaved(store, saved)}
     SELECT (SELECT count(*) FROM kept)::int AS rows, c.*
     FROM (${versionsAgainstBaseline(store, `SELECT ${store.keys.map((key) => `gone.${key}`).join(', ')}, gone.bf_xmin FROM gone`, baseline)}) c`, run);
  const row = rows[0];
  if (!row) throw new Error('the publish delete returned no row');
  return { rows: row.rows, unchanged: nothingChanged(row) };
}

/** The live rows of the run's hour, counted. */
export async function countLiveRows(tx: Queryable, store: RowStore, run: [number, number, Date]): Promise<number> {
  const { rows } = await tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${liveSource(store)}`, run);
  return rows[0]?.n ?? 0;
}

/**
 * Whether the target stores exactly the rows an INSERT gives it: no trigger that could change or skip a row before it
 * is stored (a row trigger BEFORE or INSTEAD OF INSERT, enabled in any mode) and no rule on INSERT, on the target or
 * any partition of it. Then the rows a publish inserts from the staged table are the staged rows, and their checksum
 * is the one staging took.
 */
export async function storesRowsAsInserted(db: Queryable, store: RowStore): Promise<boolean> {
  // tgtype bits (pg_trigger.h): 1 row, 2 before, 4 insert, 64 instead. pg_partition_tree lists nothing for a table
  // that is not partitioned, so the target is named besides.
  const { rows } = await db.query<{ asInserted: boolean }>(
    `WITH tree AS (SELECT $1::regclass AS relid UNION SELECT relid FROM pg_partition_tree($1::regclass))
     SELECT NOT EXISTS (SELECT 1 FROM tree p JOIN pg_trigger g ON g.tgrelid = p.relid
                        WHERE NOT g.tgisinternal AND g.tgenabled <> 'D' AND g.tgtype & 1 <> 0 AND g.tgtype & 4 <> 0 AND g.tgtype & 66 <> 0)
        AND NOT EXISTS (SELECT 1 FROM tree p JOIN pg_rewrite r ON r.ev_class = p.relid WHERE r.ev_type = '3') AS "asInserted"`,
    [store.target]);
  return rows[0]?.asInserted ?? false;
}

/** The run's rows of a table of the store (staged to publish, saved to restore) into the target. Returns how many. */
export async function insertRunRowsIntoTarget(tx: Queryable, store: RowStore, table: string, run: [number, number, Date]): Promise<number | null> {
  const inserted = await tx.query(`INSERT INTO ${store.target} (${store.columns.join(', ')}) SELECT ${store.columns.join(', ')} FROM ${runRows(store, table)}`, run);
  return inserted.rowCount;
}

/**
 * Late rows, as `p`: saved by the publish's delete, absent from the baseline (the live keys when the partition was
 * staged, a RowSource over `t`) and not produced by the step either. The publish carries them into the target; a
 * rollback compares them.
 */
function carriedLateRows(store: RowStore, tables: RewriteTables, baseline: RowSource): RowSource {
  return `${runSource(store, tables.saved, 'p')}
    AND NOT EXISTS (SELECT 1 FROM ${baseline} AND ${keysEqual(store, 't', 'p')})
    AND NOT EXISTS (SELECT 1 FROM ${runSource(store, tables.staged)} AND ${keysEqual(store, 't', 'p')})`;
}

/** What a publish by rewrite wrote, from the statement that wrote it: its rows, the late ones among them, their checksum. */
export interface RowsWritten {
  rows: number;
  lateRows: number;
  /** rowsChecksum over exactly the rows written. */
  checksum: string;
}

/**
 * The publish's one write into the target: the run's staged rows, and the late rows, deleted by the publish,
 * absent when the partition was staged and not produced by the step either (normal ingestion wrote them in
 * between; they are put back, so the published generation keeps them). The count and checksum are taken over
 * what this statement inserted (RETURNING), never over the live partition: a row another writer commits while
 * the publish runs is not the publish's, and a rollback must leave it alone. The checksum is rowsChecksum.
 */
export async function writeRunRows(tx: Queryable, store: RowStore, tables: RewriteTables, run: [number, number, Date], baseline: RowSource | 'none'): Promise<RowsWritten> {
  const columns = store.columns.join(', ');
  // 'none': the delete removed exactly the baseline's rows (saveAndDeleteComparing), so no late row can be among them.
  const late = baseline === 'none'
    ? `SELECT * FROM staged_rows WHERE false`
    : `INSERT INTO ${store.target} (${columns})
       SELECT ${store.columns.map((column) => `p.${column}`).join(', ')} FROM ${carriedLateRows(store, tables, baseline)}
       RETURNING *`;
  const { rows } = await tx.query<RowsWritten>(
    `WITH staged_rows AS (
       INSERT INTO ${store.target} (${columns}) SELECT ${columns} FROM ${runRows(store, tables.staged)} RETURNING *
     ), late_rows AS (
       ${late}
     )
     SELECT count(*)::int AS rows, (SELECT count(*)::int FROM late_rows) AS "lateRows", ${rowsChecksum(store)} AS checksum
     FROM (SELECT * FROM staged_rows UNION ALL SELECT * FROM late_rows) t`, run);
  const row = rows[0];
  if (!row) throw new Error('the publish insert returned no row');
  return row;
}

/** Live rows of the partition whose key the backfill's publish wrote (staged rows, and late rows it carried). */
export function writtenByPublish(store: RowStore, tables: RewriteTables): RowSource {
  return `${liveSource(store)}
    AND (EXISTS (SELECT 1 FROM ${runSource(store, tables.staged, 's')} AND ${keysEqual(store, 's', 't')})
      OR EXISTS (SELECT 1 FROM ${runSource(store, tables.saved, 'p')} AND ${keysEqual(store, 'p', 't')}))`;
}

/** How the live rows with the keys a publish wrote differ from what it wrote: counts, and a few keys of each. */
export interface ChangedSincePublish {
  changed: number;
  removed: number;
  /** Keys the publish removed (saved, not written) that another writer wrote again. */
  added: number;
  /** Up to `sampleSize` keys, each as its key columns' text joined by ", ", with how it differs. */
  sample: { key: string; how: 'changed' | 'removed' | 'added' }[];
}

const SAMPLE_SIZE = 5;

/**
 * Row by row, what another writer did to the rows a publish by rewrite wrote: the staged rows and the late rows
 * it carried (saved, not staged, not in the baseline) against the live rows with those keys. Only read when the
 * checksum says something differs. Once retention dropped the baseline (scratch), a saved key that is not live
 * may have been removed by the publish itself, so only live rows are compared there: the counts are then a floor.
 * The baseline is kept while the run's table of its own is there (`ownTable`), though it may hold no key (the
 * staged rows had every live key: measureStaged), or, in the store's shared one, while it holds the run's keys.
 */
export async function changedSincePublish(tx: Queryable, store: RowStore, tables: RewriteTables, run: [number, number, Date],
  kept: { source: RowSource; ownTable: boolean }): Promise<ChangedSincePublish> {
  const baseline = kept.source;
  const keyText = (alias: string) => store.keys.map((key) => `${alias}.${key}::text`).join(` || ', ' || `);
  const on = store.keys.map((key) => `e.${key} = l.${key}`).join(' AND ');
  const pick = (alias: string) => store.keys.map((key) => `${alias}.${key}`).join(', ');
  const { rows } = await tx.query<{ how: 'changed' | 'removed' | 'added'; n: number; sample: string[] }>(
    `WITH baseline_kept AS (SELECT ${kept.ownTable ? 'true' : `EXISTS (SELECT 1 FROM ${baseline})`} AS kept),
     expected AS (
       SELECT ${pick('s')}, ${rowText(store, 's')} AS r, false AS from_saved FROM ${runSource(store, tables.staged, 's')}
       UNION ALL
       SELECT ${pick('p')}, ${rowText(store, 'p')}, true FROM ${carriedLateRows(store, tables, baseline)}
     ),
     live AS (SELECT ${pick('t')}, ${rowText(store, 't')} AS r FROM ${writtenByPublish(store, tables)}),
     compared AS (
       SELECT CASE WHEN l.r IS NULL THEN 'removed' WHEN e.r IS NULL THEN 'added' ELSE 'changed' END AS how,
              CASE WHEN l.r IS NULL THEN ${keyText('e')} ELSE ${keyText('l')} END AS key
       FROM expected e FULL JOIN live l ON ${on}, baseline_kept
       WHERE e.r IS DISTINCT FROM l.r AND (l.r IS NOT NULL OR NOT e.from_saved OR baseline_kept.kept)
     )
     SELECT how, count(*)::int AS n, (array_agg(key ORDER BY key))[1:${SAMPLE_SIZE}] AS sample FROM compared GROUP BY how`, run);
  const of = (how: string) => rows.find((row) => row.how === how);
  const sample = rows.flatMap((row) => row.sample.map((key) => ({ key, how: row.how }))).slice(0, SAMPLE_SIZE);
  return { changed: of('changed')?.n ?? 0, removed: of('removed')?.n ?? 0, added: of('added')?.n ?? 0, sample };
}

/**
 * The rollback's delete of what a publish wrote, and the check that it deleted exactly that, in one statement:
 * what is deleted is what is compared, so a writer committing between the rollback's check and its delete
 * cannot have its write deleted unseen. Returns the checksum (rowsChecksum) and count of the rows deleted.
 */
export async function deleteRowsChecked(tx: Queryable, source: RowSource, checksum: string, run: [number, number, Date]): Promise<{ checksum: string; rows: number }> {
  const { rows } = await tx.query<{ checksum: string; rows: number }>(
    `WITH gone AS (DELETE FROM ${source} RETURNING t.*) SELECT ${checksum} AS checksum, count(*)::int AS rows FROM gone t`, run);
  const row = rows[0];
  if (!row) throw new Error('the rollback delete returned no row');
  return row;
}

/** The checksum (an expression over `t`, rowsChecksum) and count of a source's rows. */
export async function checksumRows(tx: Queryable, checksum: string, source: RowSource, run: [number, number, Date]): Promise<{ checksum: string; rows: number } | undefined> {
  const { rows } = await tx.query<{ checksum: string; rows: number }>(
    `SELECT ${checksum} AS checksum, count(*)::int AS rows FROM ${source}`, run);
  return rows[0];
}
