import type { Queryable } from '../db/pool.js';
import { rowText, type RowStore } from './rowStore.js';

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
 * Rows of the target's shape, as `FROM … WHERE …` over an alias (t unless given), with the parameters of a run:
 * $1 backfill, $2 generation, $3 partition hour.
 */
export type RowSource = string;

export const liveSource = (store: RowStore, alias = 't'): RowSource => `${store.target} ${alias} WHERE ${alias}.${store.partition} = $3::timestamptz`;
export const runSource = (store: RowStore, table: string, alias = 't'): RowSource =>
  `${table} ${alias} WHERE ${alias}.bf_backfill = $1::bigint AND ${alias}.bf_generation = $2::int AND ${alias}.${store.partition} = $3::timestamptz`;

/**
 * Keys missing from `after`, added in it, duplicated in it, and present in both with different rows; and the
 * measure's total on each side. One statement: each side grouped by its typed key columns, then one full join
 * on them (a hash or merge join: linear in the rows, whatever the statistics say).
 */
export async function reconcileByKey(db: Queryable, store: RowStore, run: [number, number, Date], before: RowSource, after: RowSource): Promise<Reconciliation> {
  const keys = store.keys.join(', ');
  const side = (source: RowSource) =>
    `SELECT ${store.keys.map((key) => `t.${key}`).join(', ')}, count(*) AS n, sum(t.${store.measure}) AS total, min(${rowText(store, 't')}) AS r
     FROM ${source} GROUP BY ${store.keys.map((key) => `t.${key}`).join(', ')}`;
  const { rows } = await db.query<Reconciliation>(
    `SELECT count(*) FILTER (WHERE b.n IS NULL)::int AS "keysMissing",
            count(*) FILTER (WHERE a.n IS NULL)::int AS "keysAdded",
            count(*) FILTER (WHERE b.n > 1)::int AS "keysDuplicated",
            count(*) FILTER (WHERE a.n IS NOT NULL AND b.n IS NOT NULL AND a.r IS DISTINCT FROM b.r)::int AS "keysChanged",
            coalesce(sum(a.total), 0)::numeric(18,2)::text AS "totalBefore",
            coalesce(sum(b.total), 0)::numeric(18,2)::text AS "totalAfter"
     FROM (${side(before)}) a FULL JOIN (${side(after)}) b USING (${keys})`, run);
  const row = rows[0];
  if (!row) throw new Error('reconciliation returned no row');
  return row;
}
