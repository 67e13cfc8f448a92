// A table staged for a swap is made from the target's shape spelled out from the catalog (readTargetShape), not by
// `LIKE`, which would hold a lock on the target until the stage commits. Real PostgreSQL: the two ways must make
// the same table (columns, types, collations, NOT NULL, defaults, generated columns, storage, CHECK constraints),
// so that ATTACH takes it as a partition of the target.

import { afterEach, describe, expect, it } from 'vitest';
import { createStagedTable, readTargetShape } from '../../src/db/swap.js';
import type { RowStore } from '../../src/db/rowStore.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

let db: TestDatabase | undefined;

afterEach(async () => {
  await db?.drop();
  db = undefined;
});

const HOUR = new Date('2026-11-15T05:00:00Z');
const NEXT = new Date('2026-11-15T06:00:00Z');

/** Every property of a table that LIKE … INCLUDING DEFAULTS, CONSTRAINTS, GENERATED and STORAGE copies. */
async function shapeOf(d: TestDatabase, table: string): Promise<unknown> {
  const { rows: columns } = await d.pool.query(
    `SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attcollation::regcollation::text AS collation,
            a.attnotnull, a.attgenerated, a.attstorage, pg_get_expr(d.adbin, d.adrelid) AS expression
     FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, [table]);
  const { rows: checks } = await d.pool.query(
    `SELECT conname, pg_get_constraintdef(oid) AS definition, convalidated FROM pg_constraint
     WHERE conrelid = $1::regclass AND contype = 'c' ORDER BY conname`, [table]);
  return { columns, checks };
}

describe('the target\'s shape, spelled out for a staged table', () => {
  it('makes the same table as LIKE does, which the target then takes as its partition', async () => {
    db = await createTestDatabase('empty');
    const d = db;
    await d.pool.query(`CREATE SCHEMA "Odd Schema"`);
    await d.pool.query(`CREATE DOMAIN "Odd Schema".cents AS numeric(12, 2) CHECK (VALUE > -1e9)`);
    await d.pool.query(`CREATE COLLATION "Odd Schema"."no case" (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`);
    await d.pool.query(
      `CREATE TABLE "Odd Schema"."Target Table" (
         partition_hour timestamptz NOT NULL,
         "Order Id" bigint NOT NULL,
         dropped_later text,
         region text COLLATE "C" DEFAULT 'eu',
         code text COLLATE "Odd Schema"."no case",
         amount "Odd Schema".cents NOT NULL DEFAULT 0,
         amount_scaled numeric GENERATED ALWAYS AS (amount * 100) STORED,
         created_at timestamptz DEFAULT now(),
         tags text[] DEFAULT '{}',
         payload json,
         note varchar(40) DEFAULT 'it''s; DROP TABLE x --',
         PRIMARY KEY (partition_hour, "Order Id"),
         CONSTRAINT "amount, positive" CHECK (amount >= 0),
         CHECK (region <> '')
       ) PARTITION BY RANGE (partition_hour)`);
    await d.pool.query(`ALTER TABLE "Odd Schema"."Target Table" DROP COLUMN dropped_later`);
    await d.pool.query(`ALTER TABLE "Odd Schema"."Target Table" ALTER COLUMN payload SET STORAGE EXTERNAL, ALTER COLUMN note SET STORAGE MAIN`);
    await d.pool.query(`ALTER TABLE "Odd Schema"."Target Table" ADD CONSTRAINT later_check CHECK (code IS DISTINCT FROM 'x') NOT VALID`);
    const target = '"Odd Schema"."Target Table"';
    const store = { partition: 'partition_hour' } as RowStore;

    const shape = await readTargetShape(d.pool, target);
    expect(shape.storage, 'the columns whose storage is not their type\'s').toEqual(['ALTER COLUMN payload SET STORAGE EXTERNAL', 'ALTER COLUMN note SET STORAGE MAIN']);
    await createStagedTable(d.pool, store, shape, 'public.from_shape', 'bf_in_hour', HOUR, NEXT);
    await d.pool.query(
      `CREATE TABLE public.by_like (LIKE ${target} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE,
         CONSTRAINT bf_in_hour CHECK (partition_hour IS NOT NULL AND partition_hour >= '${HOUR.toISOString()}'::timestamptz AND partition_hour < '${NEXT.toISOString()}'::timestamptz))`);
    const made = await shapeOf(d, 'public.from_shape');
    expect(made).toEqual(await shapeOf(d, 'public.by_like'));
    expect((made as { columns: unknown[] }).columns).toHaveLength(10);

    // And the target takes it as the hour's partition.
    await d.pool.query(`INSERT INTO public.from_shape (partition_hour, "Order Id", region, code, amount) VALUES ($1, 1, 'eu', 'Ab', 12.5)`, [HOUR]);
    await d.pool.query(`ALTER TABLE ${target} ATTACH PARTITION public.from_shape FOR VALUES FROM ('${HOUR.toISOString()}') TO ('${NEXT.toISOString()}')`);
    const { rows } = await d.pool.query(`SELECT "Order Id"::int AS id, amount_scaled::text AS scaled, note FROM ${target}`);
    expect(rows).toEqual([{ id: 1, scaled: '1250.00', note: "it's; DROP TABLE x --" }]);
  });
});
