import type { Queryable } from './pool.js';
import { prepared } from './prepared.js';

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

/**
 * The prior rows of the partition are saved, once: a second save of the same partition by the same backfill is
 * refused by the primary key (false). The tables are a swap's, when it published by swap.
 */
export async function insertPreservedPartition(tx: Queryable, backfillId: number, hour: Date, rows: number, tables: { saved: string; published: string } | null): Promise<boolean> {
  const once = await tx.query(
    prepared(`INSERT INTO backfill.preserved_partitions (backfill_id, partition_hour, rows_saved, saved_table, published_table)
     VALUES ($1::bigint, $2::timestamptz, $3::bigint, $4::text, $5::text)
     ON CONFLICT DO NOTHING`), [backfillId, hour, rows, tables?.saved ?? null, tables?.published ?? null]);
  return once.rowCount === 1;
}

/** The next generation of this partition, kept with the backfill that wrote it (the caller holds the partition lock). */
export async function insertNextGeneration(tx: Queryable, pipeline: string, hour: Date, backfillId: number): Promise<number | undefined> {
  const { rows } = await tx.query<{ generation: number }>(
    prepared(`INSERT INTO backfill.partition_generations (pipeline, partition_hour, generation, backfill_id)
     SELECT $1::text, $2::timestamptz, coalesce(max(generation), 0) + 1, $3::bigint
     FROM backfill.partition_generations WHERE pipeline = $1::text AND partition_hour = $2::timestamptz
     RETURNING generation`), [pipeline, hour, backfillId]);
  return rows[0]?.generation;
}

/** Where a partition the backfill published by swap went: the prior partition it keeps, and the published one's name. */
export async function findSwappedPartition(db: Queryable, backfillId: number, hour: Date): Promise<{ savedTable: string; publishedTable: string; rowsSaved: number } | undefined> {
  const { rows } = await db.query<{ savedTable: string; publishedTable: string; rowsSaved: number }>(
    `SELECT saved_table AS "savedTable", published_table AS "publishedTable", rows_saved::int AS "rowsSaved"
     FROM backfill.preserved_partitions WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz AND saved_table IS NOT NULL`, [backfillId, hour]);
  return rows[0];
}
