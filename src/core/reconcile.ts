import type { Queryable } from '../db/pool.js';
import type { Pipeline } from '../db/pipelines.js';

/** Two sets of rows of one partition compared by the pipeline's stable key. */
export interface Reconciliation {
  keysMissing: number;
  keysAdded: number;
  keysDuplicated: number;
  keysChanged: number;
  totalBefore: string;
  totalAfter: string;
}

/**
 * A row set as SQL yielding one column `row_data jsonb`, with its own bound parameters; the two sets are
 * compared server-side (rows never travel through Node).
 */
export interface RowSet {
  sql: string;
  params: unknown[];
}

/**
 * Keys missing from `after`, added in it, duplicated in it, and present in both with different rows; and the
 * measure's total on each side. Parameters of the two sets are renumbered after the key columns ($1).
 */
export async function reconcileByKey(db: Queryable, pipeline: Pipeline, before: RowSet, after: RowSet): Promise<Reconciliation> {
  const shift = (sql: string, by: number) => sql.replace(/\$(\d+)/g, (_m, n: string) => `$${Number(n) + by}`);
  const beforeSql = shift(before.sql, 2);
  const afterSql = shift(after.sql, 2 + before.params.length);
  const { rows } = await db.query<Reconciliation>(
    `WITH a AS (SELECT backfill.row_key(row_data, $1::text[]) AS k, row_data FROM (${beforeSql}) x),
          b AS (SELECT backfill.row_key(row_data, $1::text[]) AS k, row_data FROM (${afterSql}) y)
     SELECT (SELECT count(DISTINCT k) FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k))::int AS "keysMissing",
            (SELECT count(DISTINCT k) FROM b WHERE NOT EXISTS (SELECT 1 FROM a WHERE a.k = b.k))::int AS "keysAdded",
            (SELECT count(*) FROM (SELECT k FROM b GROUP BY k HAVING count(*) > 1) d)::int AS "keysDuplicated",
            (SELECT count(DISTINCT a.k) FROM a JOIN b ON a.k = b.k WHERE a.row_data IS DISTINCT FROM b.row_data)::int AS "keysChanged",
            (SELECT coalesce(sum((row_data ->> $2::text)::numeric), 0)::numeric(18,2)::text FROM a) AS "totalBefore",
            (SELECT coalesce(sum((row_data ->> $2::text)::numeric), 0)::numeric(18,2)::text FROM b) AS "totalAfter"`,
    [pipeline.keyColumns, pipeline.measureColumn, ...before.params, ...after.params]);
  const row = rows[0];
  if (!row) throw new Error('reconciliation returned no row');
  return row;
}
