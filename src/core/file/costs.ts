import { findBackfillCost, sumCostsByPipelineAndQuarter, type BackfillCostRow, type CostSumRow } from '../../db/costs.js';
import type { Queryable } from '../../db/pool.js';

/*
 * What a backfill cost: the attention and the trust it spent, filed with its log row.
 *
 *   rows rewritten   the rows its published partitions hold (every partition it published, rolled back since or not)
 *   partitions       the partitions it published
 *   replays          the consumer re-triggers done (a rollback's replays too)
 *   people told      distinct owners an announcement, an after-run message or a rollback message reached
 *   ack wait         announced_at to the last acknowledgement or override the gate needed (to the finish when
 *                    the gate never opened: a cancelled backfill spent that wait too)
 *   compute time     each step's first claim to its finish, summed over the steps
 *   signed figures   signed figures whose rebuilt report no longer showed what was signed
 *
 * The cost is filed by the move that finishes the backfill (done, failed, cancelled, stopped, rolled back:
 * finishBackfill in src/core/lifecycle/stateMachine.ts) and again by every step that commits after that (the
 * after-run messages, the diff post, a rollback: finishStep), in each one's own transaction. Filing recomputes from the database's rows and overwrites: the same rows give the
 * same numbers however often, or however late, it runs. A backfill that never finished has no cost yet.
 */

export type BackfillCost = Omit<BackfillCostRow, 'backfillId'>;

/** The cost as filed; undefined while the backfill has not finished. */
export async function loadBackfillCost(db: Queryable, backfillId: number): Promise<BackfillCost | undefined> {
  const row = await findBackfillCost(db, backfillId);
  return row && withoutId(row);
}

function withoutId({ backfillId: _id, ...cost }: BackfillCostRow): BackfillCost {
  return cost;
}

export type CostSum = CostSumRow;

/** The filed costs of the backfills announced from `since` on (YYYY-MM-DD, UTC), per pipeline and quarter. */
export interface CostSummary {
  since: string;
  rows: CostSum[];
}

export async function summarizeCosts(db: Queryable, since: string): Promise<CostSummary> {
  return { since, rows: await sumCostsByPipelineAndQuarter(db, since) };
}

/** How many quarters the Home tab sums: this one and the three before it, a year a team can compare. */
const HOME_COST_QUARTERS = 4;

/** The first day (YYYY-MM-DD, UTC) of the quarter `quarters - 1` quarters before the one `now` is in. */
export function quartersSince(now: Date, quarters = HOME_COST_QUARTERS): string {
  const firstMonth = Math.floor(now.getUTCMonth() / 3) * 3 - 3 * (quarters - 1);
  return new Date(Date.UTC(now.getUTCFullYear(), firstMonth, 1)).toISOString().slice(0, 10);
}
