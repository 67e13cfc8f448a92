import type { Queryable } from './pool.js';

// What opened a backfill's gate, per consumer: an owner's acknowledgement (backfill.acknowledgements) or an
// operator's override with a reason (backfill.gate_overrides).

/** Who acknowledged, for which consumer and when, in the order they did. */
export async function listAcknowledgements(db: Queryable, backfillId: number): Promise<{ owner: string; consumer: string; at: Date }[]> {
  const { rows } = await db.query<{ owner: string; consumer: string; at: Date }>(
    'SELECT owner, consumer, acked_at AS at FROM backfill.acknowledgements WHERE backfill_id = $1::bigint ORDER BY acked_at', [backfillId]);
  return rows;
}

/** Which operator overrode which consumer's acknowledgement and why, in the order they did. */
export async function listGateOverrides(db: Queryable, backfillId: number): Promise<{ operator: string; consumer: string; reason: string }[]> {
  const { rows } = await db.query<{ operator: string; consumer: string; reason: string }>(
    'SELECT operator, consumer, reason FROM backfill.gate_overrides WHERE backfill_id = $1::bigint ORDER BY at', [backfillId]);
  return rows;
}

/** Who acknowledged for each consumer (unordered). */
export async function listAcknowledgingOwners(db: Queryable, backfillId: number): Promise<{ consumer: string; owner: string }[]> {
  const { rows } = await db.query<{ consumer: string; owner: string }>(
    'SELECT consumer, owner FROM backfill.acknowledgements WHERE backfill_id = $1::bigint', [backfillId]);
  return rows;
}

/** When each consumer's acknowledgement was overridden (unordered). */
export async function listOverrideTimes(db: Queryable, backfillId: number): Promise<{ consumer: string; at: Date }[]> {
  const { rows } = await db.query<{ consumer: string; at: Date }>(
    'SELECT consumer, at FROM backfill.gate_overrides WHERE backfill_id = $1::bigint', [backfillId]);
  return rows;
}
