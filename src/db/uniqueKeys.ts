import type { Queryable } from './pool.js';

// Whether a relation's own unique indexes prove that no key repeats in it: what lets a measure of a partition
// skip counting its distinct keys (src/db/reconcile.ts, measureStaged).

/**
 * True when every relation has a unique index whose key columns are all among `columns` (the pipeline's
 * partition and key columns, unquoted): then no two of its rows share those columns' values where none is NULL,
 * so within one hour no key repeats. Only an index that says so under the join's own `=` counts: valid, checked
 * at once (not deferred), over whole rows (no predicate) and plain columns (no expression), each in its type's
 * default operator class and the column's own collation. Any other index, or none, proves nothing (false).
 */
export async function keysUniqueByIndexes(db: Queryable, relations: readonly string[], columns: readonly string[]): Promise<boolean> {
  if (relations.length === 0) return false;
  const { rows } = await db.query<{ proven: boolean }>(
    `SELECT coalesce(bool_and(EXISTS (
       SELECT 1 FROM pg_index i
       WHERE i.indrelid = r.rel AND i.indisunique AND i.indimmediate AND i.indisvalid AND i.indisready
         AND i.indpred IS NULL AND i.indexprs IS NULL
         AND NOT EXISTS (
           SELECT 1 FROM generate_series(0, i.indnkeyatts - 1) AS k(n)
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k.n]
           JOIN pg_opclass o ON o.oid = i.indclass[k.n]
           WHERE a.attname <> ALL ($2::text[]) OR NOT o.opcdefault OR i.indcollation[k.n] <> a.attcollation))), false) AS proven
     FROM unnest($1::regclass[]) AS r(rel)`,
    [relations, columns]);
  return rows[0]?.proven === true;
}
