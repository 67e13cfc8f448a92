import { findBackfillConsumer } from '../../db/backfillConsumers.js';
import { recordEvent } from '../../db/events.js';
import { findDueReminders } from '../../db/reminders.js';
import { intentKey } from '../messenger.js';
import { storedAnnouncement } from '../notices.js';
import type { StepContext } from '../engine/steps.js';

/** Re-sends one announcement if it is still unanswered; records that it did. */
export async function sendReminder(ctx: StepContext, backfillId: number, consumer: string): Promise<boolean> {
  const due = (await findDueReminders(ctx.pool, 0, backfillId)).find((r) => r.consumer === consumer);
  if (!due) return false;
  const row = await findBackfillConsumer(ctx.pool, backfillId, consumer);
  if (!row) return false;
  await ctx.messenger.remind({ backfillId, consumer, owner: row.owner, notice: storedAnnouncement(row), intent: intentKey(backfillId, 'remind', consumer) });
  await recordEvent(ctx.pool, { backfillId, actor: 'backfill-bot', kind: 'reminded', detail: { consumer, owner: row.owner } });
  return true;
}
