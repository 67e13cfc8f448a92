import { findOverlappingActive, listTargets, requireBackfill, type BackfillRow, type BackfillTargetRow } from '../../db/backfills.js';
import { emitRunEvents } from '../lineage/emit.js';
import { recordEvent } from '../../db/events.js';
import { findRowsSaved, listLaterGenerations, markGenerationRolledBack } from '../../db/lineage.js';
import { requirePipeline, type Pipeline } from '../../db/pipelines.js';
import { withStatementSeam, withTransaction, type PoolClient, type StatementSeam } from '../../db/pool.js';
import { insertRollbackSteps } from '../../db/steps.js';
import { acceptTargets, markTargetRestored } from '../../db/targets.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { lockPartition, rowsChecksumLike } from '../../db/partitions.js';
import { changedSincePublish, checksumRows, deleteRowsChecked, insertRunRowsIntoTarget, writtenByPublish, type ChangedSincePublish } from '../../db/rewrite.js';
import { liveSource, preferHashJoins, STAGED_RUN, type RowSource, type RowStore } from '../../db/rowStore.js';
import { rowStoreOf } from '../recompute/rowStore.js';
import { keptBaseline, rewriteTablesOf, stagedRowsLost } from '../recompute/storeTables.js';
import { findStagedReconciliation } from '../../db/reconciliations.js';
import { refuseIfUndoPruned } from './retention.js';
import { advanceBackfill, moveSteps } from '../lifecycle/stepClaims.js';
import { keysChangedSinceSwap, writtenBySwap } from '../../db/swap.js';
import { lockForRestore, reportedLockWait, restoreBySwap, swappedPartition, type LockWait, type SwapBack, type SwappedPartition } from '../recompute/swap.js';
import { ROLLBACK_SUFFIX } from '../lifecycle/stepGraph.js';
import { finishBackfill, transition, wrongState } from '../lifecycle/stateMachine.js';
import { isCatalogPause, refuseIfCatalogChanged } from '../catalog/frozen.js';
import { formatHour, formatHourRange } from '../time.js';
import { hasSqlState, SqlState } from '../../db/sqlState.js';

/**
 * Stops a backfill for good: moves it to stopped under its row lock, which is the fence (every step's commit
 * reads the state under that lock, checkClaim, so a write either committed before the stop or rolls back),
 * skips every step not finished (a running one loses its claim, so its commit fails too), and records who and
 * why. Removing its queued jobs is the caller's part (the queue is not the core's).
 * A stopped backfill that published anything keeps holding its hours until it is rolled back.
 */
export async function stopBackfill(ctx: EngineContext, input: { backfillId: number; actor: string; reason: string }): Promise<BackfillRow> {
  if (!input.reason.trim()) throw new BackfillError(ErrorCode.BadInput, 'A stop needs a reason, e.g. "wrong step version deployed": the incident timeline keeps it.');
  const stopped = await fenceAndStop(ctx, input);
  // After the commit: a run that had started ends with ABORT for the lineage server. Never throws.
  await emitRunEvents(ctx, stopped.id);
  return stopped;
}

async function fenceAndStop(ctx: EngineContext, input: { backfillId: number; actor: string; reason: string }): Promise<BackfillRow> {
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    const moved = await finishBackfill(tx, {
      backfillId: backfill.id, event: 'stop', actor: input.actor,
      set: { stopped_by: input.actor, stop_reason: input.reason.trim(), finished_at: new Date() },
    });
    if (!moved) throw wrongState(backfill.id, backfill.state, 'only a backfill that is still in flight can be stopped');
    const skipped = await moveSteps(tx, backfill.id, 'skipped');
    await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'stopped', detail: { reason: input.reason.trim(), skipped } });
    return requireBackfill(tx, backfill.id);
  });
}

export interface ContinueInput {
  backfillId: number;
  actor: string;
  reason: string;
  /** The partitions accepted; none named means every partition now outside its envelope (listed in the event). */
  partitions?: Date[] | undefined;
}

/**
 * An operator looked at the reconciliation of a paused backfill and accepts the difference of the partitions
 * named (or of every partition now in breach, said out loud in the timeline): those are marked accepted, with
 * who and why, and nothing else is. The steps the pause blocked run again. A later partition outside its own
 * envelope pauses the backfill again. Duplicate keys are never accepted: that data is wrong, whatever anyone says.
 *
 * A backfill paused because its catalog changed has no difference to accept: once the catalog is what was
 * announced again, a continue with no partitions named accepts nothing (a partition still outside its envelope
 * pauses it again at its publish) and runs it on from where it paused; a replay's pause moves straight on to
 * replaying, its partitions all published.
 */
export async function continueBackfill(ctx: EngineContext, input: ContinueInput): Promise<BackfillRow & { accepted: Date[] }> {
  const reason = input.reason.trim();
  if (!reason) throw new BackfillError(ErrorCode.BadInput, 'Continuing past an unpredicted difference needs a reason: the timeline keeps it next to the difference.');
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    if (backfill.state !== 'paused') throw wrongState(backfill.id, backfill.state, 'only a paused backfill can be continued');
    // Never past a catalog changed since it was announced: what would run is not what was acknowledged.
    await refuseIfCatalogChanged(tx, backfill.id);
    const catalogPause = isCatalogPause(backfill);
    const accepted = catalogPause && !input.partitions?.length ? [] : await partitionsToAccept(tx, backfill, input.partitions);
    await acceptTargets(tx, backfill.id, accepted.map((t) => t.partitionHour), input.actor, reason);
    const resumed = await moveSteps(tx, backfill.id, 'pending', { from: ['blocked'] });
    await transition(tx, { backfillId: backfill.id, event: 'continue', actor: input.actor, set: { paused_reason: null, paused_for: null } });
    await advanceBackfill(tx, backfill.id);
    await recordEvent(tx, {
      backfillId: backfill.id, actor: input.actor, kind: 'continued',
      detail: { reason, accepted: accepted.map((t) => formatHour(t.partitionHour)), differences: accepted.map((t) => t.breach), resumed, ...(catalogPause ? { catalogAsAnnounced: true } : {}) },
    });
    return { ...(await requireBackfill(tx, backfill.id)), accepted: accepted.map((t) => t.partitionHour) };
  });
}

async function partitionsToAccept(tx: PoolClient, backfill: BackfillRow, named: Date[] | undefined): Promise<BackfillTargetRow[]> {
  const inBreach = (await listTargets(tx, backfill.id)).filter((t) => t.breach !== null);
  const list = inBreach.map((t) => formatHour(t.partitionHour)).join(', ') || 'none';
  const chosen = named === undefined || named.length === 0
    ? inBreach
    : named.map((hour) => {
      const target = inBreach.find((t) => t.partitionHour.getTime() === hour.getTime());
      if (!target) {
        throw new BackfillError(ErrorCode.BadInput, `${formatHour(hour)} of backfill #${backfill.id} is not outside its envelope, so there is nothing to accept there. Partitions that are: ${list}.`);
      }
      return target;
    });
  if (chosen.length === 0) {
    throw new BackfillError(ErrorCode.WrongState, `Backfill #${backfill.id} is paused but no partition is outside its envelope: stop it, or roll it back.`);
  }
  const duplicated = chosen.filter((t) => /duplicate key/.test(t.breach ?? ''));
  if (duplicated.length > 0) {
    throw new BackfillError(ErrorCode.WrongState,
      `Backfill #${backfill.id} has duplicate keys in its staged data (${duplicated.map((t) => formatHour(t.partitionHour)).join(', ')}): that cannot be accepted. Roll it back or stop it, fix the step, and start a new one.`);
  }
  return chosen;
}

/**
 * Restores, for every partition this backfill published, the generation before its own, in one transaction;
 * rows committed after its publish (late rows) stay. Refused, naming why and changing nothing, when a later
 * generation of one of its partitions stands (undo that one first), when another backfill is in flight over
 * its hours, or when another writer changed rows its publish wrote. Then the consumers replay in dependency
 * order and their owners are told, as for a backfill.
 */
export async function rollbackBackfill(ctx: EngineContext, input: { backfillId: number; actor: string; reason?: string | undefined }, seams: { afterStatement?: StatementSeam } = {}): Promise<{ backfill: BackfillRow; restored: Date[] }> {
  try {
    return await restoreInOneTransaction(ctx, input, seams.afterStatement);
  } catch (error) {
    // Another backfill started over these hours between the check and the move: the constraint said no.
    if (!hasSqlState(error, SqlState.ExclusionViolation)) throw error;
    const backfill = await requireBackfill(ctx.pool, input.backfillId);
    const other = await findOverlappingActive(ctx.pool, backfill.pipeline, backfill.firstHour, backfill.lastHour, backfill.id);
    throw new BackfillError(ErrorCode.Overlap,
      `Backfill #${backfill.id} cannot be rolled back while ${other ? `backfill #${other.id} (${other.state})` : 'another backfill'} is in flight over its hours; nothing was changed.`,
      { cause: error, details: { inFlight: other?.id } });
  }
}

function writtenDuringRollback(run: [number, number, Date], what: string, cause?: unknown): BackfillError {
  return new BackfillError(ErrorCode.WrongState,
    `Backfill #${run[0]} was not rolled back: another writer changed ${formatHour(run[2])} while the rollback ran (${what}). Nothing was changed; ` +
    'run the rollback again, and it checks the partition anew.', { cause, retryable: true });
}

async function restoreInOneTransaction(ctx: EngineContext, input: { backfillId: number; actor: string; reason?: string | undefined }, seam: StatementSeam | undefined): Promise<{ backfill: BackfillRow; restored: Date[] }> {
  return withTransaction(ctx.pool, async (client) => {
    // A test's seam: another writer between any two of the rollback's statements.
    const tx = withStatementSeam(client, seam);
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    if (!['done', 'failed', 'stopped', 'paused'].includes(backfill.state)) {
      throw wrongState(backfill.id, backfill.state, 'only a finished, failed, stopped or paused backfill can be rolled back');
    }
    const pipeline = await requirePipeline(tx, backfill.pipeline);
    const published = (await listTargets(tx, backfill.id)).filter((t) => t.status === 'published');
    if (published.length === 0) {
      throw new BackfillError(ErrorCode.WrongState, `Backfill #${backfill.id} published no partition: the live data is what it was before, so there is nothing to roll back.`);
    }
    await refuseUnlessLatest(tx, backfill, published);
    await refuseIfUndoPruned(tx, backfill.id);
    await refuseIfOthersInFlight(tx, backfill);
    const store = await rowStoreOf(tx, pipeline);
    const swaps = new Map<number, SwappedPartition | undefined>();
    for (const target of published) {
      await lockPartition(tx, pipeline.name, target.partitionHour);
      swaps.set(target.partitionHour.getTime(), await swappedPartition(tx, store, backfill.id, target.partitionHour));
    }
    // The partition locks first, as every writer takes them; then the saved tables and the target, in the swap's
    // lock order, before anything reads the target (swap.ts, "Locks").
    const lockWait = await restorePartitions(tx, { pipeline, store }, backfill, published, swaps);
    await transition(tx, { backfillId: backfill.id, event: 'roll back', actor: input.actor, set: { rolled_back_by: input.actor, rolled_back_at: new Date() } });
    await moveSteps(tx, backfill.id, 'skipped');
    // Consumers replay on the restored rows, in dependency order, and every owner hears about it.
    await insertRollbackSteps(tx, backfill.id, ROLLBACK_SUFFIX);
    await recordEvent(tx, {
      backfillId: backfill.id, actor: input.actor, kind: 'rolled_back',
      detail: {
        partitions: published.map((t) => formatHour(t.partitionHour)), generations: published.map((t) => t.publishedGeneration), reason: input.reason?.trim() || null,
        // A rollback by swap's real wait for its locks, as a publish's recomputed event reports it.
        ...(lockWait ? reportedLockWait(lockWait) : {}),
      },
    });
    return { backfill: await requireBackfill(tx, backfill.id), restored: published.map((t) => t.partitionHour) };
  });
}

/** Lineage, not data: a later generation over any of these partitions that still stands blocks this rollback. */
async function refuseUnlessLatest(tx: PoolClient, backfill: BackfillRow, published: BackfillTargetRow[]): Promise<void> {
  const rows = await listLaterGenerations(tx, backfill.id, published.map((t) => t.partitionHour));
  if (rows.length === 0) return;
  const later = rows.map((row) => `backfill #${row.backfillId} (${row.hours.map(formatHour).join(', ')})`).join('; ');
  throw new BackfillError(ErrorCode.WrongState,
    `Backfill #${backfill.id} cannot be rolled back: a later generation of its partitions stands, written by ${later}. ` +
    `Roll that one back first (or leave both); nothing was changed.`, { details: { later: rows.map((row) => row.backfillId) } });
}

/** Rolling back puts the backfill in flight again over its hours: refused, by name, while another one is. */
async function refuseIfOthersInFlight(tx: PoolClient, backfill: BackfillRow): Promise<void> {
  const other = await findOverlappingActive(tx, backfill.pipeline, backfill.firstHour, backfill.lastHour, backfill.id);
  if (!other) return;
  throw new BackfillError(ErrorCode.Overlap,
    `Backfill #${backfill.id} cannot be rolled back while backfill #${other.id} (${formatHourRange(other.firstHour, other.lastHour)}, ${other.state}) is in flight over its hours. ` +
    'Wait for it to finish, or cancel or stop it first; nothing was changed.', { details: { inFlight: other.id } });
}

/**
 * Another writer changed or removed a row the publish wrote: restoring would lose that write. Rows with keys
 * the publish did not write are late rows and do not count, whenever they were committed (the publish recorded
 * what its own statements wrote: migration 0019). The refusal says how many rows and which keys (a few).
 */
async function writtenSincePublish(tx: PoolClient, of: { pipeline: Pipeline; store: RowStore }, backfill: BackfillRow, target: BackfillTargetRow, swapped: SwappedPartition | undefined): Promise<string | undefined> {
  const run: [number, number, Date] = [backfill.id, STAGED_RUN, target.partitionHour];
  const published = swapped ? publishedBySwap(tx, of.store, run, swapped) : await publishedByRewrite(tx, of.store, run, target);
  const row = await checksumRows(tx, rowsChecksumLike(target.publishedChecksum, of.store), published.written, run);
  if (row?.checksum === target.publishedChecksum) return undefined;
  if (!published.changes) {
    return `${formatHour(target.partitionHour)}: the rows this backfill staged are gone (PostgreSQL empties its unlogged tables when it recovers from a crash), ` +
      `and the partition no longer holds exactly the ${target.publishedRows ?? target.rowsAfter ?? '?'} rows its publish wrote: the rows it wrote cannot be told ` +
      'from rows written since, and restoring could lose those writes';
  }
  const changes = await published.changes();
  const counted = [[changes.changed, 'changed'], [changes.removed, 'removed'], [changes.added, 'written again after the publish removed it']] as const;
  const told = counted.filter(([n]) => n > 0).map(([n, how]) => `${n} ${how}`);
  const keys = changes.sample.map((s) => `${s.key} (${s.how === 'added' ? 'written again' : s.how})`).join(', ');
  const rows = target.publishedRows ?? target.rowsAfter;
  return `${formatHour(target.partitionHour)}: another writer changed rows this backfill's publish wrote (of its ${rows ?? '?'} rows: ` +
    `${told.length > 0 ? told.join(', ') : 'some changed in place'}${keys ? `; ${of.pipeline.keyColumns.join(', ')} ${keys}${changes.changed + changes.removed + changes.added > changes.sample.length ? ', …' : ''}` : ''}), and restoring would lose those writes`;
}

/**
 * The live rows with the keys a publish wrote, and, read only when their checksum differs, how they changed; no
 * `changes` where that cannot be told (a rewrite's staged rows lost).
 */
interface PublishedRows {
  written: RowSource;
  changes?: () => Promise<ChangedSincePublish>;
}

function publishedBySwap(tx: PoolClient, store: RowStore, run: [number, number, Date], swapped: SwappedPartition): PublishedRows {
  return { written: writtenBySwap(store, swapped), changes: () => keysChangedSinceSwap(tx, store, run, swapped) };
}

/**
 * A rewrite's written rows are told by the keys it staged and saved (writtenByPublish). Where the staged rows are
 * lost (stagedRowsLost: PostgreSQL's crash recovery empties the unlogged table they were in), the rows with the
 * saved keys stand for them when the publish wrote no new key, else every live row of the hour when nothing else
 * is live beside them: whichever has the checksum the publish recorded for what it wrote. Neither: the rows it
 * wrote cannot be told from rows written since, and there is no `changes` to say how (a rollback is refused).
 */
async function publishedByRewrite(tx: PoolClient, store: RowStore, run: [number, number, Date], target: BackfillTargetRow): Promise<PublishedRows> {
  const tables = rewriteTablesOf(store, run, target.stagedApart);
  const byKeys = writtenByPublish(store, tables);
  const staged = target.stagedApart ? await findStagedReconciliation(tx, ...run) : undefined;
  if (!(await stagedRowsLost(tx, store, run, { apart: target.stagedApart, table: null, rows: staged?.plan?.stagedRows }))) {
    return { written: byKeys, changes: async () => changedSincePublish(tx, store, tables, run, await keptBaseline(tx, store, run)) };
  }
  for (const written of [byKeys, liveSource(store)]) {
    const row = await checksumRows(tx, rowsChecksumLike(target.publishedChecksum, store), written, run);
    if (row?.checksum === target.publishedChecksum) return { written };
  }
  return { written: byKeys };
}

/**
 * Refused, naming each partition, when another writer changed rows the publish wrote (writtenSincePublish).
 */
async function refuseIfWrittenSincePublish(tx: PoolClient, of: { pipeline: Pipeline; store: RowStore }, backfill: BackfillRow, published: BackfillTargetRow[], swaps: ReadonlyMap<number, SwappedPartition | undefined>): Promise<void> {
  const problems: string[] = [];
  for (const target of published) {
    const problem = await writtenSincePublish(tx, of, backfill, target, swaps.get(target.partitionHour.getTime()));
    if (problem) problems.push(problem);
  }
  if (problems.length > 0) {
    throw new BackfillError(ErrorCode.WrongState,
      `Backfill #${backfill.id} cannot be rolled back:\n${problems.map((p) => `  ${p}`).join('\n')}\nRepair it with a new backfill instead; nothing was changed.`);
  }
}

/**
 * Restores every published partition. When some go back by swap, lockForRestore takes all the swap's locks
 * first, in tries: the checks (refuseIfWrittenSincePublish) and the carry of late rows run while writers of the
 * target are out, and again each time it gives the target back to try its catalog locks anew, so a reader of the
 * target never keeps writers waiting behind the rollback. Returns that wait, for the rolled_back event.
 */
async function restorePartitions(tx: PoolClient, of: { pipeline: Pipeline; store: RowStore }, backfill: BackfillRow, published: BackfillTargetRow[], swaps: ReadonlyMap<number, SwappedPartition | undefined>): Promise<LockWait | undefined> {
  const checkUnchanged = () => refuseIfWrittenSincePublish(tx, of, backfill, published, swaps);
  const swappedOut = published.flatMap((target) => {
    const swapped = swaps.get(target.partitionHour.getTime());
    return swapped ? [{ run: [backfill.id, STAGED_RUN, target.partitionHour] as [number, number, Date], swapped }] : [];
  });
  const locked = swappedOut.length > 0 ? await lockForRestore(tx, of.pipeline, of.store, swappedOut, checkUnchanged) : undefined;
  if (!locked) await checkUnchanged();
  const backs = new Map((locked?.backs ?? []).map((back) => [back.run[2].getTime(), back]));
  for (const target of published) await restorePartition(tx, of, backfill, target, backs.get(target.partitionHour.getTime()));
  return locked?.lockWait;
}

/**
 * Puts back exactly what the publish replaced, keeping rows written since: by swapping the saved partition back
 * in (swap.ts), or by deleting what the publish wrote and inserting the saved rows; checks the count.
 */
async function restorePartition(tx: PoolClient, of: { pipeline: Pipeline; store: RowStore }, backfill: BackfillRow, target: BackfillTargetRow, swapped: SwapBack | undefined): Promise<void> {
  const run: [number, number, Date] = [backfill.id, STAGED_RUN, target.partitionHour];
  await preferHashJoins(tx);
  if (swapped) await restoreBySwap(tx, of.pipeline, of.store, swapped);
  else await restoreByRewrite(tx, of, run, target);
  await markTargetRestored(tx, backfill.id, target.partitionHour);
  await markGenerationRolledBack(tx, backfill.id, target.partitionHour);
}

/**
 * Other writers go on during a rollback by rewrite (it holds the partition lock, which they do not take): the
 * delete of what the publish wrote checks, in the same statement, that it deleted exactly that; a writer that
 * wrote one of those keys after that statement makes the insert of the saved rows fail on the target's key.
 * Either way the whole rollback is refused and nothing changes; it can be tried again.
 */
async function restoreByRewrite(tx: PoolClient, of: { pipeline: Pipeline; store: RowStore }, run: [number, number, Date], target: BackfillTargetRow): Promise<void> {
  const { store } = of;
  const tables = rewriteTablesOf(store, run, target.stagedApart);
  const { written } = await publishedByRewrite(tx, store, run, target);
  const deleted = await deleteRowsChecked(tx, written, rowsChecksumLike(target.publishedChecksum, store), run);
  if (deleted.checksum !== target.publishedChecksum) throw writtenDuringRollback(run, `${deleted.rows} rows had the keys it wrote, not the ${target.publishedRows ?? target.rowsAfter ?? '?'} it wrote`);
  let inserted: number | null;
  try {
    inserted = await insertRunRowsIntoTarget(tx, store, tables.saved, run);
  } catch (error) {
    if (!hasSqlState(error, SqlState.UniqueViolation)) throw error;
    throw writtenDuringRollback(run, `a row with a key the publish replaced was written: ${(error as { detail?: string }).detail ?? 'a duplicate key'}`, error);
  }
  const saved = await findRowsSaved(tx, run[0], run[2]);
  if (inserted !== saved) {
    throw new BackfillError(ErrorCode.StepFailed, `restoring ${formatHour(run[2])} put back ${inserted ?? 0} rows, not the ${saved ?? '?'} saved; nothing was changed`);
  }
}
