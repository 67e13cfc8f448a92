import type { Queryable } from './pool.js';
import { STAGED_RUN } from './rowStore.js';
import type { AgainstPlan, Reconciliation as ReconciliationCounts } from './reconcile.js';
import { prepared } from './prepared.js';

// Per partition and phase, how a backfill's staged or published rows differ from what was there
// (backfill.reconciliations, written by the publish path).

export interface ReconciliationRow {
  partitionHour: Date;
  phase: 'staged' | 'published';
  keysMissing: number;
  keysAdded: number;
  keysDuplicated: number;
  keysChanged: number;
  lateRows: number;
  totalBefore: string;
  totalAfter: string;
  status: string;
}

/** Every reconciliation of the backfill's current generation, with each target's status (unavailable too). */
export async function loadReconciliation(db: Queryable, backfillId: number): Promise<ReconciliationRow[]> {
  const { rows } = await db.query<ReconciliationRow>(
    `SELECT t.partition_hour AS "partitionHour", coalesce(r.phase, 'staged') AS phase,
            coalesce(r.keys_missing, 0) AS "keysMissing", coalesce(r.keys_added, 0) AS "keysAdded",
            coalesce(r.keys_duplicated, 0) AS "keysDuplicated", coalesce(r.keys_changed, 0) AS "keysChanged",
            coalesce(r.late_rows, 0) AS "lateRows", coalesce(r.total_before, t.total_before)::text AS "totalBefore",
            coalesce(r.total_after, t.total_before)::text AS "totalAfter", t.status
     FROM backfill.backfill_targets t JOIN backfill.backfills b ON b.id = t.backfill_id
     LEFT JOIN backfill.reconciliations r ON r.backfill_id = t.backfill_id AND r.generation = ${STAGED_RUN} AND r.partition_hour = t.partition_hour
     WHERE t.backfill_id = $1::bigint
     ORDER BY t.partition_hour, r.phase DESC`, [backfillId]);
  return rows;
}

/**
 * What staging measured besides the reconciliation, where its join was exact (migrations/0028): the live rows it
 * compared the staged ones with (their keys kept with row versions in the run's baseline, and the xmin of the
 * snapshot it read them in: migrations/0029) and, for a publish by swap, the staged rows' checksum (rowsChecksum).
 * Their count and total are the plan's stagedRows and the reconciliation's totalAfter.
 */
export interface MeasuredLive {
  liveRows: number;
  stagedChecksum: string | null;
  /** The xmin of the snapshot staging read the live rows in (migrations/0029): null where it was not kept. */
  liveSnapshotXmin: string | null;
  /** The writers of the live rows staging read at or above that xmin (migrations/0031): null where none were kept. */
  liveVersionsSeen: string[] | null;
}

/** The staged phase's reconciliation: its counts, its late rows and, when staging measured them, the envelope and the live rows. */
export type StagedReconciliation = ReconciliationCounts & { lateRows: number; plan?: AgainstPlan; measured?: MeasuredLive };

/** The staged phase's reconciliation of the run's partition, with its late rows and the envelope staging measured. */
export async function findStagedReconciliation(db: Queryable, backfillId: number, generation: number, hour: Date): Promise<StagedReconciliation | undefined> {
  const { rows } = await db.query<ReconciliationCounts & { lateRows: number; plan: AgainstPlan | null; measured: MeasuredLive | null }>(
    prepared(`SELECT keys_missing AS "keysMissing", keys_added AS "keysAdded", keys_duplicated AS "keysDuplicated", keys_changed AS "keysChanged",
            total_before::text AS "totalBefore", total_after::text AS "totalAfter", late_rows AS "lateRows",
            CASE WHEN plan_rows IS NOT NULL THEN json_build_object('lost', plan_lost, 'stagedKnown', staged_known_total::text, 'expected', plan_total::text,
              'added', plan_added, 'planned', plan_rows, 'stagedRows', staged_rows, 'stagedTotal', staged_total::text) END AS plan,
            CASE WHEN live_rows IS NOT NULL THEN json_build_object('liveRows', live_rows, 'stagedChecksum', staged_checksum,
              'liveSnapshotXmin', live_snapshot_xmin::text, 'liveVersionsSeen', live_versions_seen::text[]) END AS measured
     FROM backfill.reconciliations WHERE backfill_id = $1::bigint AND generation = $2::int AND partition_hour = $3::timestamptz AND phase = 'staged'`),
    [backfillId, generation, hour]);
  const row = rows[0];
  if (!row) return undefined;
  const { plan, measured, ...counts } = row;
  return { ...counts, ...(plan ? { plan } : {}), ...(measured ? { measured } : {}) };
}

/**
 * The reconciliation of a phase of the run's partition, and at staging the envelope it measured (migrations/0026)
 * and the live rows it measured, which its publish reads instead of measuring again (migrations/0028); a re-run
 * of the phase replaces it.
 */
export async function saveReconciliation(tx: Queryable, backfillId: number, generation: number, hour: Date, phase: 'staged' | 'published', r: ReconciliationCounts, lateRows: number,
  plan?: AgainstPlan, measured?: MeasuredLive): Promise<void> {
  await tx.query(
    prepared(`INSERT INTO backfill.reconciliations (backfill_id, generation, partition_hour, phase, keys_missing, keys_added, keys_duplicated, keys_changed, late_rows, total_before, total_after,
       plan_lost, plan_added, plan_rows, plan_total, staged_known_total, staged_rows, staged_total, live_rows, staged_checksum, live_snapshot_xmin, live_versions_seen)
     VALUES ($1::bigint, $2::int, $3::timestamptz, $4::text, $5::int, $6::int, $7::int, $8::int, $9::int, $10::numeric, $11::numeric,
       $12::int, $13::int, $14::int, $15::numeric, $16::numeric, $17::int, $18::numeric, $19::bigint, $20::text, $21::xid8, $22::bigint[])
     ON CONFLICT (backfill_id, generation, partition_hour, phase) DO UPDATE SET
       keys_missing = EXCLUDED.keys_missing, keys_added = EXCLUDED.keys_added, keys_duplicated = EXCLUDED.keys_duplicated,
       keys_changed = EXCLUDED.keys_changed, late_rows = EXCLUDED.late_rows, total_before = EXCLUDED.total_before,
       total_after = EXCLUDED.total_after, plan_lost = EXCLUDED.plan_lost, plan_added = EXCLUDED.plan_added, plan_rows = EXCLUDED.plan_rows,
       plan_total = EXCLUDED.plan_total, staged_known_total = EXCLUDED.staged_known_total, staged_rows = EXCLUDED.staged_rows,
       staged_total = EXCLUDED.staged_total, live_rows = EXCLUDED.live_rows, staged_checksum = EXCLUDED.staged_checksum,
       live_snapshot_xmin = EXCLUDED.live_snapshot_xmin, live_versions_seen = EXCLUDED.live_versions_seen, at = now()`),
    [backfillId, generation, hour, phase, r.keysMissing, r.keysAdded, r.keysDuplicated, r.keysChanged, lateRows, r.totalBefore, r.totalAfter,
      plan?.lost ?? null, plan?.added ?? null, plan?.planned ?? null, plan?.expected ?? null, plan?.stagedKnown ?? null, plan?.stagedRows ?? null, plan?.stagedTotal ?? null,
      measured?.liveRows ?? null, measured?.stagedChecksum ?? null, measured?.liveSnapshotXmin ?? null, measured?.liveVersionsSeen ?? null]);
}
