// Which unique indexes prove that a relation holds each key once (keysUniqueByIndexes), as staging's measure relies
// on to count no distinct keys. Real PostgreSQL, on a database of its own.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keysUniqueByIndexes } from '../../src/db/uniqueKeys.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

const COLUMNS = ['partition_hour', 'order_id', 'region'];

describe('keys proven once by unique indexes', () => {
  let db: TestDatabase;
  let n = 0;

  beforeAll(async () => {
    db = await createTestDatabase('empty');
    await db.pool.query(`CREATE SCHEMA u; CREATE COLLATION u.any_case (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`);
  });

  afterAll(async () => {
    await db.drop();
  });

  /** A new table of the shape with `index` (its `%t` the table's name) built on it; returns the table. */
  async function tableWith(index: string): Promise<string> {
    n += 1;
    const table = `u."t ${n}"`;
    await db.pool.query(`CREATE TABLE ${table} (partition_hour timestamptz NOT NULL, order_id bigint, region text, note text)`);
    if (index !== '') await db.pool.query(index.replaceAll('%t', table));
    return table;
  }

  const proven = async (index: string) => keysUniqueByIndexes(db.pool, [await tableWith(index)], COLUMNS);

  it('counts a unique index or constraint over key columns alone, of any of them, whatever it includes', async () => {
    expect(await proven('ALTER TABLE %t ADD PRIMARY KEY (partition_hour, order_id)')).toBe(true);
    expect(await proven('CREATE UNIQUE INDEX ON %t (order_id)')).toBe(true);
    expect(await proven('CREATE UNIQUE INDEX ON %t (region, order_id, partition_hour)')).toBe(true);
    expect(await proven('CREATE UNIQUE INDEX ON %t (partition_hour, order_id) INCLUDE (note)')).toBe(true);
    expect(await proven('ALTER TABLE %t ADD UNIQUE (order_id, region)')).toBe(true);
    expect(await proven('CREATE UNIQUE INDEX ON %t (order_id DESC NULLS FIRST)')).toBe(true);
  });

  it('counts no index that would let a key repeat under the join\'s `=`, and no table without one', async () => {
    // No index, or one not unique.
    expect(await proven('')).toBe(false);
    expect(await proven('CREATE INDEX ON %t (partition_hour, order_id)')).toBe(false);
    // A column that is not a key: (hour, order, note) is unique where (hour, order) repeats.
    expect(await proven('CREATE UNIQUE INDEX ON %t (partition_hour, order_id, note)')).toBe(false);
    // Over part of the rows, or over an expression of a key.
    expect(await proven('CREATE UNIQUE INDEX ON %t (order_id) WHERE note IS NULL')).toBe(false);
    expect(await proven('CREATE UNIQUE INDEX ON %t (lower(region))')).toBe(false);
    // Equal under another operator class or collation than the column's `=`: 'a' and 'A' are two keys to the
    // join, one to the index, or the other way round.
    expect(await proven('CREATE UNIQUE INDEX ON %t (region text_pattern_ops)')).toBe(false);
    expect(await proven('CREATE UNIQUE INDEX ON %t (region COLLATE u.any_case)')).toBe(false);
    expect(await proven('CREATE UNIQUE INDEX ON %t (region COLLATE "C")')).toBe(false);
    // Checked only at commit: inside the transaction that measures, a key may be there twice.
    expect(await proven('ALTER TABLE %t ADD UNIQUE (order_id) DEFERRABLE INITIALLY DEFERRED')).toBe(false);
    expect(await proven('ALTER TABLE %t ADD UNIQUE (order_id) DEFERRABLE INITIALLY IMMEDIATE')).toBe(false);
  });

  it('holds for a list only when every relation is proven, and never for none', async () => {
    const keyed = await tableWith('CREATE UNIQUE INDEX ON %t (order_id)');
    const open = await tableWith('CREATE INDEX ON %t (order_id)');
    expect(await keysUniqueByIndexes(db.pool, [keyed, keyed], COLUMNS)).toBe(true);
    expect(await keysUniqueByIndexes(db.pool, [keyed, open], COLUMNS)).toBe(false);
    expect(await keysUniqueByIndexes(db.pool, [], COLUMNS)).toBe(false);
    // The index's columns named otherwise than the pipeline's: not its keys.
    expect(await keysUniqueByIndexes(db.pool, [keyed], ['partition_hour', 'id'])).toBe(false);
  });

  it('counts an index that is not yet valid as none', async () => {
    const table = await tableWith('');
    await db.pool.query(`INSERT INTO ${table} VALUES (now(), 1, 'a', NULL), (now(), 1, 'b', NULL)`);
    // CREATE INDEX CONCURRENTLY that failed on the repeated key leaves an invalid unique index behind.
    await expect(db.pool.query(`CREATE UNIQUE INDEX CONCURRENTLY left_invalid ON ${table} (order_id)`)).rejects.toThrow(/could not create unique index/);
    const left = await db.pool.query<{ valid: boolean }>(`SELECT indisvalid AS valid FROM pg_index WHERE indexrelid = 'u.left_invalid'::regclass`);
    expect(left.rows).toEqual([{ valid: false }]);
    expect(await keysUniqueByIndexes(db.pool, [table], COLUMNS)).toBe(false);
  });
});
