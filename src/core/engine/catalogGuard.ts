import type { BackfillRow } from '../../db/backfills.js';
import type { PoolClient } from '../../db/pool.js';
import { catalogChangeOf, catalogChangedSentence } from '../catalog/frozen.js';
import { formatHour } from '../time.js';
import { pauseCaughtSteps } from './pause.js';
import type { StepRef } from './stepGraph.js';

// Defence in depth for a catalog changed behind the bot's back (SQL straight into backfill.pipelines or
// backfill.consumers: `catalog apply` already refuses it while a backfill is in flight). Before a stage or a
// publish writes, its transaction compares the live catalog with what the backfill froze when it was started
// (src/core/catalog/frozen.ts), the pipeline's row read FOR SHARE so that what it compared is what it runs.
// On a difference nothing is written: the backfill pauses, as a breach pauses it, and a continue is refused
// while the difference stands (src/core/recovery/recovery.ts).

/**
 * In the step's transaction, before its writes: 0 when the catalog still holds what the backfill announced;
 * otherwise the backfill is paused (the sentence in its paused reason and its timeline), every step the pause
 * catches running (this one too) is blocked, and the how-manieth pause this is comes back, to name its message.
 */
export async function pauseIfCatalogChanged(tx: PoolClient, ref: StepRef, token: string, backfill: BackfillRow): Promise<number> {
  const change = await catalogChangeOf(tx, backfill.id, { lock: true });
  if (!change) return 0;
  return pauseCaughtSteps(tx, ref, token, catalogChangedSentence(change), { catalogChanged: change.changed, step: ref.kind, partition: formatHour(new Date(ref.key)) });
}
