import {
  listBackfillConsumers, listBackfillSignoffs, listTargets, requireBackfill,
  type BackfillConsumerRow, type BackfillRow, type BackfillSignoffRow, type BackfillTargetRow,
} from '../../db/backfills.js';
import { findCapacityApproval } from '../../db/acknowledgements.js';
import type { Queryable } from '../../db/pool.js';
import { listSteps, type StepRow } from '../../db/steps.js';
import { catalogChangeOf } from '../catalog/frozen.js';
import { listEscalations } from '../../db/escalations.js';
import { escalationFacts, type EscalationStepFacts } from '../announce/escalation.js';

/** Everything known about one backfill, read in one place for the CLI, the demo and (later) Slack views. */
export interface BackfillReport {
  backfill: BackfillRow;
  consumers: BackfillConsumerRow[];
  targets: BackfillTargetRow[];
  signed: BackfillSignoffRow[];
  steps: StepRow[];
  /** Each "before" reader's escalation steps, as frozen with the backfill: due, sent, stopped. */
  escalations: EscalationStepFacts[];
  /**
   * The second operator's approval of a backfill over the capacity limits (`backfill.needsSecondApproval`): who
   * gave it and when; null while nobody has (and for a backfill that needs none).
   */
  secondApproval: { operator: string; at: Date } | null;
  /**
   * While it is paused: the fields it froze that the live catalog no longer holds (empty: the catalog is as
   * announced), so that where it stands says whether a continue would be refused. Unset in any other state.
   */
  catalogChanged?: string[];
}

export async function loadBackfillReport(db: Queryable, backfillId: number): Promise<BackfillReport> {
  const backfill = await requireBackfill(db, backfillId);
  const steps = await listSteps(db, backfillId);
  return {
    backfill,
    consumers: await listBackfillConsumers(db, backfillId),
    targets: await listTargets(db, backfillId),
    signed: await listBackfillSignoffs(db, backfillId),
    steps,
    escalations: escalationFacts(await listEscalations(db, backfillId)),
    secondApproval: (await findCapacityApproval(db, backfillId)) ?? null,
    ...(backfill.state === 'paused' ? { catalogChanged: (await catalogChangeOf(db, backfillId))?.changed ?? [] } : {}),
  };
}
