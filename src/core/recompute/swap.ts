import { findSwappedPartition } from '../../db/lineage.js';
import type { PartitionSnapshot } from '../../db/partitions.js';
import type { Pipeline } from '../../db/pipelines.js';
import { quoteIdent, undoneIfRefused, type PoolClient, type Queryable } from '../../db/pool.js';
import { reconcileWithSnapshot, type Reconciliation } from '../../db/reconcile.js';
import { keysCompareExactly, nothingChanged, preferHashJoins, storeSchemaName, tableSource, type CountedAtStaging, type RowStore } from '../../db/rowStore.js';
import {
  addConstraintUsingIndex, analyzeStagedTable, carryLateRowsIntoSaved, carryLateRowsIntoStaged, countRows, createMirroredIndex, createStagedTable, createWrittenByDifference,
  beginPublishTry, explainHourQuery, takeSwapTurn, findDefaultPartition, findExactHourBound, insertStepRowsInto, isAttachedPartition, isPartitionedTable, keepKeysIn, listTargetIndexes, liveChangesSince, liveUnchangedSince,
  lockTableShared, readLockTimeoutMs, readNestloopSetting, readTargetShape, setLocalNestloop, swapTables, tryTableLocks, undoPublishTry, keepPublishTry, type HourPartition, type PlanNode, type TableLock, type TargetIndex, type TargetShape,
} from '../../db/swap.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { formatHour, HOUR_MS } from '../time.js';
import { baselineTable, inStore, rolledBackTableName, savedTableName, stagedTableName, writtenTableName } from './storeTables.js';
import { hasSqlState, SqlState } from '../../db/sqlState.js';

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
 *
 * Locks. A swap takes every lock it needs before it detaches anything, always in this order:
 *   0. the target's turn to swap (takeSwapTurn, an advisory lock of the transaction)       its turn
 *   1. the store's table it swaps in (the staged one; the saved ones on rollback, by name)  ACCESS EXCLUSIVE
 *      (a probe: the target and the live partition of the hour ACCESS EXCLUSIVE, given back as soon as
 *      granted: nobody holds them now)
 *   2. the target (the partitioned parent), and the live partition of the hour             EXCLUSIVE
 *      ... late rows carried, written keys kept, outcome measured (readers of the target go on) ...
 *   3. the target                                                                          ACCESS EXCLUSIVE
 *   4. the live partition of the hour                                                      ACCESS EXCLUSIVE
 *   5. the target's default partition, if it has one                                       ACCESS EXCLUSIVE
 * A publish locks the target itself (LOCK TABLE ONLY) and, by name, the one partition it swaps out: a lock of the
 * target alone keeps out every query through it, and a stage of another hour, which reads that hour's partition by
 * name (stagingReads), holds up no publish. A rollback locks the target with every partition (no ONLY).
 * The turn comes first: swaps of one target (the publishes of a backfill's wave, a rollback) queue on it, each
 * woken when the one before commits, instead of meeting in their lock tries below, where a swap that finds the
 * target held pauses before it tries again. It is taken after the partition lock and holds nothing of any table,
 * so only other swaps of the target wait on it. PERF: four publishes at once at 50,000 rows an hour lost about
 * 100 ms of a 30 ms swap in a failed try and its pause (the server's log). The store's table comes next, so
 * someone reading it (an analyst, a BI tool) holds up the swap alone, never the target; the parent comes before
 * its partitions, as every query of the target locks them. Then DETACH,
 * the moves and ATTACH wait for nothing (swapTables says what each takes). Each lock is taken in tries
 * (lockTries): a short lock_timeout, 50 ms then doubling up to 1 s, a jittered pause between tries, all within
 * the session's lock_timeout (LOCK_TIMEOUT_MS); a try that is not granted in time rolls back to its savepoint,
 * which withdraws its request, so an ACCESS EXCLUSIVE request never stays queued in front of readers for longer
 * than one try. A long reader of the target is waited out by the probe, which holds nothing of the target
 * between its tries, so writers go on too; a reader that arrives while the publish measures fails step 3's one
 * try, and the publish gives back everything since step 2 (a savepoint) and starts again from the probe. A
 * rollback does the same, for all its swapped partitions at once (lockForRestore). What the locks cost (the time
 * spent taking them, the tries) is reported with the publish, and with the rollback.
 */

/**
 * The leaf partition of the target whose bounds are exactly [hour, hour + 1 h), when the target is range
 * partitioned on the partition column alone; undefined otherwise (publish by rewrite).
 */
export async function hourPartitionOf(db: Queryable, pipeline: Pipeline, hour: Date): Promise<HourPartition | undefined> {
  const candidate = await partitionHolding(db, pipeline, hour);
  if (!candidate) return undefined;
  return withNestedLoops(db, () => boundOfExactlyTheHour(db, pipeline, hour, candidate));
}

/**
 * PERF: a step's transaction plans without nested loops (preferHashJoins); over the catalogs that means hash
 * joins of whole pg_attribute and pg_class, a second on a month of hourly partitions. Index lookups here.
 */
async function withNestedLoops<T>(db: Queryable, read: () => Promise<T>): Promise<T> {
  const nestloop = await readNestloopSetting(db);
  if (nestloop === 'off') await setLocalNestloop(db, true);
  try {
    return await read();
  } finally {
    if (nestloop === 'off') await setLocalNestloop(db, false);
  }
}

/** What a stage for a swap reads of the partitioned target (stagingReads). */
export interface StagingReads {
  /** The live partition of the hour, held ACCESS SHARE: staging reads the live rows from it, not through the target. */
  live: HourPartition;
  shape: TargetShape;
  indexes: TargetIndex[];
}

const TARGET_READ = 'bf_target_read';

/**
 * The store with the hour's live partition in the target's place, for the statements of a stage that read the live
 * rows or copy their key columns' types (liveSource, createKeysTable): they then lock that partition alone.
 */
export const overPartition = (store: RowStore, live: HourPartition): RowStore => ({ ...store, target: live.qualified });

/**
 * The hour's live partition, the target's shape and its indexes, for a stage by swap, read so that the stage
 * holds no lock on the target (the partitioned parent) when they are done: a publish by swap takes the target
 * ACCESS EXCLUSIVE for its catalog window, and a lock on it held by a stage, which keeps its locks until it
 * commits, would make every swap wait for every stage. They are read in a subtransaction rolled back at once,
 * which gives back the locks taken in it (planning the hour's query locks the target; deparsing the shape's
 * expressions does from PostgreSQL 16); then the live partition alone is locked, and checked to be still the
 * target's partition of exactly the hour. Undefined when the target has no such partition (publish by rewrite).
 * test/core/overlap.test.ts holds a stage without a lock on the target, and a swap committing beside it.
 */
export async function stagingReads(tx: PoolClient, pipeline: Pipeline, store: RowStore, hour: Date): Promise<StagingReads | undefined> {
  if (!(await isPartitionedTable(tx, pipeline))) return undefined;
  let read: Omit<StagingReads, 'live'> & { candidate: string | undefined };
  // Planned with nested loops, as hourPartitionOf's lookups (withNestedLoops): the rollback gives the setting back.
  await tx.query(`SAVEPOINT ${TARGET_READ}; SET LOCAL enable_nestloop = on`);
  try {
    read = { candidate: await plannedPartition(tx, pipeline, hour), shape: await readTargetShape(tx, store.target), indexes: await listTargetIndexes(tx, store) };
  } finally {
    await tx.query(`ROLLBACK TO SAVEPOINT ${TARGET_READ}; RELEASE SAVEPOINT ${TARGET_READ}`);
  }
  const { candidate, shape, indexes } = read;
  if (!candidate) return undefined;
  // Its bound is read once it is held: between the two, another transaction could have swapped this hour's partition.
  await lockTableShared(tx, candidate);
  const live = await withNestedLoops(tx, () => boundOfExactlyTheHour(tx, pipeline, hour, candidate));
  return live && { live, shape, indexes };
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
  return plannedPartition(db, pipeline, hour);
}

/** partitionHolding, of a target known to be partitioned. */
async function plannedPartition(db: Queryable, pipeline: Pipeline, hour: Date): Promise<string | undefined> {
  const scanned = scannedRelations(await explainHourQuery(db, pipeline, hour));
  return scanned.length === 1 ? scanned[0] : undefined;
}

function scannedRelations(node: PlanNode | undefined): string[] {
  if (!node) return [];
  const own = node['Relation Name'] && node.Schema ? [`${quoteIdent(node.Schema)}.${quoteIdent(node['Relation Name'])}`] : [];
  return [...own, ...(node.Plans ?? []).flatMap(scannedRelations)];
}

const IN_HOUR = 'bf_in_hour';

/**
 * Runs the step into a new table of the store for this run and hour, of the target's shape (read by stagingReads)
 * and constrained to the hour. Returns its name, and its qualified, quoted name. A re-run of the same stage starts
 * the table over.
 */
export async function stageIntoTable(tx: PoolClient, pipeline: Pipeline, store: RowStore, reads: StagingReads, run: [number, number, Date]): Promise<{ name: string; qualified: string }> {
  const hour = run[2];
  const name = stagedTableName(...run);
  const table = inStore(store, name);
  await refuseIfAttached(tx, table);
  await createStagedTable(tx, store, reads.shape, table, IN_HOUR, hour, new Date(hour.getTime() + HOUR_MS));
  try {
    await insertStepRowsInto(tx, store, table, hour);
  } catch (error) {
    if (!hasSqlState(error, SqlState.CheckViolation) || (error as { constraint?: unknown }).constraint !== IN_HOUR) throw error;
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
 * them instead of building them while the target is locked; then analyzes it (at a lower target: analyzeStagedTable),
 * so the partition it becomes has statistics from its first query (autovacuum may be off).
 */
export async function indexLikeTarget(tx: PoolClient, pipeline: Pipeline, indexes: readonly TargetIndex[], table: string, tableName: string): Promise<void> {
  for (const [n, index] of indexes.entries()) {
    const name = quoteIdent(`${tableName}_i${n + 1}`);
    const mirrored = index.def.replace(/^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ USING /, (_all, unique: string | undefined) => `CREATE ${unique ?? ''}INDEX ${name} ON ${table} USING `);
    if (mirrored === index.def) {
      throw new BackfillError(ErrorCode.StepFailed, `the index ${index.name} of ${pipeline.targetTable} cannot be built on a staged partition (${index.def}): publish by swap needs plain names`);
    }
    try {
      await createMirroredIndex(tx, mirrored);
    } catch (error) {
      if (!hasSqlState(error, SqlState.UniqueViolation)) throw error;
      throw new BackfillError(ErrorCode.StepFailed, `the staged rows of ${tableName} break the unique index ${index.name} of ${pipeline.targetTable}: fix the step. Nothing was changed.`, { cause: error });
    }
    // ATTACH adopts an index for a primary key or unique constraint only from a constraint of the same kind:
    // without one it would build another index while readers wait.
    if (index.constraint) await addConstraintUsingIndex(tx, table, name, index.constraint);
  }
  await analyzeStagedTable(tx, table);
}

/**
 * indexLikeTarget before the staged rows are measured, so that their unique indexes prove no key repeats in them
 * (keysUniqueByIndexes) and the measure need not count distinct keys. False, with nothing built, where a unique
 * index refuses the rows: the measure then counts them as ever and finds the repeated keys (a breach), or, where
 * the rows repeat no key of the pipeline's, the caller builds the indexes again after it, which refuses the step.
 */
export async function indexLikeTargetFirst(tx: PoolClient, pipeline: Pipeline, indexes: readonly TargetIndex[], table: string, tableName: string): Promise<boolean> {
  const tried = await undoneIfRefused(tx, 'index_like_target', () => indexLikeTarget(tx, pipeline, indexes, table, tableName),
    (error) => error instanceof BackfillError && hasSqlState(error.cause, SqlState.UniqueViolation));
  return tried.done;
}

/** How long one try waits for a lock it is not granted, first and at most: short, so readers queued behind it pass soon. */
const FIRST_LOCK_WAIT_MS = 50;
const MAX_LOCK_WAIT_MS = 1_000;

/** What taking a swap's locks cost: the time spent in its tries and the pauses between them (not the work between), and the tries. */
export interface LockWait {
  lockWaitMs: number;
  lockTries: number;
}

/** A lock wait as the timeline reports it (a publish's recomputed event, a rollback's rolled_back): milliseconds to 0.1. */
export function reportedLockWait(wait: LockWait): LockWait {
  return { lockWaitMs: Math.round(wait.lockWaitMs * 10) / 10, lockTries: wait.lockTries };
}

/** The tries of one swap's locks: one budget (the session's lock_timeout, LOCK_TIMEOUT_MS), one count, one wait. */
interface LockTries {
  /**
   * Takes `locks` in their order, try after try, until all are held; past the budget, a retryable Timeout
   * naming the table that was held. `probe`: given back as soon as granted (is the target free now?); `once`:
   * one try only, false at once when it was not granted (the caller gives back what it holds before trying again).
   */
  take(locks: readonly TableLock[], options?: { probe?: boolean; once?: boolean }): Promise<boolean>;
  /**
   * Waits for the target's turn to swap (step 0 of the order), counted in the wait; past the session's
   * lock_timeout PostgreSQL cancels it, a retryable Timeout as for any lock (explainCancellation, src/db/pool.ts).
   */
  turn(target: string): Promise<void>;
  /** The time spent in take and turn so far, and the tries. */
  spent(): LockWait;
}

async function lockTries(tx: PoolClient, what: string, hooks: SwapHooks): Promise<LockTries> {
  const budgetMs = await readLockTimeoutMs(tx);
  let tries = 0;
  let waitMs = FIRST_LOCK_WAIT_MS;
  let spentMs = 0;
  return {
    async take(locks, options = {}) {
      const started = performance.now();
      try {
        for (;;) {
          tries += 1;
          const left = budgetMs > 0 ? budgetMs - spentMs - (performance.now() - started) : Number.POSITIVE_INFINITY;
          const outcome = await tryTableLocks(tx, locks, Math.min(waitMs, left), { release: options.probe === true, restoreMs: budgetMs });
          if (outcome.held) return true;
          const waitedMs = spentMs + performance.now() - started;
          hooks.onLockWait?.({ tries, waitedMs, waitingOn: outcome.waitingOn });
          // Jittered, so swaps retrying side by side do not meet again at the same moment.
          const pauseMs = waitMs * (0.5 + Math.random() / 2);
          if (budgetMs > 0 && waitedMs + pauseMs >= budgetMs) {
            throw new BackfillError(ErrorCode.Timeout,
              `${what} could not take its locks within LOCK_TIMEOUT_MS (${budgetMs} ms): another transaction held ${outcome.waitingOn} ` +
              `through ${tries} tries, each waiting at most ${MAX_LOCK_WAIT_MS} ms, so no request of the swap stayed queued in front of others for longer. Nothing was changed; ` +
              `it can be retried, and pg_locks shows who holds ${outcome.waitingOn}.`,
              { retryable: true, details: { lockWaitMs: Math.round(waitedMs), lockTries: tries, waitingOn: outcome.waitingOn } });
          }
          waitMs = Math.min(waitMs * 2, MAX_LOCK_WAIT_MS);
          // The caller gives back what it holds first; its next take is the pause.
          if (options.once) return false;
          await new Promise((resolve) => setTimeout(resolve, pauseMs));
        }
      } finally {
        spentMs += performance.now() - started;
      }
    },
    async turn(target) {
      const started = performance.now();
      try {
        await takeSwapTurn(tx, target);
      } finally {
        spentMs += performance.now() - started;
      }
    },
    spent: () => ({ lockWaitMs: spentMs, lockTries: tries }),
  };
}

const exclusive = (table: string): TableLock => ({ table, mode: 'ACCESS EXCLUSIVE' });
const writersOut = (table: string): TableLock => ({ table, mode: 'EXCLUSIVE' });

/**
 * The target itself, not its partitions: a publish locks the partition it swaps out by name, and no other, so a
 * stage reading another hour's partition does not hold it up (stagingReads). A rollback locks the target whole.
 */
const targetOnly = (lock: TableLock): TableLock => ({ ...lock, only: true });

/**
 * Steps 3 to 5 of the order, for the DETACH … ATTACH window: the target (`only`: itself alone), the live
 * partitions (a rollback's all at once), the default partition.
 */
async function catalogLocks(tx: PoolClient, store: RowStore, live: readonly HourPartition[], options: { only?: boolean } = {}): Promise<TableLock[]> {
  const defaultPartition = await findDefaultPartition(tx, store);
  const partitions = [...new Set(live.map((p) => p.qualified))].sort();
  const target = exclusive(store.target);
  return [options.only ? targetOnly(target) : target, ...partitions.map(exclusive), ...(defaultPartition ? [exclusive(defaultPartition)] : [])];
}

/** A partition a rollback puts back by swap, once lockForRestore holds every lock: its run, what it keeps, the live partition it replaces. */
export interface SwapBack {
  run: [number, number, Date];
  swapped: SwappedPartition;
  live: HourPartition;
}

/**
 * Every lock of a rollback by swap, in the swap's order ("Locks"), for all its swapped partitions at once, and
 * what must be done while writers of the target are out: the saved tables it swaps back in; then, once nobody
 * holds the target (a probe), the target EXCLUSIVE, `whileWritersOut` (the caller's checks that nobody changed
 * what the publish wrote), the late rows carried into each saved partition, and one try at steps 3 to 5 (the
 * target, every live partition, the default one). A reader that holds the target makes that try fail: everything
 * since the probe is given back at a savepoint (the EXCLUSIVE, the carried rows), so writers of every hour go on
 * instead of waiting behind the rollback's retries, and it starts again from the probe; the checks and the carry
 * run again, over what writers did meanwhile. Taken after the partition locks and before the rollback reads the
 * target at all (a swap that held a reader's lock on it while it queued for this one would deadlock with the
 * next swap). Returns what restoreBySwap swaps back, and the real wait.
 */
export async function lockForRestore(tx: PoolClient, pipeline: Pipeline, store: RowStore, swaps: readonly { run: [number, number, Date]; swapped: SwappedPartition }[],
  whileWritersOut: () => Promise<void>, hooks: SwapHooks = {}): Promise<{ backs: SwapBack[]; lockWait: LockWait }> {
  const backfillId = swaps[0]?.run[0];
  const locking = await lockTries(tx, `The rollback of backfill #${backfillId ?? '?'}`, hooks);
  await locking.turn(store.target);
  await locking.take([...new Set(swaps.map((s) => s.swapped.savedTable))].sort().map(exclusive));
  for (;;) {
    // Until nobody holds the target: waiting here holds nothing of it, so its readers and writers go on.
    await locking.take([exclusive(store.target)], { probe: true });
    // The same savepoint as a publish's try (src/db/swap.ts): rolled back to, it gives back the locks and the rows since.
    await beginPublishTry(tx);
    await locking.take([writersOut(store.target)]);
    await whileWritersOut();
    const backs: SwapBack[] = [];
    for (const { run, swapped } of swaps) backs.push({ run, swapped, live: await carryIntoSaved(tx, pipeline, store, run, swapped) });
    await hooks.beforeCatalogLocks?.();
    if (await locking.take(await catalogLocks(tx, store, backs.map((back) => back.live)), { once: true })) {
      await keepPublishTry(tx);
      return { backs, lockWait: locking.spent() };
    }
    await undoPublishTry(tx);
  }
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
  /** What taking the swap's locks cost (the real wait before swapMs). */
  lockWait: LockWait;
}

/** Hooks a test uses to measure or act inside the window where readers of the target wait. */
export interface SwapHooks {
  onSwapWindow?(milliseconds: number): void;
  /** Between the measuring and the one try at steps 3 to 5 (a test lets a reader in there). */
  beforeCatalogLocks?(): Promise<void>;
  /** A try at the swap's locks was not granted in time: its number, the time since the first, the table held. */
  onLockWait?(attempt: { tries: number; waitedMs: number; waitingOn: string }): void;
}

/**
 * Publishes the staged table in place of the live hour partition, inside the caller's transaction (which then
 * checks the backfill's state and the step's claim, and commits). The caller holds the partition lock.
 */
export async function publishBySwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], staged: string, atStaging: MeasuredAtStaging | undefined,
  hooks: SwapHooks = {}): Promise<SwapOutcome> {
  const hour = run[2];
  await refuseIfAttached(tx, staged);
  if ((await isAttachedPartition(tx, staged)) === undefined) {
    throw new BackfillError(ErrorCode.StepFailed, `${staged} does not exist: it was dropped since it was staged. Nothing was changed.`);
  }
  const locking = await lockTries(tx, `The swap of ${formatHour(hour)}`, hooks);
  // Steps 0 and 1 of the order ("Locks"), before the transaction reads the target at all.
  await locking.turn(store.target);
  await locking.take([exclusive(staged)]);
  // Found once: only a swap of the target changes its partitions, and this one holds the target's turn.
  const live = await requireHourPartition(tx, pipeline, hour);
  for (;;) {
    // Until nobody holds the target or the hour's partition (read by name): waiting here holds nothing of either,
    // so their readers and writers go on.
    await locking.take([targetOnly(exclusive(store.target)), exclusive(live.qualified)], { probe: true });
    await beginPublishTry(tx);
    // Writers out of the target and of the hour's partition (one may write into it by name); those of other
    // partitions by name go on, as do stages reading them.
    await locking.take([targetOnly(writersOut(store.target)), writersOut(live.qualified)]);
    const measured = await measureSwap(tx, store, run, staged, live, atStaging);
    await hooks.beforeCatalogLocks?.();
    // One try at steps 3 to 5; a reader that came meanwhile makes it give back everything since the savepoint
    // (writers wait no longer either), and start again.
    if (await locking.take(await catalogLocks(tx, store, [measured.live], { only: true }), { once: true })) {
      await keepPublishTry(tx);
      return swapCatalog(tx, pipeline, store, run, staged, measured, locking.spent(), hooks);
    }
    await undoPublishTry(tx);
  }
}

/** What a swap measures before its catalog changes, with the target held against writers: the late rows carried, the written keys kept. */
interface SwapMeasures {
  live: HourPartition;
  lateRows: number;
  published: Reconciliation;
  savedRows: number;
  snapshot: PartitionSnapshot;
}

/**
 * What staging measured of a partition staged for a swap, and kept (migrations/0028): the reconciliation of the
 * live rows then against the staged ones, how many live rows there were, and the staged rows' snapshot. Staging
 * also kept the baseline (the live keys the staged rows lack) and recorded the written keys (stageIntoTable's caller).
 */
export interface MeasuredAtStaging {
  reconciliation: Reconciliation;
  liveRows: number;
  /** The xmin of the snapshot staging read the live rows in (migrations/0029); null for a partition staged before it kept one. */
  liveSnapshotXmin: string | null;
  /** The writers of the live rows staging read at or above that xmin (migrations/0031); null where none were kept. */
  liveVersionsSeen: string[] | null;
  staged: PartitionSnapshot;
}

/**
 * Under the target's EXCLUSIVE (no writer can change the live partition until the commit): when staging measured
 * the partition and nothing live changed since (liveUnchangedSince: no row version written by a transaction that had
 * not finished when staging read the partition, and as many rows as it counted), the live partition is exactly the
 * rows staging compared, and the staged table exactly the rows it measured (the store's own, written by nobody
 * else), so its figures are the publish's: one scan of the live partition instead of the late rows' carry, the
 * written keys and a join of both sides with the checksum. Otherwise (late rows, rows another writer changed, or a
 * partition staged before staging measured it) the late rows are carried, the written keys recorded again and both
 * sides measured anew.
 */
async function requireHourPartition(tx: PoolClient, pipeline: Pipeline, hour: Date): Promise<HourPartition> {
  const live = await hourPartitionOf(tx, pipeline, hour);
  if (!live) {
    throw new BackfillError(ErrorCode.StepFailed, `${pipeline.targetTable} has no partition of exactly ${formatHour(hour)} any more: it was staged for a swap, so it is not published. Nothing was changed.`);
  }
  return live;
}

async function measureSwap(tx: PoolClient, store: RowStore, run: [number, number, Date], staged: string, live: HourPartition, atStaging: MeasuredAtStaging | undefined): Promise<SwapMeasures> {
  if (atStaging && await unchangedSinceStaging(tx, store, run, live.qualified, atStaging)) {
    return { live, lateRows: 0, published: atStaging.reconciliation, savedRows: atStaging.liveRows, snapshot: atStaging.staged };
  }
  const lateRows = await carryLateRowsIntoStaged(tx, store, run, { live: live.qualified, staged, baseline: baselineTable(store, run) });
  await recordWrittenKeys(tx, store, run, staged);
  // The partition swapped out is the rows saved; the staged table with the carried rows, the snapshot published.
  const measured = await reconcileWithSnapshot(tx, store, run, tableSource(store, live.qualified), tableSource(store, staged));
  return { live, lateRows, published: measured.reconciliation, savedRows: measured.beforeRows, snapshot: measured.after };
}

/** What staging counted of the live rows, as liveUnchangedSince and saveAndDeleteSince compare the live partition with it. */
export const countedAtStaging = (atStaging: Pick<MeasuredAtStaging, 'liveRows' | 'liveVersionsSeen'>, snapshotXmin: string): CountedAtStaging =>
  ({ snapshotXmin, rows: atStaging.liveRows, versionsSeen: atStaging.liveVersionsSeen });

/**
 * Whether the live partition is exactly the rows staging compared. PERF: by the snapshot staging read them in, one
 * scan of the partition (liveUnchangedSince); the join of its keys and row versions with the baseline took 130–180 ms
 * a publish at 200,000 rows, under the target's lock, one publish after the other. A partition staged before staging
 * kept its snapshot is compared with the baseline.
 */
async function unchangedSinceStaging(tx: PoolClient, store: RowStore, run: [number, number, Date], live: string, atStaging: MeasuredAtStaging): Promise<boolean> {
  if (atStaging.liveSnapshotXmin !== null) {
    return liveUnchangedSince(tx, store, run, live, countedAtStaging(atStaging, atStaging.liveSnapshotXmin));
  }
  return nothingChanged(await liveChangesSince(tx, store, run, { live, baseline: baselineTable(store, run) }));
}

/** The catalog changes, every lock held. */
async function swapCatalog(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], staged: string, measured: SwapMeasures, lockWait: LockWait, hooks: SwapHooks): Promise<SwapOutcome> {
  const hour = run[2];
  const { live, lateRows, published, savedRows, snapshot } = measured;
  const savedName = savedTableName(run[0], hour);
  const started = performance.now();
  await swapTables(tx, store, { out: live, outTo: { schema: storeSchemaName(pipeline.name), name: savedName }, inTable: staged, hour, next: new Date(hour.getTime() + HOUR_MS) });
  const swapMs = performance.now() - started;
  hooks.onSwapWindow?.(swapMs);
  return { savedRows, lateRows, published, snapshot, savedTable: inStore(store, savedName), publishedTable: live.qualified, swapMs, lockWait };
}

/**
 * The run's written table by difference, made empty for staging's one join to fill (createWrittenByDifference):
 * the keys a publish of the staged table writes, told against the live partition it will swap out. Returns it,
 * qualified and quoted.
 *
 * Only where every key column's `=` holds exactly when the text is the same (RowStore.exact): the difference
 * names the written keys by the saved partition's spelling, and under a case-insensitive collation 'EU' = 'eu'
 * (or 1.0 = 1.00 in an unconstrained numeric), so a rollback would name a key another writer changed as it was
 * before the publish, not as the publish wrote it. Otherwise every staged key is copied with its row version now,
 * as a publish that finds the partition changed records them (recordWrittenKeys), and undefined is returned:
 * nothing is left for the join to fill.
 */
export async function createWrittenTable(tx: PoolClient, store: RowStore, run: [number, number, Date], staged: string): Promise<string | undefined> {
  const table = inStore(store, writtenTableName(run[0], run[2]));
  if (!keysCompareExactly(store)) {
    await keepKeysIn(tx, store, table, tableSource(store, staged), run, { rowVersions: true });
    return undefined;
  }
  await createWrittenByDifference(tx, store, table);
  return table;
}

/**
 * Every key a publish of `staged` writes (staged, and carried at publish), with its row version: a rollback checks
 * that nobody else changed those rows. Recorded by a publish that finds the live partition changed since staging
 * (and carries late rows); staging records them by difference (createWrittenTable).
 */
async function recordWrittenKeys(tx: PoolClient, store: RowStore, run: [number, number, Date], staged: string): Promise<void> {
  await keepKeysIn(tx, store, inStore(store, writtenTableName(run[0], run[2])), tableSource(store, staged), run, { rowVersions: true });
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
 * Rows written after the publish (late rows) carried into the saved partition, so they stay live when it is swapped
 * back; under the target's EXCLUSIVE (lockForRestore), so no writer adds one meanwhile. Returns the live partition.
 */
async function carryIntoSaved(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], swapped: SwappedPartition): Promise<HourPartition> {
  const hour = run[2];
  const live = await hourPartitionOf(tx, pipeline, hour);
  if (!live || live.qualified !== swapped.publishedTable) {
    throw new BackfillError(ErrorCode.WrongState,
      `${formatHour(hour)}: the partition backfill #${run[0]} attached (${swapped.publishedTable}) is no longer the live one (${live?.qualified ?? 'none'}); nothing was changed`);
  }
  await refuseIfAttached(tx, swapped.savedTable);
  // As for every join of the store's tables in a step's transaction (rowStore.ts); undone with the try when it is.
  await preferHashJoins(tx);
  const late = await carryLateRowsIntoSaved(tx, store, run, { live: live.qualified, saved: swapped.savedTable, written: swapped.writtenTable });
  const putBack = await countRows(tx, swapped.savedTable);
  if (putBack !== swapped.rowsSaved + late) {
    throw new BackfillError(ErrorCode.StepFailed,
      `restoring ${formatHour(hour)} would put back ${putBack} rows, not the ${swapped.rowsSaved} saved and ${late} written since; nothing was changed`);
  }
  return live;
}

/**
 * Swaps a published partition back out, inside the caller's rollback transaction, which holds the partition lock
 * and every lock of the swap (lockForRestore, which also carried the late rows into the saved partition): the
 * saved partition takes its name and place again, and the published one goes back to the store. Catalog changes
 * only. Returns the rows put back.
 */
export async function restoreBySwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, back: SwapBack): Promise<number> {
  const { run, swapped, live } = back;
  const hour = run[2];
  await swapTables(tx, store, { out: live, outTo: { schema: storeSchemaName(pipeline.name), name: rolledBackTableName(run[0], hour) }, inTable: swapped.savedTable, hour, next: new Date(hour.getTime() + HOUR_MS) });
  return swapped.rowsSaved;
}
