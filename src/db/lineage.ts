import type { Queryable } from './pool.js';

// What a rollback restores: the generations each publish created (backfill.partition_generations) and the prior
// rows each backfill saved (backfill.preserved_partitions), both described in migration 0005.

/** Per later backfill, the partitions (of these) where its generation stands over this backfill's. */
export async function listLaterGenerations(tx: Queryable, backfillId: number, hours: Date[]): Promise<{ backfillId: number; hours: Date[] }[]> {
  const { rows } = await tx.query<{ backfillId: number; hours: Date[] }>(
    `SELECT later.backfill_id AS "backfillId", array_agg(later.partition_hour ORDER BY later.partition_hour) AS hours
     FROM backfill.partition_generations mine
     JOIN backfill.partition_generations later ON later.pipeline = mine.pipeline AND later.partition_hour = mine.partition_hour
       AND later.generation > mine.generation AND later.rolled_back_at IS NULL
     WHERE mine.backfill_id = $1::bigint AND mine.partition_hour = ANY ($2::timestamptz[])
     GROUP BY later.backfill_id ORDER BY later.backfill_id`, [backfillId, hours]);
  return rows;
}

export async function markGenerationRolledBack(tx: Queryable, backfillId: number, hour: Date): Promise<void> {
  await tx.query('UPDATE backfill.partition_generations SET rolled_back_at = clock_timestamp() WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz',
    [backfillId, hour]);
}

/** How many prior rows the backfill saved of the partition (undefined when it saved none). */
export async function findRowsSaved(tx: Queryable, backfillId: number, hour: Date): Promise<number | undefined> {
  const { rows } = await tx.query<{ n: number }>('SELECT rows_saved::int AS n FROM backfill.preserved_partitions WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz',
    [backfillId, hour]);
  return rows[0]?.n;
}
