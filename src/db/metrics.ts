import type { Queryable } from './pool.js';

// What GET /metrics reads from the rows when it is scraped (src/metrics.ts): the database says what is true, so
// every process scraped reports the same figures, whichever of them ran the work.

/** How many backfills are in each state (only the states that have any). */
export async function countBackfillsByState(db: Queryable): Promise<{ state: string; count: number }[]> {
  const { rows } = await db.query<{ state: string; count: number }>(
    'SELECT state, count(*)::int AS count FROM backfill.backfills GROUP BY state');
  return rows;
}

export interface OutstandingAcknowledgements {
  count: number;
  /** Seconds since the oldest of them was asked for (its announcement went out); 0 when there are none. */
  oldestSeconds: number;
}

/**
 * Acknowledgements the gates still wait for: the "before" consumers of backfills at their gate (announced,
 * held) with neither an owner's acknowledgement nor an operator's override. Their age runs from when the
 * announcement went out (the announce step finished), or from the announcement itself while it is on its way.
 */
export async function findOutstandingAcknowledgements(db: Queryable, gateStates: readonly string[]): Promise<OutstandingAcknowledgements> {
  const { rows } = await db.query<OutstandingAcknowledgements>(
    `SELECT count(*)::int AS count,
            coalesce(extract(epoch FROM now() - min(coalesce(s.finished_at, b.announced_at))), 0)::float8 AS "oldestSeconds"
     FROM backfill.backfill_consumers bc
     JOIN backfill.backfills b ON b.id = bc.backfill_id
     LEFT JOIN backfill.backfill_steps s
       ON s.backfill_id = bc.backfill_id AND s.kind = 'announce' AND s.step_key = bc.consumer AND s.status = 'done'
     WHERE b.state = ANY ($1::text[]) AND bc.notify_rule = 'before'
       AND NOT EXISTS (SELECT 1 FROM backfill.acknowledgements a WHERE a.backfill_id = bc.backfill_id AND a.consumer = bc.consumer)
       AND NOT EXISTS (SELECT 1 FROM backfill.gate_overrides o WHERE o.backfill_id = bc.backfill_id AND o.consumer = bc.consumer)`,
    [gateStates]);
  return rows[0] ?? { count: 0, oldestSeconds: 0 };
}
