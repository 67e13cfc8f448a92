import type { Queryable } from './pool.js';
import { prepared } from './prepared.js';

// The catalog fields a backfill runs, live (backfill.pipelines and backfill.consumers) and as they were frozen
// when it was started (backfill.backfills.catalog_hash, catalog_field_hashes; migrations/0021: the field hashes
// are jsonb, so a field frozen later, as the target's columns were, needs no column of its own). What is
// compared, and what a difference means, is src/core/catalog/frozen.ts's.

/**
 * The fields a backfill runs: its pipeline's step, shard rule and target (table, partition, key and measure
 * columns), and the re-trigger of each consumer it replays.
 */
export interface RunCatalog {
  /** Null when the pipeline is gone from the catalog. */
  stepSql: string | null;
  sourceShardsSql: string | null;
  shardsExpected: number | null;
  targetTable: string | null;
  partitionColumn: string | null;
  keyColumns: string[] | null;
  measureColumn: string | null;
  /** By consumer, in name order; null when the consumer is gone from the catalog. */
  retriggers: { consumer: string; retrigger: unknown }[];
}

/**
 * The live catalog fields of this backfill. With `lock`, the pipeline's row is read FOR SHARE: the caller's
 * transaction then runs exactly the step and shard rule it compared, since nothing may change them before it ends.
 */
export async function readRunCatalog(db: Queryable, backfillId: number, pipeline: string, options: { lock?: boolean } = {}): Promise<RunCatalog> {
  // PERF: every step reads this; the consumers' re-triggers come in the pipeline's row (one round trip, not two),
  // and by a statement of their own only when the pipeline is gone.
  const { rows: [row] } = await db.query<Omit<RunCatalog, 'retriggers'> & { retriggers: RunCatalog['retriggers'] }>(
    prepared(`SELECT step_sql AS "stepSql", source_shards_sql AS "sourceShardsSql", shards_expected AS "shardsExpected", target_table AS "targetTable",
            partition_column AS "partitionColumn", key_columns AS "keyColumns", measure_column AS "measureColumn",
            (${retriggersOf('$2')}) AS retriggers
     FROM backfill.pipelines WHERE name = $1::text${options.lock ? ' FOR SHARE' : ''}`), [pipeline, backfillId]);
  const retriggers = row ? row.retriggers : (await db.query<{ retriggers: RunCatalog['retriggers'] }>(`SELECT (${retriggersOf('$1')}) AS retriggers`, [backfillId])).rows[0]?.retriggers ?? [];
  return {
    stepSql: row?.stepSql ?? null, sourceShardsSql: row?.sourceShardsSql ?? null, shardsExpected: row?.shardsExpected ?? null,
    targetTable: row?.targetTable ?? null, partitionColumn: row?.partitionColumn ?? null, keyColumns: row?.keyColumns ?? null, measureColumn: row?.measureColumn ?? null,
    retriggers,
  };
}

/** The re-trigger of each consumer the backfill (the parameter `backfillParam`) replays, by consumer in name order, as one json array. */
function retriggersOf(backfillParam: string): string {
  return `SELECT coalesce(json_agg(json_build_object('consumer', bc.consumer, 'retrigger', c.retrigger) ORDER BY bc.consumer COLLATE "C"), '[]'::json)
     FROM backfill.backfill_consumers bc LEFT JOIN backfill.consumers c ON c.name = bc.consumer WHERE bc.backfill_id = ${backfillParam}::bigint`;
}

export interface FrozenCatalog {
  backfillId: number;
  pipeline: string;
  state: string;
  hash: string;
  /**
   * By field (step, sourceShards, shardsExpected, targetTable, partitionColumn, keyColumns, measureColumn,
   * retrigger:<consumer>), each its own hash; a backfill started before the target's columns were frozen has none for them.
   */
  fieldHashes: Record<string, string>;
}

export async function recordFrozenCatalog(tx: Queryable, backfillId: number, hash: string, fieldHashes: Record<string, string>): Promise<void> {
  await tx.query('UPDATE backfill.backfills SET catalog_hash = $2::text, catalog_field_hashes = $3::jsonb WHERE id = $1::bigint',
    [backfillId, hash, JSON.stringify(fieldHashes)]);
}

const SELECT_FROZEN = `SELECT id AS "backfillId", pipeline, state, catalog_hash AS hash, catalog_field_hashes AS "fieldHashes"
  FROM backfill.backfills WHERE catalog_hash IS NOT NULL`;

/** What the backfill froze when it was started; undefined when it froze nothing (started before migration 0021). */
export async function findFrozenCatalog(db: Queryable, backfillId: number): Promise<FrozenCatalog | undefined> {
  const { rows } = await db.query<FrozenCatalog>(prepared(`${SELECT_FROZEN} AND id = $1::bigint`), [backfillId]);
  return rows[0];
}

/** Every backfill in one of `states` that froze its catalog fields, by id. */
export async function listFrozenCatalogs(db: Queryable, states: readonly string[]): Promise<FrozenCatalog[]> {
  const { rows } = await db.query<FrozenCatalog>(`${SELECT_FROZEN} AND state = ANY($1::text[]) ORDER BY id`, [states]);
  return rows;
}
