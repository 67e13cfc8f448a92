import type { Queryable } from './pool.js';

// What a backfill cost (backfill.backfill_costs, migration 0013): one row per finished backfill, computed from the
// backfill's own rows (targets, steps, consumers, acknowledgements and overrides, signed figures) by one statement,
// and the sums of those rows per pipeline and quarter.

export interface BackfillCostRow {
  backfillId: number;
  rowsRewritten: number;
  partitions: number;
  replays: number;
  peopleTold: number;
  ackWaitMs: number;
  computeMs: number;
  signedFiguresMoved: number;
  filedAt: Date;
}

const COST_COLUMNS = `backfill_id AS "backfillId", rows_rewritten AS "rowsRewritten", partitions, replays, people_told AS "peopleTold",
  ack_wait_ms AS "ackWaitMs", compute_ms AS "computeMs", signed_figures_moved AS "signedFiguresMoved", filed_at AS "filedAt"`;

// Each figure is a subquery over one backfill (`b`). Milliseconds are rounded once, from the exact intervals.
// NOTE: the gate waits on every "before" reader; for each, the earlier of its acknowledgement and an operator's
// override opened it. A gate that never opened (cancelled, stopped or failed while waiting) waited until the finish.
const COST_SELECT = `
  SELECT b.id,
    (SELECT coalesce(sum(t.rows_after), 0) FROM backfill.backfill_targets t
      WHERE t.backfill_id = b.id AND t.published_generation IS NOT NULL),
    (SELECT count(*) FROM backfill.backfill_targets t WHERE t.backfill_id = b.id AND t.published_generation IS NOT NULL),
    (SELECT count(*) FROM backfill.backfill_steps s WHERE s.backfill_id = b.id AND s.kind = 'replay' AND s.status = 'done'),
    (SELECT count(DISTINCT bc.owner) FROM backfill.backfill_steps s
       JOIN backfill.backfill_consumers bc ON bc.backfill_id = s.backfill_id AND bc.consumer = split_part(s.step_key, '@', 1)
      WHERE s.backfill_id = b.id AND s.kind IN ('announce', 'notify') AND s.status = 'done'),
    (SELECT greatest(0, round(1000 * extract(epoch FROM
              CASE WHEN count(*) = 0 THEN interval '0'
                   WHEN bool_and(least(a.acked_at, o.at) IS NOT NULL) THEN max(least(a.acked_at, o.at)) - b.announced_at
                   ELSE coalesce(b.finished_at, b.announced_at) - b.announced_at END)))
       FROM backfill.backfill_consumers bc
       LEFT JOIN backfill.acknowledgements a ON a.backfill_id = bc.backfill_id AND a.consumer = bc.consumer
       LEFT JOIN backfill.gate_overrides o ON o.backfill_id = bc.backfill_id AND o.consumer = bc.consumer
      WHERE bc.backfill_id = b.id AND bc.notify_rule = 'before'),
    (SELECT coalesce(round(1000 * extract(epoch FROM sum(s.finished_at - s.started_at))), 0) FROM backfill.backfill_steps s
      WHERE s.backfill_id = b.id AND s.started_at IS NOT NULL AND s.finished_at IS NOT NULL),
    (SELECT count(*) FROM backfill.backfill_signoffs f
      WHERE f.backfill_id = b.id AND f.report_after IS NOT NULL AND f.report_after <> f.signed_total)
  FROM backfill.backfills b WHERE b.id = $1::bigint`;

/**
 * Files the backfill's cost: computes it from its rows and writes it over whatever was filed before (so a step
 * retried, or a second filing, gives the same row, never a sum of two). Returns the row as written.
 */
export async function upsertBackfillCost(tx: Queryable, backfillId: number): Promise<BackfillCostRow | undefined> {
  const { rows } = await tx.query<BackfillCostRow>(
    `INSERT INTO backfill.backfill_costs AS c
       (backfill_id, rows_rewritten, partitions, replays, people_told, ack_wait_ms, compute_ms, signed_figures_moved)
     ${COST_SELECT}
     ON CONFLICT (backfill_id) DO UPDATE SET rows_rewritten = excluded.rows_rewritten, partitions = excluded.partitions,
       replays = excluded.replays, people_told = excluded.people_told, ack_wait_ms = excluded.ack_wait_ms,
       compute_ms = excluded.compute_ms, signed_figures_moved = excluded.signed_figures_moved, filed_at = clock_timestamp()
     RETURNING ${COST_COLUMNS}`, [backfillId]);
  return rows[0];
}

/** The cost filed for the backfill; undefined until it finishes. */
export async function findBackfillCost(db: Queryable, backfillId: number): Promise<BackfillCostRow | undefined> {
  const { rows } = await db.query<BackfillCostRow>(`SELECT ${COST_COLUMNS} FROM backfill.backfill_costs WHERE backfill_id = $1::bigint`, [backfillId]);
  return rows[0];
}

export interface CostSumRow {
  pipeline: string;
  /** The quarter the backfills were announced in (UTC): 2026-Q4. */
  quarter: string;
  backfills: number;
  /** Of them, how many finished done; the others were cancelled, stopped, failed or rolled back. */
  done: number;
  partitions: number;
  rowsRewritten: number;
  replays: number;
  peopleTold: number;
  ackWaitMs: number;
  medianAckWaitMs: number;
  computeMs: number;
  signedFiguresMoved: number;
}

/** The filed costs of the backfills announced on or after `since` (YYYY-MM-DD, UTC), summed per pipeline and quarter. */
export async function sumCostsByPipelineAndQuarter(db: Queryable, since: string): Promise<CostSumRow[]> {
  const { rows } = await db.query<CostSumRow>(
    `SELECT b.pipeline, to_char(b.announced_at AT TIME ZONE 'UTC', 'YYYY-"Q"Q') AS quarter,
            count(*)::int AS backfills, count(*) FILTER (WHERE b.state = 'done')::int AS done,
            sum(c.partitions)::bigint AS partitions, sum(c.rows_rewritten)::bigint AS "rowsRewritten",
            sum(c.replays)::bigint AS replays, sum(c.people_told)::bigint AS "peopleTold",
            sum(c.ack_wait_ms)::bigint AS "ackWaitMs",
            round((percentile_cont(0.5) WITHIN GROUP (ORDER BY c.ack_wait_ms))::numeric)::bigint AS "medianAckWaitMs",
            sum(c.compute_ms)::bigint AS "computeMs", sum(c.signed_figures_moved)::bigint AS "signedFiguresMoved"
     FROM backfill.backfill_costs c JOIN backfill.backfills b ON b.id = c.backfill_id
     WHERE b.announced_at >= ($1::date)::timestamp AT TIME ZONE 'UTC'
     GROUP BY 1, 2 ORDER BY 2, 1`, [since]);
  return rows;
}
