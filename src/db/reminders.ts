import type { Queryable } from './pool.js';

export interface DueReminder {
  backfillId: number;
  consumer: string;
  /**
   * How long until the reminder is due (0: due now), by the database's clock: the announcement's time is the
   * database's `now()` when its step finished, so a worker whose own clock runs ahead must not do this sum.
   */
  dueInMs: number;
}

/**
 * Announcements delivered but still unanswered, one reminder each: read from the rows, so a reminder lost
 * with Redis is scheduled again by the dispatcher. Delivered: the announce step is done and the backfill still
 * waits at its gate; reminded already: the timeline has its `reminded` event.
 */
export async function findDueReminders(db: Queryable, delayMs: number, backfillId?: number): Promise<DueReminder[]> {
  const { rows } = await db.query<DueReminder>(
    `SELECT s.backfill_id AS "backfillId", s.step_key AS consumer,
            greatest(0, ceil(extract(epoch FROM s.finished_at + $2::int * interval '1 millisecond' - now()) * 1000))::float8 AS "dueInMs"
     FROM backfill.backfill_steps s JOIN backfill.backfills b ON b.id = s.backfill_id
     WHERE s.kind = 'announce' AND s.status = 'done' AND b.state IN ('announced', 'held')
       AND ($1::bigint IS NULL OR s.backfill_id = $1::bigint)
       AND NOT EXISTS (SELECT 1 FROM backfill.acknowledgements a WHERE a.backfill_id = s.backfill_id AND a.consumer = s.step_key)
       AND NOT EXISTS (SELECT 1 FROM backfill.events e WHERE e.backfill_id = s.backfill_id AND e.kind = 'reminded' AND e.detail->>'consumer' = s.step_key)`,
    [backfillId ?? null, delayMs]);
  return rows;
}
