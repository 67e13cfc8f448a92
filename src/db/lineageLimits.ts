import type { Queryable } from './pool.js';

// The bounds on one lineage sender (migrations/0017_lineage_sender_limits.sql): its open proposals, and the read
// rows it may write per hour (a token bucket). Both run inside the ingest's transaction, so a refused event
// leaves no trace, and a sender's concurrent requests serialize on its lock or its bucket's row.

/** Held until the transaction ends: a sender's proposals are counted and created one request at a time. */
export async function lockSenderProposals(tx: Queryable, sender: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtext('backfill.lineage_sender'), hashtext($1::text))`, [sender]);
}

export async function countOpenProposals(tx: Queryable, sender: string): Promise<number> {
  const { rows } = await tx.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM backfill.lineage_proposals WHERE proposed_by = $1::text AND state = 'proposed'`, [sender]);
  return rows[0]?.n ?? 0;
}

/**
 * Takes `cost` read rows from the sender's bucket (`perHour` deep, refilled at `perHour` an hour). Returns 0
 * when taken, else the seconds until the bucket holds `cost` again (nothing is taken then).
 */
export async function takeReadAllowance(tx: Queryable, sender: string, cost: number, perHour: number): Promise<number> {
  await tx.query(
    `INSERT INTO backfill.lineage_read_buckets (sender, tokens, refilled_at) VALUES ($1::text, $2::float8, clock_timestamp())
     ON CONFLICT (sender) DO NOTHING`, [sender, perHour]);
  const available = `least($2::float8, b.tokens + extract(epoch FROM n.at - b.refilled_at) * $2::float8 / 3600)`;
  const taken = await tx.query(
    `UPDATE backfill.lineage_read_buckets b SET tokens = ${available} - $3::float8, refilled_at = n.at
     FROM (SELECT clock_timestamp() AS at) n
     WHERE b.sender = $1::text AND ${available} >= $3::float8`, [sender, perHour, cost]);
  if (taken.rowCount === 1) return 0;
  const { rows } = await tx.query<{ seconds: number }>(
    `SELECT ceil(greatest(1, ($3::float8 - ${available}) * 3600 / $2::float8))::int AS seconds
     FROM backfill.lineage_read_buckets b, (SELECT clock_timestamp() AS at) n WHERE b.sender = $1::text`, [sender, perHour, cost]);
  return rows[0]?.seconds ?? 3600;
}
