import type { BackfillRow } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import { requirePipeline, type Pipeline } from '../../db/pipelines.js';
import type { PoolClient, Queryable } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { toCents } from '../money.js';
import { lockPartition, snapshotPartition, sourceShards, type PartitionSnapshot } from './partitionStep.js';
import { liveSource, reconcileByKey, runSource, type Reconciliation, type RowSource } from './reconcile.js';
import { keysEqual, rowStoreOf, runRows, stepRows, type RowStore } from './rowStore.js';
import { checkClaim, moveSteps } from '../engine/stepClaims.js';
import { BLOCKED_BY_PAUSE, type StepRef } from '../engine/stepGraph.js';
import { hourPartitionOf, indexLikeTarget, keepBaseline, publishBySwap, stageIntoTable, tableSource, type SwapHooks } from './swap.js';
import { transition } from '../engine/stateMachine.js';
import { formatHour } from '../time.js';

// Stage, reconcile, then publish: the write path of a backfill since it became recoverable.
//
// stage   runs the pipeline's own step query into staging (typed like the target), and the live keys at that
//         moment into the baseline. Staging is the store's shared staged table, or, when the target has a
//         partition of exactly this hour, a table of its own that a publish swaps in (swap.ts);
// publish replaces the live partition from staging in one transaction, under the same per-partition lock as
//         the normal run: by rewrite (DELETE … RETURNING into the saved rows, INSERT … SELECT from staging)
//         or by swap (DETACH the live partition into the store, ATTACH the staged table); rows that arrived
//         after the baseline (late rows from normal ingestion) are carried into the published generation; and
//         the fence is read inside that transaction just before it commits.

const ENGINE = 'backfill-bot';

export type StageOutcome = 'staged' | 'unavailable';

/**
 * Builds one partition into staging: the step's own query runs into the pipeline's staged table, and the live
 * keys of that moment into the baseline. Nothing live changes, and no row leaves PostgreSQL.
 */
export async function stagePartition(tx: PoolClient, backfill: BackfillRow, hour: Date): Promise<StageOutcome> {
  const pipeline = await requirePipeline(tx, backfill.pipeline);
  const generation = backfill.generation;
  const shards = await sourceShards(tx, pipeline, hour);
  if (shards < pipeline.shardsExpected) {
    // No source, no corrected history: the partition is left as it is and the diff says so.
    await tx.query(`UPDATE backfill.backfill_targets SET status = 'unavailable' WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [backfill.id, hour]);
    await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'unavailable', detail: { partition: formatHour(hour), shards, shardsExpected: pipeline.shardsExpected } });
    return 'unavailable';
  }
  await preferHashJoins(tx);
  await lockPartition(tx, pipeline.name, hour);
  const store = await rowStoreOf(tx, pipeline);
  const run: [number, number, Date] = [backfill.id, generation, hour];
  const staged = await hourPartitionOf(tx, pipeline, hour) ? await stageForSwap(tx, pipeline, store, run) : await stageForRewrite(tx, pipeline, store, run);
  const result = await reconcileByKey(tx, store, run, liveSource(store), staged.source);
  // Duplicate keys block the publish (a breach); the target's unique indexes would refuse them here instead.
  if (staged.table && result.keysDuplicated === 0) await indexLikeTarget(tx, pipeline, store, staged.table.qualified, staged.table.name);
  await saveReconciliation(tx, backfill.id, generation, hour, 'staged', result, 0);
  await tx.query(`UPDATE backfill.backfill_targets SET status = 'staged', staged_relid = to_regclass($3::text)::oid WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`,
    [backfill.id, hour, staged.table?.qualified ?? null]);
  await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'staged', detail: { partition: formatHour(hour), generation, publishBy: staged.table ? 'swap' : 'rewrite', ...result } });
  return 'staged';
}

interface Staged {
  source: RowSource;
  /** The table of its own the partition was staged into, for a publish by swap. */
  table?: { qualified: string; name: string };
}

/** The live keys and the step's rows into the pipeline's shared baseline and staged tables, checked to be all in the hour. */
async function stageForRewrite(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date]): Promise<Staged> {
  const [backfillId, generation, hour] = run;
  await tx.query(`DELETE FROM ${runRows(store, store.baseline)}`, run);
  await tx.query(
    `INSERT INTO ${store.baseline} SELECT $1::bigint, $2::int, t.${store.partition}, ${store.keys.map((key) => `t.${key}`).join(', ')}
     FROM ${liveSource(store)}`, run);
  await tx.query(`DELETE FROM ${runRows(store, store.staged)}`, run);
  const staged = await tx.query(
    `INSERT INTO ${store.staged} (bf_backfill, bf_generation, ${store.stepColumns.join(', ')})
     SELECT $2::bigint, $3::int, q.* FROM ${stepRows(store)}`, [hour, backfillId, generation]);
  const inHour = await tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${runRows(store, store.staged)}`, run);
  if (staged.rowCount !== inHour.rows[0]?.n) {
    throw new BackfillError(ErrorCode.StepFailed,
      `the ${pipeline.name} step produced ${staged.rowCount ?? 0} rows for ${formatHour(hour)} but only ${inHour.rows[0]?.n ?? 0} of them are in that hour: ` +
      `it must produce only rows whose ${pipeline.partitionColumn} is $1. Nothing was changed.`);
  }
  return { source: runSource(store, store.staged) };
}

/** The live keys and the step's rows into tables of their own, to be swapped in for the hour's partition (swap.ts). */
async function stageForSwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date]): Promise<Staged> {
  await keepBaseline(tx, store, run, liveSource(store));
  const table = await stageIntoTable(tx, pipeline, store, run);
  return { source: tableSource(store, table.qualified), table };
}

/**
 * PERF: the store's tables are filled and joined inside one transaction, before any statistics exist for the
 * new rows (autovacuum may be off, and ANALYZE per partition would serialize the workers). With a nested loop
 * the planner's guess of one row turns a key join quadratic; a hash join is linear whatever the guess. Local to
 * the step's transaction: the dispatcher's queries keep the planner's full choice.
 */
export async function preferHashJoins(tx: Queryable): Promise<void> {
  await tx.query('SET LOCAL enable_nestloop = off');
}

export type PublishOutcome = { kind: 'published'; generation: number } | { kind: 'unavailable'; generation?: undefined } | { kind: 'breach'; reason: string };

/** Hooks for tests that must act between a publish's writes and its commit (a stop, a late writer). */
export interface PublishHooks extends SwapHooks {
  beforeFenceCheck?(backfillId: number, hour: Date): Promise<void>;
}

/**
 * Replaces the live partition from staging, inside the caller's transaction (which then checks the fence and
 * the claim, and commits). Returns a breach instead, having written nothing, when the staged data holds
 * duplicate keys or a difference the plan did not predict and nobody accepted this partition by name.
 *
 * By rewrite, the prior rows are saved by the same statement that deletes them (DELETE … RETURNING), so every
 * row the publish removes is saved, whoever committed it and whenever; a row committed after that statement's
 * snapshot is not deleted and stays live: a late row, which a rollback leaves alone. By swap, writers wait on
 * the target from the carrying of late rows to the commit, so the detached partition is exactly what was live.
 */
export async function publishPartition(tx: PoolClient, backfill: BackfillRow, hour: Date, hooks: PublishHooks = {}): Promise<PublishOutcome> {
  const pipeline = await requirePipeline(tx, backfill.pipeline);
  const generation = backfill.generation;
  const target = await targetRow(tx, backfill.id, hour);
  if (target.status === 'unavailable') return { kind: 'unavailable' };
  const store = await rowStoreOf(tx, pipeline);
  const run: [number, number, Date] = [backfill.id, generation, hour];
  const stagedSource = target.stagedTable ? tableSource(store, target.stagedTable) : runSource(store, store.staged);
  const staged = await stagedReconciliation(tx, backfill.id, generation, hour);
  const reason = envelopeBreach(staged, target, await againstPlan(tx, store, run, stagedSource), backfill.previewedBy);
  if (reason) return { kind: 'breach', reason: `${formatHour(hour)}: ${reason}` };

  await preferHashJoins(tx);
  await lockPartition(tx, pipeline.name, hour);
  const written = target.stagedTable
    ? await swapIn(tx, pipeline, store, run, target.stagedTable, hooks)
    : await rewrite(tx, pipeline, store, run);
  await saveReconciliation(tx, backfill.id, generation, hour, 'published', written.published, written.lateRows);
  const partitionGeneration = await recordGeneration(tx, pipeline.name, hour, backfill.id);
  const { snapshot, lateRows } = written;
  await tx.query(
    `UPDATE backfill.backfill_targets SET rows_after = $3::bigint, total_after = $4::numeric, checksum_after = $5::text,
            published_checksum = $5::text, recomputed_at = now(), status = 'published', published_generation = $6::int
     WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`,
    [backfill.id, hour, snapshot.rows, snapshot.total, snapshot.checksum, partitionGeneration]);
  // reconciled stays false: the month's record is what readers saw that morning.
  await tx.query('UPDATE backfill.partition_log SET backfilled_at = now(), row_count = $3::bigint WHERE pipeline = $1::text AND partition_hour = $2::timestamptz',
    [pipeline.name, hour, snapshot.rows]);
  if (lateRows > 0) await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'late_rows_kept', detail: { partition: formatHour(hour), rows: lateRows } });
  await recordEvent(tx, { backfillId: backfill.id, actor: ENGINE, kind: 'recomputed',
    detail: { partition: formatHour(hour), generation: partitionGeneration, rowsBefore: target.rowsBefore, rowsAfter: snapshot.rows, totalBefore: target.totalBefore, totalAfter: snapshot.total,
      checksum: snapshot.checksum, lateRows, publishedBy: target.stagedTable ? 'swap' : 'rewrite', ...(written.swapMs === undefined ? {} : { swapMs: Math.round(written.swapMs * 10) / 10 }) } });
  await hooks.beforeFenceCheck?.(backfill.id, hour);
  return { kind: 'published', generation: partitionGeneration };
}

interface Written {
  published: Reconciliation;
  lateRows: number;
  snapshot: PartitionSnapshot;
  swapMs?: number;
}

/** Publish by rewrite: the live rows are deleted into the saved rows, the staged ones inserted, late rows carried. */
async function rewrite(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date]): Promise<Written> {
  const rows = await saveAndDeletePrior(tx, store, run);
  await savedOnce(tx, run, rows, null);
  await tx.query(`INSERT INTO ${store.target} (${store.columns.join(', ')}) SELECT ${store.columns.join(', ')} FROM ${runRows(store, store.staged)}`, run);
  const lateRows = await carryLateRows(tx, store, run);
  const published = await reconcileByKey(tx, store, run, runSource(store, store.saved), liveSource(store));
  return { published, lateRows, snapshot: await snapshotPartition(tx, pipeline, run[2]) };
}

/** Publish by swap (swap.ts): the live partition is detached into the store, the staged table attached. */
async function swapIn(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], staged: string, hooks: SwapHooks): Promise<Written> {
  const swap = await publishBySwap(tx, pipeline, store, run, staged, hooks);
  await savedOnce(tx, run, swap.savedRows, { saved: swap.savedTable, published: swap.publishedTable });
  return swap;
}

/** One statement deletes the live partition and saves exactly what it deleted. */
async function saveAndDeletePrior(tx: PoolClient, store: RowStore, run: [number, number, Date]): Promise<number> {
  const saved = await tx.query(
    `WITH gone AS (DELETE FROM ${liveSource(store)} RETURNING t.*)
     INSERT INTO ${store.saved} (bf_backfill, bf_generation, ${store.columns.join(', ')})
     SELECT $1::bigint, $2::int, ${store.columns.map((column) => `gone.${column}`).join(', ')} FROM gone`, run);
  return saved.rowCount ?? 0;
}

/** Saved once: a second save of the same partition by the same backfill is refused by the primary key. */
async function savedOnce(tx: PoolClient, run: [number, number, Date], rows: number, tables: { saved: string; published: string } | null): Promise<void> {
  const once = await tx.query(
    `INSERT INTO backfill.preserved_partitions (backfill_id, partition_hour, rows_saved, saved_table, published_table)
     VALUES ($1::bigint, $2::timestamptz, $3::bigint, $4::text, $5::text)
     ON CONFLICT DO NOTHING`, [run[0], run[2], rows, tables?.saved ?? null, tables?.published ?? null]);
  if (once.rowCount !== 1) {
    throw new BackfillError(ErrorCode.ClaimLost, `the prior rows of ${formatHour(run[2])} were already saved by backfill #${run[0]}: this second publish does not commit`);
  }
}

/**
 * Late rows: deleted by the publish, absent when the partition was staged, and not produced by the staged step
 * either: normal ingestion wrote them in between. They are put back, so the published generation keeps them.
 */
async function carryLateRows(tx: PoolClient, store: RowStore, run: [number, number, Date]): Promise<number> {
  const late = await tx.query(
    `INSERT INTO ${store.target} (${store.columns.join(', ')})
     SELECT ${store.columns.map((column) => `p.${column}`).join(', ')} FROM ${runSource(store, store.saved, 'p')}
       AND NOT EXISTS (SELECT 1 FROM ${runSource(store, store.baseline)} AND ${keysEqual(store, 't', 'p')})
       AND NOT EXISTS (SELECT 1 FROM ${runSource(store, store.staged)} AND ${keysEqual(store, 't', 'p')})`, run);
  return late.rowCount ?? 0;
}

/** The next generation of this partition, kept with the backfill that wrote it (under the partition lock). */
async function recordGeneration(tx: PoolClient, pipeline: string, hour: Date, backfillId: number): Promise<number> {
  const { rows } = await tx.query<{ generation: number }>(
    `INSERT INTO backfill.partition_generations (pipeline, partition_hour, generation, backfill_id)
     SELECT $1::text, $2::timestamptz, coalesce(max(generation), 0) + 1, $3::bigint
     FROM backfill.partition_generations WHERE pipeline = $1::text AND partition_hour = $2::timestamptz
     RETURNING generation`, [pipeline, hour, backfillId]);
  const generation = rows[0]?.generation;
  if (generation === undefined) throw new Error('generation insert returned no row');
  return generation;
}

/**
 * The publish of `ref` found its partition outside the envelope: in the caller's transaction, after the claim
 * check, the partition's breach is recorded, the backfill pauses, and every step the pause catches running
 * (this one too) is blocked: their writes do not commit, and a continue re-runs them.
 */
export async function pauseForBreach(tx: PoolClient, ref: StepRef, token: string, reason: string): Promise<number> {
  await checkClaim(tx, ref, token, { writes: true });
  await tx.query('UPDATE backfill.backfill_targets SET breach = $3::text WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz',
    [ref.backfillId, new Date(ref.key), reason]);
  await transition(tx, { backfillId: ref.backfillId, to: 'paused', actor: ENGINE, set: { paused_reason: reason } });
  const blocked = await moveSteps(tx, ref.backfillId, 'blocked', { kinds: BLOCKED_BY_PAUSE, from: ['running'] });
  await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'paused', detail: { reason, partition: formatHour(new Date(ref.key)), blocked } });
  // The how-manieth pause of this backfill: names the reconciliation message it sends, once.
  const { rows } = await tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM backfill.events WHERE backfill_id = $1::bigint AND kind = 'paused'`, [ref.backfillId]);
  return rows[0]?.n ?? 1;
}

interface AgainstPlan {
  /** Rows the plan showed whose key the staged data no longer has. */
  lost: number;
  /** The staged measure over the keys the plan showed, and what the plan said for them. */
  stagedKnown: string;
  expected: string;
  /** Keys the staged data has that the plan did not: source rows that landed since (allowed, reported). */
  added: number;
  planned: number;
  stagedRows: number;
  stagedTotal: string;
}

/** Staged data against the rows the plan's preview showed (the announced envelope), by key. */
async function againstPlan(db: Queryable, store: RowStore, run: [number, number, Date], staged: RowSource): Promise<AgainstPlan> {
  // PERF: one full join on the typed keys (hash or merge), not correlated EXISTS per row: at 50,000 rows a
  // partition the correlated form took over half a minute with no statistics on the new rows.
  const keys = store.keys.map((key) => `t.${key}`).join(', ');
  const { rows } = await db.query<AgainstPlan>(
    `SELECT count(*) FILTER (WHERE e.planned AND s.staged IS NULL)::int AS lost,
            coalesce(sum(s.measure) FILTER (WHERE e.planned AND s.staged), 0)::numeric(18,2)::text AS "stagedKnown",
            coalesce(sum(e.measure), 0)::numeric(18,2)::text AS expected,
            count(*) FILTER (WHERE s.staged AND e.planned IS NULL)::int AS added,
            count(e.planned)::int AS planned,
            count(s.staged)::int AS "stagedRows",
            coalesce(sum(s.measure), 0)::numeric(18,2)::text AS "stagedTotal"
     FROM (SELECT ${keys}, t.bf_measure AS measure, true AS planned
           FROM ${store.expected} t WHERE t.bf_backfill = $1::bigint AND t.${store.partition} = $3::timestamptz) e
     FULL JOIN (SELECT ${keys}, t.${store.measure} AS measure, true AS staged FROM ${staged}) s USING (${store.keys.join(', ')})`, run);
  const row = rows[0];
  if (!row) throw new Error('envelope query returned no row');
  return row;
}

function envelopeBreach(staged: Reconciliation & { lateRows: number } | undefined, target: TargetRow, plan: AgainstPlan, previewedBy: 'estimate' | 'step'): string | undefined {
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

interface TargetRow {
  status: string;
  rowsBefore: number;
  totalBefore: string;
  expectedRows: string | null;
  expectedTotal: string | null;
  acceptedBy: string | null;
  stagedTable: string | null;
}

async function targetRow(db: Queryable, backfillId: number, hour: Date): Promise<TargetRow> {
  const { rows } = await db.query<TargetRow>(
    `SELECT status, rows_before AS "rowsBefore", total_before::text AS "totalBefore", expected_rows::text AS "expectedRows", expected_total::text AS "expectedTotal", accepted_by AS "acceptedBy",
            staged_relid::regclass::text AS "stagedTable"
     FROM backfill.backfill_targets WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [backfillId, hour]);
  const row = rows[0];
  if (!row) throw new BackfillError(ErrorCode.StepFailed, `${formatHour(hour)} is not a target of backfill #${backfillId}`);
  return row;
}

async function stagedReconciliation(db: Queryable, backfillId: number, generation: number, hour: Date): Promise<(Reconciliation & { lateRows: number }) | undefined> {
  const { rows } = await db.query<Reconciliation & { lateRows: number }>(
    `SELECT keys_missing AS "keysMissing", keys_added AS "keysAdded", keys_duplicated AS "keysDuplicated", keys_changed AS "keysChanged",
            total_before::text AS "totalBefore", total_after::text AS "totalAfter", late_rows AS "lateRows"
     FROM backfill.reconciliations WHERE backfill_id = $1::bigint AND generation = $2::int AND partition_hour = $3::timestamptz AND phase = 'staged'`,
    [backfillId, generation, hour]);
  return rows[0];
}

async function saveReconciliation(tx: Queryable, backfillId: number, generation: number, hour: Date, phase: 'staged' | 'published', r: Reconciliation, lateRows: number): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.reconciliations (backfill_id, generation, partition_hour, phase, keys_missing, keys_added, keys_duplicated, keys_changed, late_rows, total_before, total_after)
     VALUES ($1::bigint, $2::int, $3::timestamptz, $4::text, $5::int, $6::int, $7::int, $8::int, $9::int, $10::numeric, $11::numeric)
     ON CONFLICT (backfill_id, generation, partition_hour, phase) DO UPDATE SET
       keys_missing = EXCLUDED.keys_missing, keys_added = EXCLUDED.keys_added, keys_duplicated = EXCLUDED.keys_duplicated,
       keys_changed = EXCLUDED.keys_changed, late_rows = EXCLUDED.late_rows, total_before = EXCLUDED.total_before,
       total_after = EXCLUDED.total_after, at = now()`,
    [backfillId, generation, hour, phase, r.keysMissing, r.keysAdded, r.keysDuplicated, r.keysChanged, lateRows, r.totalBefore, r.totalAfter]);
}
