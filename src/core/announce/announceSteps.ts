import { recordAnnouncementLanded } from '../../db/backfillConsumers.js';
import { requireBackfill } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction } from '../../db/pool.js';
import { ENGINE, type StepContext, type StepOutcome } from '../lifecycle/runStep.js';
import { backfillConsumer, deliver, waitOutRateLimits } from '../lifecycle/stepDelivery.js';
import { finishStep } from '../lifecycle/stepClaims.js';
import { consumerOf, phaseOf, type StepRef } from '../lifecycle/stepGraph.js';
import { intentKey } from '../messenger.js';
import { storedAnnouncement, type Notice } from '../notices.js';

// The announce step (each owner told first, before anything is deleted) and the notify step (owners whose rule
// is "after", told once the run, or its rollback, is done).

/** Sends one owner the announcement generated when the backfill was created; the gate waits for it. */
export async function announce(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const row = await backfillConsumer(ctx, ref);
  const { owner } = row;
  const landed = await deliver(ctx, ref, token, () =>
    ctx.messenger.announce({ backfillId: ref.backfillId, consumer: ref.key, owner, notice: storedAnnouncement(row), intent: intentKey(ref.backfillId, 'announce', ref.key) },
      waitOutRateLimits(ctx, ref, token)));
  if (landed === 'undeliverable') return 'undeliverable';
  await withTransaction(ctx.pool, async (tx) => {
    await recordAnnouncementLanded(tx, ref.backfillId, ref.key, { channel: landed?.channel ?? null, ts: landed?.ts ?? null });
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'announcement_sent', detail: { consumer: ref.key, owner } });
    await finishStep(tx, ref, token, { owner, channel: landed?.channel ?? null, ts: landed?.ts ?? null });
  });
  return 'done';
}

export async function notify(ctx: StepContext, ref: StepRef, token: string): Promise<StepOutcome> {
  const backfill = await requireBackfill(ctx.pool, ref.backfillId);
  const { owner } = await backfillConsumer(ctx, ref);
  const consumer = consumerOf(ref);
  const rollback = phaseOf(ref) === 'rollback';
  const about = { backfillId: backfill.id, pipeline: backfill.pipeline, consumer, totalBefore: backfill.totalBefore };
  const notice: Notice = rollback
    ? { kind: 'rolled_back', ...about, rolledBackBy: backfill.rolledBackBy }
    : { kind: 'after_run', ...about, reason: backfill.reason, totalAfter: backfill.totalAfter, diff: backfill.diff };
  const sent = await deliver(ctx, ref, token, () =>
    ctx.messenger.notifyOwner({ backfillId: backfill.id, consumer, owner, notice, intent: intentKey(backfill.id, 'notify', ref.key) }, waitOutRateLimits(ctx, ref, token)));
  if (sent === 'undeliverable') return 'undeliverable';
  await withTransaction(ctx.pool, async (tx) => {
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'notified', detail: { consumer, owner, after: true, rollback } });
    await finishStep(tx, ref, token, { owner });
  });
  return 'done';
}
