import type { Queryable } from '../../src/db/pool.js';

/**
 * Every staged or saved row of the orders store, as one derived table aliased `alias` (the kind unless given):
 * the store's shared table and each hour's table of its own that a rewrite staged apart
 * (p<hour>_b<id>_g1_staged and _saved: src/core/recompute/storeTables.ts), all of one shape. Read it where the
 * shared table was read alone: a backfill's rows are in one or the other, by the size of its hours.
 */
export async function storedRows(db: Queryable, kind: 'staged' | 'saved', alias: string = kind): Promise<string> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'bf_orders' AND c.relkind = 'r' AND c.relname ~ ('^p[0-9]{10}_b[0-9]+_g[0-9]+_' || $1::text || '$') ORDER BY c.relname`, [kind]);
  const tables = [`bf_orders.${kind}`, ...rows.map((row) => row.name)];
  return `(${tables.map((table) => `SELECT * FROM ${table}`).join(' UNION ALL ')}) AS ${alias}`;
}
