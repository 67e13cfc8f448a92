import type { RewriteTables } from '../../db/rewrite.js';
import { createKeysTable, keepKeysIn } from '../../db/swap.js';
import { quoteIdent, type PoolClient, type Queryable } from '../../db/pool.js';
import { runSource, tableSource, type RowSource, type RowStore } from '../../db/rowStore.js';

// The store's tables of their own, one per run and hour, beside its shared ones (src/db/rowStore.ts): named by
// the hour first, so that an hour's tables sort together in the store's schema.
//
//   p<hour>_b<id>_g<run>            the rows staged for a swap (swap.ts)
//   p<hour>_b<id>_g<run>_baseline   the live keys when the hour was staged, for either way of publishing
//   p<hour>_b<id>_saved             the partition a swap detached (the prior generation)
//   p<hour>_b<id>_written           the keys a swap wrote: by difference with the saved partition and one row version,
//                                   or each with its own (createWrittenByDifference, src/db/swap.ts)
//   p<hour>_b<id>_rolledback        the partition a rollback by swap detached
//   p<hour>_b<id>_g<run>_staged     the rows staged for a rewrite, shaped like the shared staged table
//   p<hour>_b<id>_g<run>_saved      the rows a publish by rewrite deleted, shaped like the shared saved table

/** 2026111503: hours sort by name in the store. */
function hourCode(hour: Date): string {
  return hour.toISOString().slice(0, 13).replace(/[-T]/g, '');
}

export const stagedTableName = (backfillId: number, generation: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_g${generation}`;
export const savedTableName = (backfillId: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_saved`;
export const writtenTableName = (backfillId: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_written`;
export const rolledBackTableName = (backfillId: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_rolledback`;
const baselineTableName = (backfillId: number, generation: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_g${generation}_baseline`;
const rewriteStagedName = (backfillId: number, generation: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_g${generation}_staged`;
const rewriteSavedName = (backfillId: number, generation: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_g${generation}_saved`;

/** A table of the store by its name: qualified and quoted. */
export const inStore = (store: RowStore, name: string) => `${store.schema}.${quoteIdent(name)}`;

/** The run's baseline table, qualified and quoted. */
export const baselineTable = (store: RowStore, run: [number, number, Date]) => inStore(store, baselineTableName(...run));

/**
 * The live keys of the hour when it is staged, whichever way it will be published: what its publish tells late
 * rows by (rows normal ingestion wrote since: their key is neither here nor staged), in a table of its own without
 * an index (a hash join reads it whole). Made empty here, before the measure; where staging's one join is exact,
 * that same statement puts in it the live keys the staged rows lack (measureStaged), the only ones a late-row test
 * can tell apart from staged keys, and otherwise keepBaseline copies every live key.
 */
export async function createBaseline(tx: PoolClient, store: RowStore, run: [number, number, Date]): Promise<string> {
  const table = baselineTable(store, run);
  await createKeysTable(tx, store, table);
  return table;
}

/**
 * Every live key of the hour into the run's baseline, made anew. PERF: copying 50,000 keys into the store's shared
 * baseline, whose btree on (backfill, generation, hour, key) grows with every row, took 120–190 ms; into a table of
 * their own, under 90 ms. `rowVersions`: with each row's xmin, by which a publish tells whether anything live
 * changed since (versionsAgainstBaseline) where staging kept no snapshot to tell it by.
 */
export async function keepBaseline(tx: PoolClient, store: RowStore, run: [number, number, Date], live: RowSource, options: { rowVersions?: boolean } = {}): Promise<void> {
  await keepKeysIn(tx, store, baselineTable(store, run), live, run, options);
}

/**
 * The run's baseline as a row source: its table of its own, or, for an hour staged before baselines had one
 * (or whose table retention dropped), the run's rows of the store's shared baseline (none, once dropped).
 * `ownTable`: the run kept one, which holds every key a late-row test needs even when it holds none.
 */
export async function keptBaseline(db: Queryable, store: RowStore, run: [number, number, Date]): Promise<{ source: RowSource; ownTable: boolean }> {
  const table = baselineTable(store, run);
  const { rows } = await db.query<{ own: boolean }>('SELECT to_regclass($1::text) IS NOT NULL AS own', [table]);
  return rows[0]?.own ? { source: tableSource(store, table), ownTable: true } : { source: runSource(store, store.baseline), ownTable: false };
}

/**
 * The run's baseline table when it was kept with row versions (bf_xmin, keepBaseline's rowVersions), as a publish
 * by rewrite compares what it deletes with it; undefined for an hour staged before, or whose table retention dropped.
 */
export async function versionedBaseline(db: Queryable, store: RowStore, run: [number, number, Date]): Promise<string | undefined> {
  const table = baselineTable(store, run);
  const { rows } = await db.query<{ versioned: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1::text) AND attname = 'bf_xmin' AND NOT attisdropped) AS versioned`, [table]);
  return rows[0]?.versioned ? table : undefined;
}

/**
 * Where a run published by rewrite keeps its rows (BackfillTargetRow.stagedApart says which, from its staging):
 * tables of its own, without an index (each is read whole, by a hash join or a scan), or the store's shared
 * staged and saved tables. PERF: at 50,000 rows an hour, inserting into the shared tables, whose btree on
 * (backfill, generation, hour, key) grows with every run, cost 99–133 ms per table and hour against 36–55 ms
 * without one; but making the two tables (a TOAST table each) cost 2.5 ms alone and about 10 ms with four
 * stages at once, more than a 60-row hour's whole SQL, so small hours keep to the shared ones (SWAP_MIN_ROWS).
 */
export function rewriteTablesOf(store: RowStore, run: [number, number, Date], apart: boolean): RewriteTables {
  return apart ? { staged: inStore(store, rewriteStagedName(...run)), saved: inStore(store, rewriteSavedName(...run)) } : { staged: store.staged, saved: store.saved };
}

/**
 * The run's rewrite tables, made when it is staged: its staged table anew (one of that name is dropped first),
 * and its saved table where missing. A saved table is never replaced: it holds rows only once a publish of the
 * run committed (one that rolled back left it empty), and a later publish of the run is refused (savedOnce), so
 * its rows are what a rollback puts back for as long as retention keeps them. Made here, not at publish, so the
 * publish, which holds the partition lock, changes no catalog.
 *
 * The staged table is UNLOGGED; the saved one is not. PERF: the staged rows are a copy the step can make again,
 * and writing them to the WAL as well was most of a stage's cost where the WAL is slow: at 50,000 × 24 plain the
 * whole backfill took 17.2–18.9 s with it, 13.0–16.9 s without (docs/benchmark.md). The price is that
 * PostgreSQL's crash recovery (and a standby's promotion, or a restore from a base backup) leaves such a table
 * empty: a publish finds its staged rows gone and stages the hour again first (stagedRowsLost), and a rollback
 * tells the rows the publish wrote without them (src/core/recovery/recovery.ts). The saved rows are the prior
 * state a rollback puts back, so they are written like the target's own.
 */
export async function createRewriteTables(tx: Queryable, store: RowStore, tables: RewriteTables): Promise<void> {
  const shaped = `(bf_backfill bigint NOT NULL, bf_generation integer NOT NULL, LIKE ${store.target})`;
  // One round trip (one simple-protocol string: names quoted, no outside text).
  await tx.query(`DROP TABLE IF EXISTS ${tables.staged}; CREATE UNLOGGED TABLE ${tables.staged} ${shaped}; CREATE TABLE IF NOT EXISTS ${tables.saved} ${shaped}`);
}

/**
 * Whether the run's staged rows for a rewrite are gone though staging wrote some: its table of its own is unlogged
 * (createRewriteTables), and PostgreSQL empties every unlogged table when it recovers from a crash. Never for
 * rows staged into the store's shared tables, or for a swap, whose tables are written to the WAL. The table is
 * emptied whole or not at all, so one row found is enough.
 */
export async function stagedRowsLost(db: Queryable, store: RowStore, run: [number, number, Date], staged: { apart: boolean; table: string | null; rows: number | undefined }): Promise<boolean> {
  if (!staged.apart || staged.table !== null || !staged.rows) return false;
  const { rows } = await db.query<{ lost: boolean }>(`SELECT NOT EXISTS (SELECT 1 FROM ${rewriteTablesOf(store, run, true).staged}) AS lost`);
  return rows[0]?.lost ?? false;
}
