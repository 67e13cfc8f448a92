import { findSwappedPartition } from '../../db/lineage.js';
import { snapshotPartition, type PartitionSnapshot } from '../../db/partitions.js';
import type { Pipeline } from '../../db/pipelines.js';
import { quoteIdent, type PoolClient, type Queryable } from '../../db/pool.js';
import { reconcileByKey, type Reconciliation } from '../../db/reconcile.js';
import { storeSchemaName, tableSource, type RowSource, type RowStore } from '../../db/rowStore.js';
import {
  addConstraintUsingIndex, analyzeTable, carryLateRowsIntoSaved, carryLateRowsIntoStaged, countRows, createMirroredIndex, createStagedTable,
  explainHourQuery, findExactHourBound, insertStepRowsInto, isAttachedPartition, isPartitionedTable, keepKeysIn, listTargetIndexes, lockForSwap,
  readNestloopSetting, setLocalNestloop, swapTables, type HourPartition, type PlanNode,
} from '../../db/swap.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { formatHour, HOUR_MS } from '../time.js';

/*
 * Publish by swap, for a target declaratively partitioned by its partition column with one partition per hour.
 *
 *   stage    the step's rows go into a table of their own in the pipeline's store, shaped like the target, with
 *            a CHECK that holds exactly the hour (so ATTACH need not scan it) and the target's indexes built
 *            after the load (so the publish builds none);
 *   publish  under the partition lock: writers of the target wait (EXCLUSIVE; readers go on) while the late
 *            rows are carried, the keys written recorded and the outcome measured; then, in a window of
 *            catalog changes only (ACCESS EXCLUSIVE: readers wait too), the live partition is detached and
 *            moved into the store as the saved prior generation, and the staged table takes its name and place;
 *   rollback swaps them back the same way, carrying rows written after the publish (late rows) into the prior
 *            partition first, so they stay live as they do when a rewrite is rolled back.
 *
 * A plain table, or partitions wider than an hour, are published by rewrite (stagePublish.ts). The statements
 * are in src/db/swap.ts.
 */

/**
 * The leaf partition of the target whose bounds are exactly [hour, hour + 1 h), when the target is range
 * partitioned on the partition column alone; undefined otherwise (publish by rewrite).
 */
export async function hourPartitionOf(db: Queryable, pipeline: Pipeline, hour: Date): Promise<HourPartition | undefined> {
  const candidate = await partitionHolding(db, pipeline, hour);
  if (!candidate) return undefined;
  // PERF: a step's transaction plans without nested loops (preferHashJoins); over the catalogs that means hash
  // joins of whole pg_attribute and pg_class, a second on a month of hourly partitions. Index lookups here.
  const nestloop = await readNestloopSetting(db);
  if (nestloop === 'off') await setLocalNestloop(db, true);
  try {
    return await boundOfExactlyTheHour(db, pipeline, hour, candidate);
  } finally {
    if (nestloop === 'off') await setLocalNestloop(db, false);
  }
}

async function boundOfExactlyTheHour(db: Queryable, pipeline: Pipeline, hour: Date, candidate: string): Promise<HourPartition | undefined> {
  const row = await findExactHourBound(db, pipeline, hour, candidate);
  return row && { ...row, qualified: `${quoteIdent(row.schema)}.${quoteIdent(row.name)}` };
}

/**
 * The one partition a query of the hour would read, as the planner prunes to it; undefined for a plain table.
 * PERF: asking the planner is a lookup in the cached partition bounds; deparsing every partition's bound
 * (pg_get_expr) opens each of them, and took 0.4 s on a month of hourly partitions.
 */
async function partitionHolding(db: Queryable, pipeline: Pipeline, hour: Date): Promise<string | undefined> {
  if (!(await isPartitionedTable(db, pipeline))) return undefined;
  const scanned = scannedRelations(await explainHourQuery(db, pipeline, hour));
  return scanned.length === 1 ? scanned[0] : undefined;
}

function scannedRelations(node: PlanNode | undefined): string[] {
  if (!node) return [];
  const own = node['Relation Name'] && node.Schema ? [`${quoteIdent(node.Schema)}.${quoteIdent(node['Relation Name'])}`] : [];
  return [...own, ...(node.Plans ?? []).flatMap(scannedRelations)];
}

/** 2026111503: hours sort by name in the store. */
export function hourCode(hour: Date): string {
  return hour.toISOString().slice(0, 13).replace(/[-T]/g, '');
}

export function stagedTableName(backfillId: number, generation: number, hour: Date): string {
  return `p${hourCode(hour)}_b${backfillId}_g${generation}`;
}

export function savedTableName(backfillId: number, hour: Date): string {
  return `p${hourCode(hour)}_b${backfillId}_saved`;
}

/**
 * The keys of one run of one hour, each in a table of its own without an index (a hash join reads them whole):
 * the live keys when it was staged (late rows are the ones not there), and the keys its publish wrote (a
 * rollback tells them from rows written after it). PERF: copying 50,000 keys into the store's shared tables,
 * whose btree on (backfill, generation, hour, key) grows with every row, took about 190 ms; into a table of
 * their own, under 90 ms.
 */
export const baselineTableName = (backfillId: number, generation: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_g${generation}_baseline`;
export const writtenTableName = (backfillId: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_written`;

const inStore = (store: RowStore, name: string) => `${store.schema}.${quoteIdent(name)}`;

/** Keeps the keys of `source` (a RowSource with the run's parameters) in the store table `name`, made anew. */
async function keepKeys(tx: PoolClient, store: RowStore, name: string, source: RowSource, run: [number, number, Date]): Promise<void> {
  await keepKeysIn(tx, store, inStore(store, name), source, run);
}

/** The live keys of the hour when it is staged for a swap: what its publish compares against for late rows. */
export async function keepBaseline(tx: PoolClient, store: RowStore, run: [number, number, Date], live: RowSource): Promise<void> {
  await keepKeys(tx, store, baselineTableName(...run), live, run);
}

const CHECK_VIOLATION = '23514';
const UNIQUE_VIOLATION = '23505';
const IN_HOUR = 'bf_in_hour';

/**
 * Runs the step into a new table of the store for this run and hour, shaped like the target and constrained to
 * the hour. Returns its name, and its qualified, quoted name. A re-run of the same stage starts the table over.
 */
export async function stageIntoTable(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date]): Promise<{ name: string; qualified: string }> {
  const hour = run[2];
  const name = stagedTableName(...run);
  const table = inStore(store, name);
  await refuseIfAttached(tx, table);
  await createStagedTable(tx, store, table, IN_HOUR, hour, new Date(hour.getTime() + HOUR_MS));
  try {
    await insertStepRowsInto(tx, store, table, hour);
  } catch (error) {
    const pgError = error as { code?: string; constraint?: string };
    if (pgError.code !== CHECK_VIOLATION || pgError.constraint !== IN_HOUR) throw error;
    throw new BackfillError(ErrorCode.StepFailed,
      `the ${pipeline.name} step produced rows for ${formatHour(hour)} that are not in that hour: ` +
      `it must produce only rows whose ${pipeline.partitionColumn} is $1. Nothing was changed.`, { cause: error });
  }
  return { name, qualified: table };
}

async function refuseIfAttached(db: Queryable, table: string): Promise<void> {
  if (await isAttachedPartition(db, table)) {
    throw new BackfillError(ErrorCode.StepFailed, `${table} is already attached to the target: this run's partition was published, so it is not staged again`);
  }
}

/**
 * Builds on the staged table every index the target has (the parent's partitioned indexes), so ATTACH adopts
 * them instead of building them while the target is locked; then analyzes it, so the partition it becomes has
 * statistics from its first query (autovacuum may be off).
 */
export async function indexLikeTarget(tx: PoolClient, pipeline: Pipeline, store: RowStore, table: string, tableName: string): Promise<void> {
  const indexes = await listTargetIndexes(tx, store);
  for (const [n, index] of indexes.entries()) {
    const name = quoteIdent(`${tableName}_i${n + 1}`);
    const mirrored = index.def.replace(/^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ USING /, (_all, unique: string | undefined) => `CREATE ${unique ?? ''}INDEX ${name} ON ${table} USING `);
    if (mirrored === index.def) {
      throw new BackfillError(ErrorCode.StepFailed, `the index ${index.name} of ${pipeline.targetTable} cannot be built on a staged partition (${index.def}): publish by swap needs plain names`);
    }
    try {
      await createMirroredIndex(tx, mirrored);
    } catch (error) {
      if ((error as { code?: string }).code !== UNIQUE_VIOLATION) throw error;
      throw new BackfillError(ErrorCode.StepFailed, `the staged rows of ${tableName} break the unique index ${index.name} of ${pipeline.targetTable}: fix the step. Nothing was changed.`, { cause: error });
    }
    // ATTACH adopts an index for a primary key or unique constraint only from a constraint of the same kind:
    // without one it would build another index while readers wait.
    if (index.constraint) await addConstraintUsingIndex(tx, table, name, index.constraint);
  }
  await analyzeTable(tx, table);
}

/** Where a partition published by swap went, and what it measured, for the caller to record. */
export interface SwapOutcome {
  savedRows: number;
  lateRows: number;
  published: Reconciliation;
  snapshot: PartitionSnapshot;
  savedTable: string;
  publishedTable: string;
  /** How long the catalog changes took, while readers of the target waited (the commit adds its own few ms). */
  swapMs: number;
}

/** Hooks a test uses to measure or act inside the window where readers of the target wait. */
export interface SwapHooks {
  onSwapWindow?(milliseconds: number): void;
}

/**
 * Publishes the staged table in place of the live hour partition, inside the caller's transaction (which then
 * checks the fence and the claim, and commits). The caller holds the partition lock.
 */
export async function publishBySwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], staged: string, hooks: SwapHooks = {}): Promise<SwapOutcome> {
  const hour = run[2];
  await lockForSwap(tx, store);
  const live = await hourPartitionOf(tx, pipeline, hour);
  if (!live) {
    throw new BackfillError(ErrorCode.StepFailed, `${pipeline.targetTable} has no partition of exactly ${formatHour(hour)} any more: it was staged for a swap, so it is not published. Nothing was changed.`);
  }
  await refuseIfAttached(tx, staged);
  const lateRows = await carryLateRowsIntoStaged(tx, store, run, { live: live.qualified, staged, baseline: inStore(store, baselineTableName(...run)) });
  await recordWrittenKeys(tx, store, run, staged);
  const published = await reconcileByKey(tx, store, run, tableSource(store, live.qualified), tableSource(store, staged));
  const savedRows = await countRows(tx, live.qualified);
  const snapshot = await snapshotPartition(tx, pipeline, hour, staged);
  const savedName = savedTableName(run[0], hour);
  const started = performance.now();
  await swapTables(tx, store, { out: live, outTo: { schema: storeSchemaName(pipeline.name), name: savedName }, inTable: staged, hour, next: new Date(hour.getTime() + HOUR_MS) });
  const swapMs = performance.now() - started;
  hooks.onSwapWindow?.(swapMs);
  return { savedRows, lateRows, published, snapshot, savedTable: inStore(store, savedName), publishedTable: live.qualified, swapMs };
}

/** The keys this publish writes (staged and carried): a rollback checks that nobody else changed those rows. */
async function recordWrittenKeys(tx: PoolClient, store: RowStore, run: [number, number, Date], staged: string): Promise<void> {
  await keepKeys(tx, store, writtenTableName(run[0], run[2]), tableSource(store, staged), run);
}

/** A partition a backfill published by swap: the prior partition it keeps, and the name the published one took. */
export interface SwappedPartition {
  savedTable: string;
  publishedTable: string;
  rowsSaved: number;
  /** The keys its publish wrote (writtenTableName). */
  writtenTable: string;
}

export async function swappedPartition(db: Queryable, store: RowStore, backfillId: number, hour: Date): Promise<SwappedPartition | undefined> {
  const row = await findSwappedPartition(db, backfillId, hour);
  return row && { ...row, writtenTable: inStore(store, writtenTableName(backfillId, hour)) };
}

/**
 * Swaps a published partition back out, inside the caller's rollback transaction (which holds the partition
 * lock, and the target's lockForSwap, taken before it read anything): rows written after the publish (late rows) are carried into the saved partition first, so they stay
 * live; then the saved partition takes its name and place again, and the published one goes back to the store.
 * Returns the rows put back.
 */
export async function restoreBySwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], swapped: SwappedPartition): Promise<number> {
  const hour = run[2];
  const live = await hourPartitionOf(tx, pipeline, hour);
  if (live?.qualified !== swapped.publishedTable) {
    throw new BackfillError(ErrorCode.WrongState,
      `${formatHour(hour)}: the partition backfill #${run[0]} attached (${swapped.publishedTable}) is no longer the live one (${live?.qualified ?? 'none'}); nothing was changed`);
  }
  await refuseIfAttached(tx, swapped.savedTable);
  const late = await carryLateRowsIntoSaved(tx, store, run, { live: live.qualified, saved: swapped.savedTable, written: swapped.writtenTable });
  const putBack = await countRows(tx, swapped.savedTable);
  if (putBack !== swapped.rowsSaved + late) {
    throw new BackfillError(ErrorCode.StepFailed,
      `restoring ${formatHour(hour)} would put back ${putBack} rows, not the ${swapped.rowsSaved} saved and ${late} written since; nothing was changed`);
  }
  await swapTables(tx, store, { out: live, outTo: { schema: storeSchemaName(pipeline.name), name: `p${hourCode(hour)}_b${run[0]}_rolledback` }, inTable: swapped.savedTable, hour, next: new Date(hour.getTime() + HOUR_MS) });
  return swapped.rowsSaved;
}
