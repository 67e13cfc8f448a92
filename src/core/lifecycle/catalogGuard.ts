import type { BackfillRow } from '../../db/backfills.js';
import { withTransaction, type Pool, type PoolClient } from '../../db/pool.js';
import { catalogChangeOfRow, catalogChangedSentence, changeFacts, retriggerChangeOf } from '../catalog/frozen.js';
import { formatHour } from '../time.js';
import { pauseCaughtSteps } from './pause.js';
import { consumerOf, phaseOf, type StepRef } from './stepGraph.js';

// Defence in depth for a catalog changed behind the bot's back (SQL straight into backfill.pipelines or
// backfill.consumers: `catalog apply` already refuses it while a backfill is in flight). Before a stage or a
// publish writes, its transaction compares the live catalog with what the backfill froze when it was started
// (src/core/catalog/frozen.ts), the pipeline's row read FOR SHARE so that what it compared is what it runs.
// Before a replay calls its consumer, the re-trigger it is about to call is compared with the one frozen for
// that consumer. On a difference nothing is written and nobody is called: the backfill pauses, as a breach
// pauses it, and a continue is refused while the difference stands (src/core/recovery/recovery.ts).

/**
 * In the step's transaction, before its writes: 0 when the catalog still holds what the backfill announced;
 * otherwise the backfill is paused (the sentence in its paused reason and its timeline), every step the pause
 * catches running (this one too) is blocked, and the how-manieth pause this is comes back, to name its message.
 */
export async function pauseIfCatalogChanged(tx: PoolClient, ref: StepRef, token: string, backfill: BackfillRow): Promise<number> {
  const change = await catalogChangeOfRow(tx, backfill, { lock: true });
  if (!change) return 0;
  return pauseCaughtSteps(tx, ref, token, 'catalog', catalogChangedSentence(changeFacts(change), 'nothing more is published'),
    { catalogChanged: change.changed, step: ref.kind, partition: formatHour(new Date(ref.key)) });
}

/**
 * What a replay may do with the re-trigger it read: call it (paused 0; with what changed, when a rollback calls
 * it anyway), or nothing (the how-manieth pause of the backfill this is, to name its message).
 */
export interface RetriggerVerdict {
  paused: number;
  changed?: string[];
}

/**
 * Before a replay calls its consumer with `definition` (the re-trigger just read, the one it would call).
 *
 * A replay of the run pauses the backfill when the definition is not the one frozen for that consumer: its
 * owner acknowledged a re-run of the consumer as it was announced, and a changed one may call another job, host
 * or statement than the one they saw. The data is published by then, and only this replay and the ones after it
 * wait: the pause is the one an operator already knows how to resolve (put the catalog back and continue, or
 * stop or roll back), it names the consumer, and the step stays blocked, not failed, so that a continue calls it
 * as announced. Failing the step instead would end the backfill failed with nothing left to continue, and a retry
 * would spend its attempts in seconds on a difference that only a person can undo.
 *
 * A rollback's replay is not held back: rolling_back cannot pause (nothing would continue it, and the restored
 * rows are already live), and a consumer left on the rows that were taken back is the worse outcome. It calls the
 * definition the catalog holds now, and the timeline says that it differs from the announced one (`changed`).
 */
export async function checkRetrigger(pool: Pool, ref: StepRef, token: string, definition: unknown): Promise<RetriggerVerdict> {
  const consumer = consumerOf(ref);
  const change = await retriggerChangeOf(pool, ref.backfillId, consumer, definition);
  if (!change) return { paused: 0 };
  if (phaseOf(ref) === 'rollback') return { paused: 0, changed: change.changed };
  const paused = await withTransaction(pool, (tx) => pauseCaughtSteps(tx, ref, token, 'catalog',
    catalogChangedSentence(changeFacts(change), `${consumer} is not re-triggered`), { catalogChanged: change.changed, step: ref.kind, consumer }));
  return { paused };
}
