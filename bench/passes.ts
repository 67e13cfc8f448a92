// The timed units of the benchmark that run in this process, one connection at a time.

import type { Pipeline } from '../src/db/pipelines.js';
import { withClient, withTransaction, type Pool } from '../src/db/pool.js';
import { replacePartition } from '../src/core/recompute/partitionStep.js';
import { reconcileByKey, type Reconciliation } from '../src/db/reconcile.js';
import { liveSource, preferHashJoins, runSource, STAGED_RUN, tableSource, type RowSource, type RowStore } from '../src/db/rowStore.js';
import { rowStoreOf } from '../src/core/recompute/rowStore.js';
import { rewriteTablesOf } from '../src/core/recompute/storeTables.js';
import { replaceWith } from './data.js';

export interface Pass {
  seconds: number;
  rows: number;
}

/** Row 1, the baseline: per hour, on one connection, BEGIN; DELETE the hour; the deployed step; COMMIT. */
export async function rawPass(pool: Pool, pipeline: Pipeline, hours: Date[]): Promise<Pass> {
  return withClient(pool, async (client) => {
    let rows = 0;
    const started = performance.now();
    for (const hour of hours) rows += await replaceWith(client, pipeline, pipeline.stepSql, hour);
    return { seconds: (performance.now() - started) / 1000, rows };
  });
}

/** The engine's one write path (the normal run's): one withTransaction per hour around replacePartition. */
export async function replacePass(pool: Pool, pipeline: Pipeline, hours: Date[]): Promise<Pass> {
  let rows = 0;
  const started = performance.now();
  for (const hour of hours) {
    const snapshot = await withTransaction(pool, (tx) => replacePartition(tx, pipeline, hour));
    rows += snapshot.rows;
  }
  return { seconds: (performance.now() - started) / 1000, rows };
}

/** A staged partition of the pipeline's store: $1 backfill, $2 generation, $3 hour, as reconcile takes them. */
export interface StagedPartition {
  store: RowStore;
  run: [number, number, Date];
  /** Its rows: the run's own staged table or the store's shared one, or (published by swap) the prior partition the swap saved. */
  source: RowSource;
}

/**
 * The latest backfill's staged rows of `hour`, if any backfill staged it. A swap's staged table is the live
 * partition once published: the detached prior partition stands in for it (the same shape and size of work).
 */
export async function findStagedPartition(pool: Pool, pipeline: Pipeline, hour: Date): Promise<StagedPartition | undefined> {
  const store = await rowStoreOf(pool, pipeline);
  // Staged apart (a rewrite of an hour that is not small): the run's own staged table.
  const { rows: apart } = await pool.query<{ backfill: number }>(
    `SELECT backfill_id::int AS backfill FROM backfill.backfill_targets WHERE partition_hour = $1::timestamptz AND staged_apart ORDER BY backfill_id DESC LIMIT 1`, [hour]);
  const apartRun = apart[0] && ([apart[0].backfill, STAGED_RUN, hour] as [number, number, Date]);
  if (apartRun) return { store, run: apartRun, source: runSource(store, rewriteTablesOf(store, apartRun, true).staged) };
  const { rows } = await pool.query<{ backfill: number; generation: number }>(
    `SELECT bf_backfill AS backfill, bf_generation AS generation FROM ${store.staged} WHERE ${store.partition} = $1::timestamptz
     ORDER BY bf_backfill DESC, bf_generation DESC LIMIT 1`, [hour]);
  const found = rows[0];
  if (found) return { store, run: [found.backfill, found.generation, hour], source: runSource(store, store.staged) };
  const { rows: swapped } = await pool.query<{ backfill: number; table: string }>(
    `SELECT backfill_id::int AS backfill, saved_table AS table FROM backfill.preserved_partitions
     WHERE partition_hour = $1::timestamptz AND to_regclass(saved_table) IS NOT NULL ORDER BY backfill_id DESC LIMIT 1`, [hour]);
  const saved = swapped[0];
  return saved ? { store, run: [saved.backfill, 1, hour], source: tableSource(store, saved.table) } : undefined;
}

/**
 * reconcileByKey of the live partition against its staged rows, in a transaction with nested loops off
 * (preferHashJoins), as staging runs it (within measureStaged, whose one join also takes the plan's rows as a
 * third side for the envelope; that side is left out here, so the figure stays one of two sides against one scan
 * of both). Only the reconciliation statement is timed.
 */
export async function timeReconcile(pool: Pool, staged: StagedPartition): Promise<{ seconds: number; result: Reconciliation }> {
  return withTransaction(pool, async (tx) => {
    await preferHashJoins(tx);
    const started = performance.now();
    const result = await reconcileByKey(tx, staged.store, staged.run, liveSource(staged.store), staged.source);
    return { seconds: (performance.now() - started) / 1000, result };
  });
}

/** What reconciliation is measured against: one scan of each side, `SELECT count(*), sum(measure)`. */
export async function timeScanBothSides(pool: Pool, staged: StagedPartition): Promise<{ seconds: number; liveRows: number; stagedRows: number }> {
  const { store, run } = staged;
  return withClient(pool, async (client) => {
    const started = performance.now();
    const live = await client.query<{ n: number }>(
      `SELECT count(*)::int AS n, sum(t.${store.measure}) AS total FROM ${store.target} t WHERE t.${store.partition} = $1::timestamptz`, [run[2]]);
    const inStore = await client.query<{ n: number }>(`SELECT count(*)::int AS n, sum(t.${store.measure}) AS total FROM ${staged.source}`, run);
    return { seconds: (performance.now() - started) / 1000, liveRows: live.rows[0]?.n ?? 0, stagedRows: inStore.rows[0]?.n ?? 0 };
  });
}
