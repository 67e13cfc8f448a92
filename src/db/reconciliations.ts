import type { Queryable } from './pool.js';

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
     LEFT JOIN backfill.reconciliations r ON r.backfill_id = t.backfill_id AND r.generation = b.generation AND r.partition_hour = t.partition_hour
     WHERE t.backfill_id = $1::bigint
     ORDER BY t.partition_hour, r.phase DESC`, [backfillId]);
  return rows;
}
