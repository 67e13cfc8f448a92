import type { Queryable } from './pool.js';

// What opened a backfill's gate, per consumer: an owner's acknowledgement (backfill.acknowledgements) or an
// operator's override with a reason (backfill.gate_overrides); and, for a backfill over the capacity limits, a
// second operator's approval (backfill.capacity_approvals).

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

/** An owner's acknowledgement for a consumer (`owner` is who pressed the button: the owner, or a delegate acting for them). True when it is new. */
export async function insertAcknowledgement(tx: Queryable, backfillId: number, consumer: string, owner: string): Promise<boolean> {
  const inserted = await tx.query(
    `INSERT INTO backfill.acknowledgements (backfill_id, consumer, owner) VALUES ($1::bigint, $2::text, $3::text)
     ON CONFLICT (backfill_id, consumer) DO NOTHING`, [backfillId, consumer, owner]);
  return inserted.rowCount === 1;
}

/** Takes back the acknowledgements of these consumers (a hold is the newer word). */
export async function deleteAcknowledgements(tx: Queryable, backfillId: number, consumers: string[]): Promise<void> {
  await tx.query('DELETE FROM backfill.acknowledgements WHERE backfill_id = $1::bigint AND consumer = ANY ($2::text[])', [backfillId, consumers]);
}

/** How many of these consumers are acknowledged. */
export async function countAcknowledged(db: Queryable, backfillId: number, consumers: string[]): Promise<number | undefined> {
  const { rows } = await db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM backfill.acknowledgements WHERE backfill_id = $1::bigint AND consumer = ANY ($2::text[])', [backfillId, consumers]);
  return rows[0]?.n;
}

/** An operator's override of a consumer's missing acknowledgement, with the reason. */
export async function insertGateOverride(tx: Queryable, override: { backfillId: number; consumer: string; operator: string; reason: string }): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.gate_overrides (backfill_id, consumer, operator, reason) VALUES ($1::bigint, $2::text, $3::text, $4::text)
     ON CONFLICT DO NOTHING`, [override.backfillId, override.consumer, override.operator, override.reason]);
}

/** A second operator's approval of a backfill over the capacity limits (backfill.capacity_approvals). True when it is new. */
export async function insertCapacityApproval(tx: Queryable, backfillId: number, operator: string): Promise<boolean> {
  const inserted = await tx.query('INSERT INTO backfill.capacity_approvals (backfill_id, operator) VALUES ($1::bigint, $2::text) ON CONFLICT DO NOTHING', [backfillId, operator]);
  return inserted.rowCount === 1;
}

export async function hasCapacityApproval(db: Queryable, backfillId: number): Promise<boolean> {
  return (await findCapacityApproval(db, backfillId)) !== undefined;
}

/** Who gave a backfill its second operator's approval, and when; undefined while nobody has. */
export async function findCapacityApproval(db: Queryable, backfillId: number): Promise<{ operator: string; at: Date } | undefined> {
  const { rows } = await db.query<{ operator: string; at: Date }>('SELECT operator, at FROM backfill.capacity_approvals WHERE backfill_id = $1::bigint', [backfillId]);
  return rows[0];
}
