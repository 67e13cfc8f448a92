import { findBackfillConsumer } from '../../db/backfillConsumers.js';
import { recordEvent } from '../../db/events.js';
import { findDueReminders } from '../../db/reminders.js';
import { intentKey } from '../messenger.js';
import { storedAnnouncement } from '../notices.js';
import type { StepContext } from '../procedure.js';

/**
 * Re-sends one announcement if it is still unanswered and ANNOUNCE_REMINDER_MS has passed by the database's
 * clock; records that it did. A job that comes early (its delay was counted by a clock that runs ahead) sends
 * nothing, and the dispatcher schedules it again.
 */
export async function sendReminder(ctx: StepContext, backfillId: number, consumer: string): Promise<boolean> {
  const due = (await findDueReminders(ctx.pool, ctx.config.ANNOUNCE_REMINDER_MS, backfillId)).find((r) => r.consumer === consumer);
  if (!due || due.dueInMs > 0) return false;
  const row = await findBackfillConsumer(ctx.pool, backfillId, consumer);
  if (!row) return false;
  await ctx.messenger.remind({ backfillId, consumer, owner: row.owner, notice: storedAnnouncement(row), intent: intentKey(backfillId, 'remind', consumer) });
  await recordEvent(ctx.pool, { backfillId, actor: 'backfill-bot', kind: 'reminded', detail: { consumer, owner: row.owner } });
  return true;
}
