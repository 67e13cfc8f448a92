// The benchmark's data: the month-end demo, with warehouse.orders_raw of the benchmarked hours replaced by
// N generated rows per hour, and warehouse.orders of those hours built from them by the pipeline's step as it
// ran in November (v1). The deployed step (v2) reads the same rows differently: the quoted, lowercase '"sek"'
// currency of night 15's corrupt batch finds no rate under v1 (booked 1:1) and the SEK rate under v2, so
// every benchmarked partition has changed rows and a lower total: the backfill has a diff to publish.
//
// Everything is generated in SQL (generate_series) from the hour's index and the row's number: the same
// arguments always give the same rows, and no row passes through Node.

import type { Pipeline } from '../src/db/pipelines.js';
import { quoteIdent, quoteQualified, type Pool, type PoolClient, type Queryable } from '../src/db/pool.js';
import { DEMO_MONTH, STEP_SQL_V1 } from '../dev/demo/constants.js';
import { storeSchemaName } from '../src/db/rowStore.js';
import { HOUR_MS } from '../src/core/time.js';

/** The first benchmarked hour: a clean day of the month-end seed (no flagged night), as the bench always used. */
export const FIRST_HOUR = '2026-11-02T00:00:00.000Z';
/** The last hour with fx rates and under the seed's watermark (2026-11-30 23:00). */
const LAST_HOUR = Date.parse(DEMO_MONTH.lastHour);
/** order_id = BASE + hour index × SPAN + row number: unique, and apart from the demo's own ids (1e8 + …). */
const ORDER_ID_BASE = 1_000_000_000;
const ORDER_ID_SPAN = 10_000_000;
export const MAX_ROWS_PER_PARTITION = ORDER_ID_SPAN - 1;
export const MAX_PARTITIONS = (LAST_HOUR - Date.parse(FIRST_HOUR)) / HOUR_MS + 1;

/** 20 slots, so 1 row in 20 carries night 15's corrupt currency text; the rest roughly the demo's mix. */
const CURRENCY_SLOTS = [
  'USD', 'USD', 'USD', 'USD', 'USD', 'USD', 'USD', 'EUR', 'EUR', 'EUR',
  'EUR', 'GBP', 'GBP', 'GBP', 'CAD', 'CAD', 'AUD', 'AUD', 'SEK', '"sek"',
];

export function benchmarkHours(partitions: number): Date[] {
  const first = Date.parse(FIRST_HOUR);
  return Array.from({ length: partitions }, (_, index) => new Date(first + index * HOUR_MS));
}

/**
 * Replaces the raw rows of the hours with `rowsPerPartition` generated rows each: all three shards (row n is
 * in shard 1 + n mod 3), 40 merchants, the currency mix above, amounts 5.00 … 1,504.99, landed 49, 53 and 57
 * minutes past the hour as the demo's shards do. The amount's product is taken in bigint: in int it overflows from
 * row 271,189 on (7919 × n > 2³¹), and the same rows come out below that.
 */
export async function inflateRawOrders(pool: Pool, hours: Date[], rowsPerPartition: number): Promise<number> {
  await pool.query('DELETE FROM warehouse.orders_raw WHERE event_hour = ANY ($1::timestamptz[])', [hours]);
  const inserted = await pool.query(
    `INSERT INTO warehouse.orders_raw (order_id, shard, event_hour, merchant_id, currency_raw, amount_local, landed_at)
     SELECT $3::bigint + h.i * $4::bigint + g.n, 1 + g.n % 3, h.hour, 1001 + (g.n * 7) % 40,
            ($5::text[])[1 + (g.n * 13 + h.i) % 20],
            round((((g.n::bigint * 7919 + h.i * 104729) % 150000) + 500) / 100.0, 2),
            h.hour + make_interval(mins => 45 + 4 * (1 + g.n % 3))
     FROM (SELECT hour, ((extract(epoch FROM hour) - extract(epoch FROM $6::timestamptz)) / 3600)::bigint AS i
           FROM unnest($1::timestamptz[]) AS hour) h
     CROSS JOIN generate_series(1, $2::int) AS g(n)
     ORDER BY h.hour, g.n`,
    [hours, rowsPerPartition, ORDER_ID_BASE, ORDER_ID_SPAN, CURRENCY_SLOTS, DEMO_MONTH.firstHour]);
  return inserted.rowCount ?? 0;
}

/**
 * warehouse.orders of the hours as the November step built them (v1), one transaction per hour like the
 * normal run; the partition log's row counts follow. Also how every backfill repetition starts over.
 */
export async function buildOrdersAsInNovember(pool: Pool, pipeline: Pipeline, hours: Date[]): Promise<number> {
  const client = await pool.connect();
  let rows = 0;
  try {
    for (const hour of hours) rows += await replaceWith(client, pipeline, STEP_SQL_V1, hour);
  } finally {
    client.release();
  }
  await pool.query(
    `UPDATE backfill.partition_log l SET row_count = o.n
     FROM (SELECT partition_hour, count(*) AS n FROM warehouse.orders WHERE partition_hour = ANY ($2::timestamptz[]) GROUP BY partition_hour) o
     WHERE l.pipeline = $1::text AND l.partition_hour = o.partition_hour`, [pipeline.name, hours]);
  return rows;
}

/** BEGIN; DELETE the hour; the step's INSERT … SELECT; COMMIT: what the raw row of the benchmark times. */
export async function replaceWith(client: PoolClient, pipeline: Pipeline, stepSql: string, hour: Date): Promise<number> {
  const del = `DELETE FROM ${quoteQualified(pipeline.targetTable)} WHERE ${quoteIdent(pipeline.partitionColumn)} = $1::timestamptz`;
  await client.query('BEGIN');
  try {
    await client.query(del, [hour]);
    const inserted = await client.query(stepSql, [hour]);
    await client.query('COMMIT');
    return inserted.rowCount ?? 0;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/** The tables of the pipeline's row store, when a backfill has created them (the first start does). */
export async function storeTables(db: Queryable, pipeline: Pipeline): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1::text AND c.relkind IN ('r', 'p') ORDER BY c.relname`, [storeSchemaName(pipeline.name)]);
  return rows.map((row) => row.name);
}

/**
 * Empties the row store: every backfill repetition then stages into tables as a pipeline's first backfill
 * finds them, and earlier repetitions' staged and saved generations (which retention would drop) do not
 * grow the indexes under later ones.
 */
export async function clearRowStore(pool: Pool, pipeline: Pipeline): Promise<void> {
  const tables = await storeTables(pool, pipeline);
  // A swap's tables of their own (staged, saved, swapped back out) go; attached partitions live in the target's schema.
  const swapTables = tables.filter((table) => /\.(")?p\d{10}_/.test(table));
  if (swapTables.length > 0) await pool.query(`DROP TABLE ${swapTables.join(', ')}`);
  const shared = tables.filter((table) => !swapTables.includes(table));
  if (shared.length > 0) await pool.query(`TRUNCATE ${shared.join(', ')}`);
}

/**
 * Autovacuum is off on the bench machine: dead rows and missing statistics would otherwise drift from one
 * repetition to the next. Every timed run starts after this (it is never timed).
 */
export async function vacuumAnalyze(pool: Pool, pipeline: Pipeline): Promise<void> {
  const tables = ['warehouse.orders', 'warehouse.orders_raw', 'warehouse.fx_rates', ...(await storeTables(pool, pipeline))];
  for (const table of tables) await pool.query(`VACUUM ANALYZE ${table}`);
}

export async function vacuumTarget(pool: Pool, pipeline: Pipeline): Promise<void> {
  await pool.query(`VACUUM ${quoteQualified(pipeline.targetTable)}`);
}

/** What the target is: publish by swap applies to a declaratively partitioned one. */
export async function targetShape(db: Queryable, pipeline: Pipeline): Promise<'partitioned' | 'plain'> {
  const { rows } = await db.query<{ kind: string }>('SELECT relkind::text AS kind FROM pg_class WHERE oid = $1::regclass', [pipeline.targetTable]);
  return rows[0]?.kind === 'p' ? 'partitioned' : 'plain';
}

/**
 * Puts the benchmarked hours back as they were before a backfill: built by the November step, the watermark
 * where the seed left it (a backfill moves it back to the hour before its range).
 */
export async function startOver(pool: Pool, pipeline: Pipeline, hours: Date[], watermark: Date): Promise<void> {
  await buildOrdersAsInNovember(pool, pipeline, hours);
  await pool.query('UPDATE backfill.watermarks SET processed_through = $2::timestamptz, updated_by = $3::text WHERE pipeline = $1::text',
    [pipeline.name, watermark, 'bench']);
}
