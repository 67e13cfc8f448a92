import { runPipelineSql } from './pipelineSql.js';
import type { Queryable } from './pool.js';
import { keysEqual, liveSource, runRows, runSource, stepRows, type RowSource, type RowStore } from './rowStore.js';

// Stage, publish and restore by rewrite: the statements over the store's shared tables (staged, saved, baseline)
// and the live partition they replace. Each takes the run's parameters: $1 backfill, $2 generation, $3 hour.

/** The live keys of the hour into the baseline, made anew for this run. */
export async function keepBaselineKeys(tx: Queryable, store: RowStore, run: [number, number, Date]): Promise<void> {
  await tx.query(`DELETE FROM ${runRows(store, store.baseline)}`, run);
  await tx.query(
    `INSERT INTO ${store.baseline} SELECT $1::bigint, $2::int, t.${store.partition}, ${store.keys.map((key) => `t.${key}`).join(', ')}
     FROM ${liveSource(store)}`, run);
}

/**
 * The step's rows for the hour into the staged table, made anew for this run (the pipeline's step query, through
 * the one door for catalog SQL). Returns how many it produced, and how many of them are in the hour.
 */
export async function stageStepRows(tx: Queryable, store: RowStore, run: [number, number, Date]): Promise<{ produced: number | null; inHour: number | undefined }> {
  const [backfillId, generation, hour] = run;
  await tx.query(`DELETE FROM ${runRows(store, store.staged)}`, run);
  const staged = await runPipelineSql(tx,
    `INSERT INTO ${store.staged} (bf_backfill, bf_generation, ${store.stepColumns.join(', ')})
     SELECT $2::bigint, $3::int, q.* FROM ${stepRows(store)}`, [hour, backfillId, generation]);
  const inHour = await tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${runRows(store, store.staged)}`, run);
  return { produced: staged.rowCount, inHour: inHour.rows[0]?.n };
}

/** One statement deletes the live partition and saves exactly what it deleted. Returns how many. */
export async function saveAndDeletePrior(tx: Queryable, store: RowStore, run: [number, number, Date]): Promise<number> {
  const saved = await tx.query(
    `WITH gone AS (DELETE FROM ${liveSource(store)} RETURNING t.*)
     INSERT INTO ${store.saved} (bf_backfill, bf_generation, ${store.columns.join(', ')})
     SELECT $1::bigint, $2::int, ${store.columns.map((column) => `gone.${column}`).join(', ')} FROM gone`, run);
  return saved.rowCount ?? 0;
}

/** The run's rows of a table of the store (staged to publish, saved to restore) into the target. Returns how many. */
export async function insertRunRowsIntoTarget(tx: Queryable, store: RowStore, table: string, run: [number, number, Date]): Promise<number | null> {
  const inserted = await tx.query(`INSERT INTO ${store.target} (${store.columns.join(', ')}) SELECT ${store.columns.join(', ')} FROM ${runRows(store, table)}`, run);
  return inserted.rowCount;
}

/**
 * Late rows: deleted by the publish, absent when the partition was staged, and not produced by the staged step
 * either: normal ingestion wrote them in between. They are put back, so the published generation keeps them.
 */
export async function carryLateRows(tx: Queryable, store: RowStore, run: [number, number, Date]): Promise<number> {
  const late = await tx.query(
    `INSERT INTO ${store.target} (${store.columns.join(', ')})
     SELECT ${store.columns.map((column) => `p.${column}`).join(', ')} FROM ${runSource(store, store.saved, 'p')}
       AND NOT EXISTS (SELECT 1 FROM ${runSource(store, store.baseline)} AND ${keysEqual(store, 't', 'p')})
       AND NOT EXISTS (SELECT 1 FROM ${runSource(store, store.staged)} AND ${keysEqual(store, 't', 'p')})`, run);
  return late.rowCount ?? 0;
}

/** Live rows of the partition whose key the backfill's publish wrote (staged rows, and late rows it carried). */
export function writtenByPublish(store: RowStore): RowSource {
  return `${liveSource(store)}
    AND (EXISTS (SELECT 1 FROM ${runSource(store, store.staged, 's')} AND ${keysEqual(store, 's', 't')})
      OR EXISTS (SELECT 1 FROM ${runSource(store, store.saved, 'p')} AND ${keysEqual(store, 'p', 't')}))`;
}

/** Deletes the live rows of a source (the rows a publish wrote, before its rollback restores the saved ones). */
export async function deleteRows(tx: Queryable, source: RowSource, run: [number, number, Date]): Promise<void> {
  await tx.query(`DELETE FROM ${source}`, run);
}

/** The checksum (an expression over `t`, rowsChecksum) and count of a source's rows. */
export async function checksumRows(tx: Queryable, checksum: string, source: RowSource, run: [number, number, Date]): Promise<{ checksum: string; rows: number } | undefined> {
  const { rows } = await tx.query<{ checksum: string; rows: number }>(
    `SELECT ${checksum} AS checksum, count(*)::int AS rows FROM ${source}`, run);
  return rows[0];
}
