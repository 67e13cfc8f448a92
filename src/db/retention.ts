import type { BackfillState } from '../core/states.js';
import type { Queryable } from './pool.js';

// What retention dropped of each backfill's stored rows (backfill.row_retention: one row per kind dropped), and
// what its rule needs to know about the backfills that still have rows (the rule: src/core/recovery/retention.ts).

export interface RetentionCandidateRow {
  backfillId: number;
  pipeline: string;
  state: BackfillState;
  /** When it finished (or, never having run, was announced). */
  finishedAt: Date;
  publishedPartitions: number;
  /** Ids of later backfills whose generations stand over its partitions (as text: bigint). */
  supersededBy: string[];
  pruned: ('scratch' | 'undo')[];
}

/** The backfills (or the one) that still have rows of some kind, in id order. */
export async function listRetentionCandidates(db: Queryable, backfillId?: number): Promise<RetentionCandidateRow[]> {
  const { rows } = await db.query<RetentionCandidateRow>(
    `SELECT b.id AS "backfillId", b.pipeline, b.state, coalesce(b.finished_at, b.rolled_back_at, b.announced_at) AS "finishedAt",
            (SELECT count(*) FROM backfill.backfill_targets t WHERE t.backfill_id = b.id AND t.status = 'published')::int AS "publishedPartitions",
            ARRAY(SELECT DISTINCT later.backfill_id FROM backfill.partition_generations mine
                  JOIN backfill.partition_generations later ON later.pipeline = mine.pipeline AND later.partition_hour = mine.partition_hour
                   AND later.generation > mine.generation AND later.rolled_back_at IS NULL
                  WHERE mine.backfill_id = b.id AND mine.rolled_back_at IS NULL ORDER BY 1)::text[] AS "supersededBy",
            ARRAY(SELECT r.rows_kind FROM backfill.row_retention r WHERE r.backfill_id = b.id ORDER BY 1) AS pruned
     FROM backfill.backfills b
     WHERE ($1::bigint IS NULL OR b.id = $1::bigint)
       AND (SELECT count(*) FROM backfill.row_retention r WHERE r.backfill_id = b.id) < 2
     ORDER BY b.id`, [backfillId ?? null]);
  return rows;
}

export async function insertRowRetention(tx: Queryable, pruned: { backfillId: number; kind: 'scratch' | 'undo'; prunedBy: string; rows: number; bytes: number; rule: string }): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.row_retention (backfill_id, rows_kind, pruned_by, rows_dropped, bytes_dropped, rule)
     VALUES ($1::bigint, $2::text, $3::text, $4::bigint, $5::bigint, $6::text)`,
    [pruned.backfillId, pruned.kind, pruned.prunedBy, pruned.rows, pruned.bytes, pruned.rule]);
}

/** Who dropped the backfill's undo rows, and when; undefined while it has them. */
export async function findUndoPruning(db: Queryable, backfillId: number): Promise<{ prunedBy: string; prunedAt: Date } | undefined> {
  const { rows } = await db.query<{ prunedBy: string; prunedAt: Date }>(
    `SELECT pruned_by AS "prunedBy", pruned_at AS "prunedAt" FROM backfill.row_retention WHERE backfill_id = $1::bigint AND rows_kind = 'undo'`, [backfillId]);
  return rows[0];
}
