import type { BackfillRow } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import { insertNextGeneration, insertPreservedPartition } from '../../db/lineage.js';
import { markPartitionBackfilled } from '../../db/partitionLog.js';
import { lockPartitionPreferringHashJoins, type PartitionSnapshot } from '../../db/partitions.js';
import { requirePipeline, type Pipeline } from '../../db/pipelines.js';
import { withStatementSeam, type PoolClient, type Queryable } from '../../db/pool.js';
import { againstPlan, measureStaged, reconcileWritten, type AgainstPlan, type Reconciliation } from '../../db/reconcile.js';
import { findStagedReconciliation, saveReconciliation, type StagedReconciliation } from '../../db/reconciliations.js';
import {
  countLiveRows, insertRunRowsIntoTarget, saveAndDeleteComparing, saveAndDeletePrior, saveAndDeleteSince, stageStepRows, storesRowsAsInserted, writeRunRows, type RewriteTables, type RowsWritten,
} from '../../db/rewrite.js';
import { dropStoreTable, liveSource, runSource, STAGED_RUN, tableSource, type RowSource, type RowStore } from '../../db/rowStore.js';
import { findPublishTarget, markTargetPublished, markTargetStaged, markTargetUnavailable, setTargetBreach, type PublishTargetRow } from '../../db/targets.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { toCents } from '../money.js';
import { sourceShards } from './partitionStep.js';
import { rowStoreOf } from './rowStore.js';
import { pauseCaughtSteps } from '../lifecycle/pause.js';
import type { StepRef } from '../lifecycle/stepGraph.js';
import {
  countedAtStaging, createWrittenTable, indexLikeTarget, indexLikeTargetFirst, overPartition, publishBySwap, reportedLockWait, stageIntoTable, stagingReads, type LockWait, type MeasuredAtStaging, type StagingReads, type SwapHooks,
} from './swap.js';
import { createBaseline, createRewriteTables, keepBaseline, keptBaseline, rewriteTablesOf, stagedRowsLost, versionedBaseline } from './storeTables.js';
import { formatHour } from '../time.js';
import { keysUniqueByIndexes } from '../../db/uniqueKeys.js';

// Stage, reconcile, then publish: the write path of a backfill since it became recoverable.
//
// stage   runs the pipeline's own step query into staging (typed like the target), and the live keys of that
//         moment it lacks into the baseline. An hour that is not small (SWAP_MIN_ROWS) is staged into a table of the
//         run's own: shaped like the target for a publish to swap in, when the target has a partition of
//         exactly this hour (swap.ts), else shaped like the store's shared staged table, beside a saved table
//         of its own for the rewrite (storeTables.ts). A small hour is staged into the shared staged table;
// publish replaces the live partition from staging in one transaction, under the same per-partition lock as
//         the normal run: by rewrite (DELETE … RETURNING into the run's saved table, INSERT … SELECT from staging)
//         or by swap (DETACH the live partition into the store, ATTACH the staged table); rows that arrived
//         after the baseline (late rows from normal ingestion) are carried into the published generation; and
//         the fence (the backfill's state, then the step's claim token, each under its row lock) is read inside
//         that transaction just before it commits.

const ENGINE = 'backfill-bot';

export type StageOutcome = 'staged' | 'unavailable';

/**
 * Builds one partition into staging: the step's own query runs into the pipeline's staged table, and the live
 * keys of that moment it lacks into the baseline. Nothing live changes, and no row leaves PostgreSQL.
 */
export async function stagePartition(tx: PoolClient, backfill: BackfillRow, hour: Date, how: StageHow): Promise<StageOutcome> {
  const pipeline = await requirePipeline(tx, backfill.pipeline);
  const shards = await sourceShards(tx, pipeline, hour);
  if (shards < pipeline.shardsExpected) {
    // No source, no corrected history: the partition is left as it is and the diff says so.
    await markTargetUnavailable(tx, backfill.id, hour);
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'unavailable', detail: { partition: formatHour(hour), shards, shardsExpected: pipeline.shardsExpected } });
    return 'unavailable';
  }
  await lockPartitionPreferringHashJoins(tx, pipeline.name, hour);
  const store = await rowStoreOf(tx, pipeline);
  const run: [number, number, Date] = [backfill.id, STAGED_RUN, hour];
  const target = await findPublishTarget(tx, backfill.id, hour);
  const again = 'again' in how ? how.again : undefined;
  const apart = 'again' in how || stagedApart(target, how.swapMinRows);
  // The publish tells late rows by the baseline's keys, and whether anything changed by staging's snapshot (by
  // swap measureSwap, by rewrite saveAndDeleteSince), or where the measure was not exact by the row versions kept
  // with every key (liveChangesSince, saveAndDeleteComparing), as for a partition staged before migration 0029.
  // A partition to publish by swap is staged without a lock on the target, so the swaps of earlier hours go on
  // beside it: the live rows are read from the hour's partition itself (stagingReads, overPartition).
  const reads = apart && !again ? await stagingReads(tx, pipeline, store, hour) : undefined;
  const live = reads ? overPartition(store, reads.live) : store;
  const baseline = await createBaseline(tx, live, run);
  const staged = reads ? await stageForSwap(tx, pipeline, store, reads, run) : await stageForRewrite(tx, pipeline, store, run, apart);
  // Every check of the partition in one statement; the staged rows and the plan's stay as they are until the
  // publish, which reads these figures.
  // With the live rows it counted, which the publish reads when nothing live changed since (and for a swap the
  // staged rows' checksum: swap.ts, measureSwap).
  // And the live keys the staged rows lack into the baseline (createBaseline), or every live key where the join is not exact.
  // For a swap, the keys its publish will write, by difference with the live keys (createWrittenTable; copied
  // where keys equal by `=` can be spelled apart).
  const swap = reads && staged.table ? { reads, table: staged.table } : undefined;
  const written = swap ? await createWrittenTable(tx, live, run, swap.table.qualified) : undefined;
  // For a swap, the target's indexes first: where each side's keys are proven once (the live partition's and the
  // staged table's unique indexes, the plan's expected_keys_once), the measure counts no distinct keys.
  const indexed = swap ? await indexLikeTargetFirst(tx, pipeline, swap.reads.indexes, swap.table.qualified, swap.table.name) : false;
  const keysOnce = swap && indexed ? await keysProvenOnce(tx, pipeline, target, [swap.reads.live.qualified, swap.table.qualified]) : false;
  const { reconciliation: result, plan, exact } = await measureStaged(tx, store, run, liveSource(live), staged.source, {
    // The staged rows' checksum, which a publish takes as that of the rows it writes (swap: measureSwap; rewrite:
    // rewriteUnchanged). Not for a small hour: its publish checksums what it inserts in the same statement, where
    // the look in the catalog that lets it take staging's (storesRowsAsInserted) would cost more than the hash.
    snapshot: apart,
    baseline: { table: baseline, keepWhole: () => keepBaseline(tx, store, run, liveSource(live), { rowVersions: true }) },
    written,
    keysOnce,
    // Not for a small hour: there one statement more costs more than the join with its plan.
    planKeysOnce: apart && target?.expectedKeysOnce === true,
  });
  // Duplicate keys block the publish (a breach); the target's unique indexes would refuse them here instead. Where
  // a unique index refused the rows before the measure and no key of the pipeline's repeats, this refuses the step.
  if (swap && !indexed && result.keysDuplicated === 0) await indexLikeTarget(tx, pipeline, swap.reads.indexes, swap.table.qualified, swap.table.name);
  // Not exact: nothing was measured to publish by, so a publish records every key it writes (measureSwap).
  if (written && !exact) await dropStoreTable(tx, written);
  await saveReconciliation(tx, backfill.id, STAGED_RUN, hour, 'staged', result, 0, plan, exact && { liveRows: exact.liveRows, stagedChecksum: exact.staged?.checksum ?? null, liveSnapshotXmin: exact.liveSnapshotXmin, liveVersionsSeen: exact.liveVersionsSeen });
  await markTargetStaged(tx, backfill.id, hour, { table: staged.table?.qualified ?? null, apart: apart && !staged.table });
  await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'staged', detail: { partition: formatHour(hour), publishBy: staged.table ? 'swap' : 'rewrite', ...result, ...(again ? { again: again.why } : {}) } });
  return 'staged';
}

/**
 * Whether no side of the hour's measure can hold a key twice: the plan's rows were kept with each key once (start,
 * expected_keys_once) and every relation has a unique index over the partition and key columns alone.
 */
async function keysProvenOnce(tx: PoolClient, pipeline: Pipeline, target: PublishTargetRow | undefined, relations: string[]): Promise<boolean> {
  if (target?.expectedKeysOnce !== true) return false;
  return keysUniqueByIndexes(tx, relations, [pipeline.partitionColumn, ...pipeline.keyColumns]);
}

/** An hour staged again by its publish, the same way as before (by rewrite, into tables of its own), and why. */
interface StagedAgain {
  why: string;
}

/** How a stage step stages (small hours by rewrite into the shared tables, SWAP_MIN_ROWS), or a publish again. */
export type StageHow = { swapMinRows: number } | { again: StagedAgain };

const STAGED_ROWS_LOST = 'its staged rows were gone: PostgreSQL empties an unlogged table when it recovers from a crash';

/**
 * Staged into tables of the run's own (by swap, where the target has a partition of exactly this hour) when the
 * partition is not small: it holds, or the preview expects, at least swapMinRows rows (SWAP_MIN_ROWS). A preview
 * that did not count the hour's rows expects any number, so it is not small. PERF: at 60 rows an hour a stage
 * and publish by swap took 44 + 102 ms, by rewrite 29 + 25 ms: a swap's fixed cost is its catalog changes (a
 * table, its index, DETACH and ATTACH) and its wait for every stage. By whole backfills of 24 hours, rewrite was
 * the faster up to 5,000 rows an hour, even at 10,000, and 25% slower at 50,000 (docs/benchmark.md). A rewrite's
 * own tables cost their creation likewise (storeTables.ts, rewriteTablesOf).
 */
function stagedApart(target: PublishTargetRow | undefined, swapMinRows: number): boolean {
  if (swapMinRows === 0) return true;
  if (!target || target.expectedRows === null) return true;
  return Math.max(target.rowsBefore, Number(target.expectedRows)) >= swapMinRows;
}

interface Staged {
  source: RowSource;
  /** The table of its own the partition was staged into, for a publish by swap. */
  table?: { qualified: string; name: string };
}

/**
 * The step's rows into the run's staged table (its own when `apart`, else the shared one), checked to be all in
 * the hour.
 */
async function stageForRewrite(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], apart: boolean): Promise<Staged> {
  const hour = run[2];
  const tables = rewriteTablesOf(store, run, apart);
  if (apart) await createRewriteTables(tx, store, tables);
  const staged = await stageStepRows(tx, store, tables.staged, run);
  if (staged.produced !== staged.inHour) {
    throw new BackfillError(ErrorCode.StepFailed,
      `the ${pipeline.name} step produced ${staged.produced} rows for ${formatHour(hour)} but only ${staged.inHour} of them are in that hour: ` +
      `it must produce only rows whose ${pipeline.partitionColumn} is $1. Nothing was changed.`);
  }
  return { source: runSource(store, tables.staged) };
}

/** The step's rows into a table of its own, to be swapped in for the hour's partition (swap.ts). */
async function stageForSwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, reads: StagingReads, run: [number, number, Date]): Promise<Staged> {
  const table = await stageIntoTable(tx, pipeline, store, reads, run);
  return { source: tableSource(store, table.qualified), table };
}

/** published: `rows` is how many rows the partition holds live now; `swap`, what a publish by swap cost (ms, rounded to 0.1). */
export type PublishOutcome = { kind: 'published'; generation: number; rows: number; swap?: SwapCost } | { kind: 'unavailable'; generation?: undefined } | { kind: 'breach'; reason: string };

/** Hooks for tests that must act between a publish's writes and its commit (a stop, a late writer). */
export interface PublishHooks extends SwapHooks {
  beforeFenceCheck?(backfillId: number, hour: Date): Promise<void>;
  /** After each statement of the publish, from its first read to its last write (another writer commits there). */
  afterStatement?(backfillId: number, hour: Date, statement: string): Promise<void>;
}

/**
 * Replaces the live partition from staging, inside the caller's transaction (which then checks the backfill's
 * state and the step's claim, and commits). Returns a breach instead, having written nothing, when the staged data holds
 * duplicate keys or a difference the plan did not predict and nobody accepted this partition by name.
 *
 * By rewrite, the prior rows are saved by the same statement that deletes them (DELETE … RETURNING), so every
 * row the publish removes is saved, whoever committed it and whenever; a row committed after that statement's
 * snapshot is not deleted and stays live: a late row, which a rollback leaves alone. By swap, writers wait on
 * the target from the carrying of late rows to the commit, so the detached partition is exactly what was live.
 */
export async function publishPartition(client: PoolClient, backfill: BackfillRow, hour: Date, hooks: PublishHooks = {}): Promise<PublishOutcome> {
  const seam = hooks.afterStatement;
  const tx = withStatementSeam(client, seam && (async (statement) => seam(backfill.id, hour, statement)));
  const pipeline = await requirePipeline(tx, backfill.pipeline);
  const target = await targetRow(tx, backfill.id, hour);
  if (target.status === 'unavailable') return { kind: 'unavailable' };
  const store = await rowStoreOf(tx, pipeline);
  const run: [number, number, Date] = [backfill.id, STAGED_RUN, hour];
  let staged = await findStagedReconciliation(tx, backfill.id, STAGED_RUN, hour);
  // Rows staged for a rewrite in a table of their own are not in the WAL (createRewriteTables): after a crash the
  // hour is staged again here, in this transaction, and checked against the envelope as any staging is.
  if (await stagedRowsLost(tx, store, run, { apart: target.stagedApart, table: target.stagedTable, rows: staged?.plan?.stagedRows })) {
    if (await stagePartition(tx, backfill, hour, { again: { why: STAGED_ROWS_LOST } }) === 'unavailable') return { kind: 'unavailable' };
    staged = await findStagedReconciliation(tx, backfill.id, STAGED_RUN, hour);
  }
  // A partition staged before the envelope was measured at staging (migrations/0026) is measured here.
  const plan = staged?.plan ?? await againstPlan(tx, store, run, target.stagedTable ? tableSource(store, target.stagedTable) : runSource(store, rewriteTablesOf(store, run, target.stagedApart).staged));
  const reason = envelopeBreach(staged, target, plan, backfill.previewedBy);
  if (reason) return { kind: 'breach', reason: `${formatHour(hour)}: ${reason}` };

  await lockPartitionPreferringHashJoins(tx, pipeline.name, hour);
  const written = target.stagedTable
    ? await swapIn(tx, pipeline, store, run, target.stagedTable, measuredAtStaging(staged), hooks)
    : await rewrite(tx, store, run, target.stagedApart, rewriteAtStaging(staged), plan.stagedRows);
  await saveReconciliation(tx, backfill.id, STAGED_RUN, hour, 'published', written.published, written.lateRows);
  const partitionGeneration = await recordGeneration(tx, pipeline.name, hour, backfill.id);
  const { snapshot, lateRows } = written;
  await markTargetPublished(tx, backfill.id, hour, snapshot, written.rowsWritten, partitionGeneration);
  await markPartitionBackfilled(tx, pipeline.name, hour, snapshot.rows);
  if (lateRows > 0) await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'late_rows_kept', detail: { partition: formatHour(hour), rows: lateRows } });
  await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'recomputed',
    detail: { partition: formatHour(hour), generation: partitionGeneration, rowsBefore: target.rowsBefore, rowsAfter: snapshot.rows, totalBefore: target.totalBefore, totalAfter: snapshot.total,
      checksum: snapshot.checksum, lateRows, publishedBy: target.stagedTable ? 'swap' : 'rewrite', ...written.swap } });
  await hooks.beforeFenceCheck?.(backfill.id, hour);
  return { kind: 'published', generation: partitionGeneration, rows: snapshot.rows, ...(written.swap ? { swap: written.swap } : {}) };
}

/**
 * What a publish by swap cost: the catalog changes (readers of the target waited that long), and before them
 * the real wait for the swap's locks, with the tries it took (swap.ts, "Locks").
 */
interface SwapCost {
  swapMs: number;
  lockWaitMs: number;
  lockTries: number;
}

const tenths = (ms: number) => Math.round(ms * 10) / 10;
const swapCost = (swapMs: number, lockWait: LockWait): SwapCost => ({ swapMs: tenths(swapMs), ...reportedLockWait(lockWait) });

interface Written {
  published: Reconciliation;
  lateRows: number;
  /** What the partition holds once written (the diff's figures): other writers' rows committed meanwhile too. */
  snapshot: PartitionSnapshot;
  /** What this publish itself wrote: what a rollback checks nobody changed since. */
  rowsWritten: Pick<RowsWritten, 'rows' | 'checksum'>;
  swap?: SwapCost;
}

/**
 * Publish by rewrite: the live rows are deleted into the saved rows, the staged ones inserted, late rows carried.
 * Other writers go on meanwhile: a row one of them commits after the DELETE's snapshot is neither deleted nor
 * among the rows written (writeRunRows counts what its own INSERT returned), so it stays a late row for good.
 * Where staging measured the partition (`atStaging`), the delete tells in the same statement whether it removed
 * exactly the rows staging compared, by the snapshot staging read them in (saveAndDeleteSince; for a partition
 * staged before it kept one, by the baseline's keys and row versions: saveAndDeleteComparing); then
 * nothing is late and, unless another writer's row is live beside the written ones, staging's reconciliation is
 * the publish's (rewriteUnchanged).
 */
async function rewrite(tx: PoolClient, store: RowStore, run: [number, number, Date], apart: boolean, atStaging: RewriteAtStaging | undefined, stagedRows: number): Promise<Written> {
  const written = await rewriteRows(tx, store, run, apart, atStaging);
  // The rows written are the staged ones and the late ones: any other count means the staged rows are not what
  // staging counted (changed since, or an unlogged table emptied that stagedRowsLost did not see), and nothing
  // commits: the transaction rolls back, the step fails and is retried.
  const stagedWritten = written.rowsWritten.rows - written.lateRows;
  if (stagedWritten !== stagedRows) {
    throw new BackfillError(ErrorCode.StepFailed, `${formatHour(run[2])}: the publish wrote ${stagedWritten} staged rows where staging counted ${stagedRows}; nothing was changed`);
  }
  return written;
}

async function rewriteRows(tx: PoolClient, store: RowStore, run: [number, number, Date], apart: boolean, atStaging: RewriteAtStaging | undefined): Promise<Written> {
  const tables = rewriteTablesOf(store, run, apart);
  const compared = atStaging && await deleteComparedWithStaging(tx, store, run, tables, atStaging);
  if (atStaging && compared) {
    await savedOnce(tx, run, compared.rows, null);
    if (compared.unchanged) return rewriteUnchanged(tx, store, run, tables, atStaging);
    return writeAndMeasure(tx, store, run, tables, (await keptBaseline(tx, store, run)).source);
  }
  const rows = await saveAndDeletePrior(tx, store, tables.saved, run);
  await savedOnce(tx, run, rows, null);
  return writeAndMeasure(tx, store, run, tables, (await keptBaseline(tx, store, run)).source);
}

/**
 * The delete that saves the live rows, telling whether it removed exactly the rows staging compared: by the snapshot
 * staging read them in (saveAndDeleteSince; PERF: no join with the baseline, nor a look in the catalog for it), or
 * for a partition staged before it kept one (migrations/0029), by the baseline's keys and row versions
 * (saveAndDeleteComparing). Undefined, having deleted nothing, where neither can tell.
 */
async function deleteComparedWithStaging(tx: PoolClient, store: RowStore, run: [number, number, Date], tables: RewriteTables,
  atStaging: Omit<MeasuredAtStaging, 'staged'>): Promise<{ rows: number; unchanged: boolean } | undefined> {
  if (atStaging.liveSnapshotXmin !== null) return saveAndDeleteSince(tx, store, tables.saved, run, countedAtStaging(atStaging, atStaging.liveSnapshotXmin));
  const versioned = await versionedBaseline(tx, store, run);
  return versioned === undefined ? undefined : saveAndDeleteComparing(tx, store, tables.saved, run, versioned);
}

/** What staging measured for a rewrite: as for a swap, with the staged rows' snapshot where it took one (not before it did). */
type RewriteAtStaging = Omit<MeasuredAtStaging, 'staged'> & { staged?: PartitionSnapshot | undefined };

/**
 * The publish deleted exactly the rows staging measured (saveAndDeleteSince), so none of them is late: the
 * staged rows alone are written. When the live partition then holds only those (no other writer's row committed
 * since the delete's snapshot is visible beside them), it holds exactly the rows staging compared with what it
 * replaced, and staging's reconciliation is the publish's; otherwise both sides are measured, as by any publish.
 */
async function rewriteUnchanged(tx: PoolClient, store: RowStore, run: [number, number, Date], tables: RewriteTables, atStaging: RewriteAtStaging): Promise<Written> {
  const written = await writeStagedRows(tx, store, run, tables, atStaging.staged);
  if (await countLiveRows(tx, store, run) === written.rows) {
    return { published: atStaging.reconciliation, lateRows: 0, snapshot: { rows: written.rows, total: atStaging.reconciliation.totalAfter, checksum: written.checksum }, rowsWritten: written };
  }
  const measured = await reconcileWritten(tx, store, run, runSource(store, tables.saved), liveSource(store), written);
  return { published: measured.reconciliation, lateRows: 0, snapshot: measured.after, rowsWritten: written };
}

/**
 * The staged rows into the target, with their count and checksum. Where staging took the staged rows' checksum and
 * the target stores rows as inserted (storesRowsAsInserted), the rows written are the staged ones, so their
 * checksum is staging's: a plain INSERT. PERF: the INSERT that returns its rows to checksum them took 108–128 ms
 * against 76–83 ms at 42,000 rows in psql, where the checksum of the staged rows alone took 9–10 ms.
 */
async function writeStagedRows(tx: PoolClient, store: RowStore, run: [number, number, Date], tables: RewriteTables, staged: PartitionSnapshot | undefined): Promise<RowsWritten> {
  if (!staged || !(await storesRowsAsInserted(tx, store))) return writeRunRows(tx, store, tables, run, 'none');
  const rows = await insertRunRowsIntoTarget(tx, store, tables.staged, run);
  // The staged table is the run's, written only by staging: a count other than staging's means it changed since,
  // and the checksum would not be the written rows'. rewrite() refuses that count before anything commits.
  return { rows: rows ?? 0, lateRows: 0, checksum: staged.checksum };
}

/** The staged rows and the late ones (those not in `baseline`) written, then the saved rows against the live ones measured. */
async function writeAndMeasure(tx: PoolClient, store: RowStore, run: [number, number, Date], tables: RewriteTables, baseline: RowSource): Promise<Written> {
  const written = await writeRunRows(tx, store, tables, run, baseline);
  // The saved rows against the live ones, and the live partition's snapshot (late rows too), in one read of each;
  // its checksum is the written rows' unless other writers' rows are live beside them.
  const measured = await reconcileWritten(tx, store, run, runSource(store, tables.saved), liveSource(store), written);
  return { published: measured.reconciliation, lateRows: written.lateRows, snapshot: measured.after, rowsWritten: written };
}

/** Publish by swap (swap.ts): the live partition is detached into the store, the staged table attached. */
async function swapIn(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], staged: string, atStaging: MeasuredAtStaging | undefined, hooks: SwapHooks): Promise<Written> {
  const swap = await publishBySwap(tx, pipeline, store, run, staged, atStaging, hooks);
  await savedOnce(tx, run, swap.savedRows, { saved: swap.savedTable, published: swap.publishedTable });
  // Writers of the target waited from the carrying of late rows to the commit: the partition swapped in is
  // exactly what this publish wrote.
  return { published: swap.published, lateRows: swap.lateRows, snapshot: swap.snapshot, rowsWritten: swap.snapshot, swap: swapCost(swap.swapMs, swap.lockWait) };
}

/** What staging measured for a swap (migrations/0028), when it did: none for a partition staged before, or whose join was not exact. */
function measuredAtStaging(staged: StagedReconciliation | undefined): MeasuredAtStaging | undefined {
  const measured = rewriteAtStaging(staged);
  return measured?.staged && { ...measured, staged: measured.staged };
}

/**
 * What staging measured for a rewrite, when it did: as for a swap, with the staged rows' snapshot only where it took
 * their checksum (an hour staged apart: stagePartition).
 */
function rewriteAtStaging(staged: StagedReconciliation | undefined): RewriteAtStaging | undefined {
  if (!staged?.measured) return undefined;
  const { liveRows, liveSnapshotXmin, liveVersionsSeen, stagedChecksum } = staged.measured;
  const snapshot = stagedChecksum && staged.plan ? { rows: staged.plan.stagedRows, total: staged.totalAfter, checksum: stagedChecksum } : undefined;
  return { reconciliation: countsOf(staged), liveRows, liveSnapshotXmin, liveVersionsSeen, staged: snapshot };
}

/** The reconciliation's own figures of a kept one, without its late rows and what else staging kept beside them. */
function countsOf(staged: StagedReconciliation): Reconciliation {
  const { keysMissing, keysAdded, keysDuplicated, keysChanged, totalBefore, totalAfter } = staged;
  return { keysMissing, keysAdded, keysDuplicated, keysChanged, totalBefore, totalAfter };
}

/** Saved once: a second save of the same partition by the same backfill is refused by the primary key. */
async function savedOnce(tx: PoolClient, run: [number, number, Date], rows: number, tables: { saved: string; published: string } | null): Promise<void> {
  if (!(await insertPreservedPartition(tx, run[0], run[2], rows, tables))) {
    throw new BackfillError(ErrorCode.ClaimLost, `the prior rows of ${formatHour(run[2])} were already saved by backfill #${run[0]}: this second publish does not commit`);
  }
}

/** The next generation of this partition, kept with the backfill that wrote it (under the partition lock). */
async function recordGeneration(tx: PoolClient, pipeline: string, hour: Date, backfillId: number): Promise<number> {
  const generation = await insertNextGeneration(tx, pipeline, hour, backfillId);
  if (generation === undefined) throw new Error('generation insert returned no row');
  return generation;
}

/**
 * The publish of `ref` found its partition outside the envelope: in the caller's transaction the backfill
 * pauses (pauseCaughtSteps, which checks the claim first) and the partition's breach is recorded.
 */
export async function pauseForBreach(tx: PoolClient, ref: StepRef, token: string, reason: string): Promise<number> {
  const pause = await pauseCaughtSteps(tx, ref, token, 'breach', reason, { partition: formatHour(new Date(ref.key)) });
  await setTargetBreach(tx, ref.backfillId, new Date(ref.key), reason);
  return pause;
}

function envelopeBreach(staged: StagedReconciliation | undefined, target: PublishTargetRow, plan: AgainstPlan, previewedBy: 'estimate' | 'step'): string | undefined {
  if (!staged) return 'it was never staged';
  if (staged.keysDuplicated > 0) return `${staged.keysDuplicated} duplicate key(s) in the staged data: the publish is blocked`;
  if (target.acceptedBy) return undefined;
  if (staged.keysMissing > 0) return `${staged.keysMissing} key(s) would be lost, which the plan did not predict`;
  // An estimate gives the partition's rows and total, not its keys: those are the envelope then.
  if (previewedBy === 'estimate') {
    const sameRows = target.expectedRows === null || plan.stagedRows === Number(target.expectedRows);
    const sameTotal = target.expectedTotal === null || toCents(plan.stagedTotal) === toCents(target.expectedTotal);
    return sameRows && sameTotal ? undefined
      : `the staged partition has ${plan.stagedRows} rows totalling ${plan.stagedTotal}, not the estimated ${target.expectedRows ?? '?'} rows totalling ${target.expectedTotal ?? '?'}`;
  }
  if (plan.lost > 0) return `${plan.lost} row(s) the plan showed are gone from the staged data`;
  if (plan.planned > 0 && toCents(plan.stagedKnown) !== toCents(plan.expected)) {
    return `the staged total over the planned rows is ${plan.stagedKnown}, not the announced ${plan.expected}`;
  }
  return undefined;
}

async function targetRow(db: Queryable, backfillId: number, hour: Date): Promise<PublishTargetRow> {
  const row = await findPublishTarget(db, backfillId, hour);
  if (!row) throw new BackfillError(ErrorCode.StepFailed, `${formatHour(hour)} is not a target of backfill #${backfillId}`);
  return row;
}
