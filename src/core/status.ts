import {
  listBackfillConsumers, listBackfillSignoffs, listTargets, requireBackfill,
  type BackfillConsumerRow, type BackfillRow, type BackfillSignoffRow, type BackfillTargetRow,
} from '../db/backfills.js';
import type { Queryable } from '../db/pool.js';
import type { StepKind, StepStatus } from './stepGraph.js';

export interface StepRow {
  kind: StepKind;
  key: string;
  status: StepStatus;
  attempts: number;
  startedAt: Date | null;
  finishedAt: Date | null;
  error: string | null;
}

/** Everything known about one backfill, read in one place for the CLI, the demo and (later) Slack views. */
export interface BackfillReport {
  backfill: BackfillRow;
  consumers: BackfillConsumerRow[];
  targets: BackfillTargetRow[];
  signed: BackfillSignoffRow[];
  steps: StepRow[];
}

export async function loadBackfillReport(db: Queryable, backfillId: number): Promise<BackfillReport> {
  const backfill = await requireBackfill(db, backfillId);
  const { rows: steps } = await db.query<StepRow>(
    `SELECT kind, step_key AS key, status, attempts, started_at AS "startedAt", finished_at AS "finishedAt", error
     FROM backfill.backfill_steps WHERE backfill_id = $1::bigint
     ORDER BY coalesce(finished_at, 'infinity'), array_position(ARRAY['announce','stage','publish','watermark','replay','compare','notify','report'], kind), step_key`,
    [backfillId]);
  return {
    backfill,
    consumers: await listBackfillConsumers(db, backfillId),
    targets: await listTargets(db, backfillId),
    signed: await listBackfillSignoffs(db, backfillId),
    steps,
  };
}
