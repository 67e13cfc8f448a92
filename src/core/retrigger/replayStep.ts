import { findRetrigger } from '../../db/consumers.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction } from '../../db/pool.js';
import { listTargetHours } from '../../db/targets.js';
import { checkRetrigger } from '../lifecycle/catalogGuard.js';
import { ENGINE, type StepContext, type StepOutcome } from '../lifecycle/runStep.js';
import { tellIncident } from '../lifecycle/stepDelivery.js';
import { finishStep } from '../lifecycle/stepClaims.js';
import { consumerOf, phaseOf, type StepRef } from '../lifecycle/stepGraph.js';
import { intentKey } from '../messenger.js';
import { parseRetrigger } from './definition.js';
import { runRemoteRetrigger, runSqlRetrigger } from './retrigger.js';

// The replay step: one consumer re-triggered, in dependency order (the step graph's 'replays depended on'),
// after the publish and again after a rollback.

export async function replay(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const consumer = consumerOf(ref);
  const rollback = phaseOf(ref) === 'rollback';
  const definition = await findRetrigger(ctx.pool, consumer);
  // What it calls is what its owner was told of: a re-trigger changed since pauses the backfill instead (catalogGuard.ts).
  const verdict = await checkRetrigger(ctx.pool, ref, token, definition);
  if (verdict.paused > 0) {
    await tellIncident(ctx, ref, () => ctx.messenger.reportReconciliation(ref.backfillId, intentKey(ref.backfillId, 'paused', String(verdict.paused))));
    return 'blocked';
  }
  const noted = verdict.changed ? { catalogChanged: verdict.changed } : {};
  const retrigger = parseRetrigger(consumer, definition);
  const hours = await listTargetHours(ctx.pool, ref.backfillId);
  if (retrigger.kind === 'sql') {
    await withTransaction(ctx.pool, async (tx) => {
      const result = await runSqlRetrigger(tx, retrigger, hours);
      await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'replayed', detail: { consumer, via: 'sql', rollback, ...result, ...noted } });
      await finishStep(tx, ref, token, { via: 'sql', ...result });
    });
    return 'done';
  }
  // Webhook, BullMQ job or REST call: outside any transaction (it may wait for the consumer's run to end),
  // under the replay's own key, so a retry after a lost commit is recognised by the receiver.
  const result = await runRemoteRetrigger(retrigger, { backfillId: ref.backfillId, consumer, partitions: hours, rollback }, { config: ctx.config, replayJobs: ctx.replayJobs });
  await withTransaction(ctx.pool, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'replayed', detail: { consumer, ...result, rollback, ...noted } });
    await finishStep(tx, ref, token, result);
  });
  return 'done';
}
