// rowsChecksum, the checksum of a partition's rows every snapshot takes and a rollback checks the published rows
// against: equal exactly when the rows are the same rows (as their text says), in whatever order they are read,
// over the edge cases of the one-pass test (NULLs, a key twice, numerics of another scale, json, text under a
// case-insensitive collation, unicode that normalizes alike); and the form it had before, kept for the checksums
// recorded in it. Real PostgreSQL, on a database of its own.
// Replay a failure: FC_SEED=<seed> npx vitest run test/db/checksum.test.ts

import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checksumShapeOf, rowsChecksum, rowsChecksumLike, type ChecksumShape } from '../../src/db/partitions.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { edgeRow, type EdgeRow } from '../support/edgeRows.js';

const SEED = Number(process.env.FC_SEED?.trim() || Math.floor(Math.random() * 2 ** 31));

const SHAPE = `CREATE SCHEMA w;
  CREATE COLLATION w.any_case (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
  CREATE TABLE w.shape (partition_hour timestamptz NOT NULL, order_id bigint, region text COLLATE w.any_case,
    amount numeric(14, 2), rate numeric, attributes json, note text, seen_at timestamptz, flags int[]);
  CREATE TABLE w.a (LIKE w.shape); CREATE TABLE w.b (LIKE w.shape);`;

// The edge cases of test/core/onePass.test.ts, and a timestamptz and an array besides.
interface Row extends EdgeRow {
  seenAt: string | null;
  flags: string | null;
}

const row: fc.Arbitrary<Row> = fc.tuple(edgeRow(6), fc.record({
  seenAt: fc.option(fc.constantFrom('2026-11-02T05:00:00Z', '2026-11-02T06:00:00+01:00', '2026-11-02T05:00:00.000001Z'), { freq: 6 }),
  flags: fc.option(fc.constantFrom('{}', '{1}', '{1,NULL}', '{NULL}'), { freq: 6 }),
})).map(([edge, more]) => ({ ...edge, ...more }));

/**
 * One side, and the other as the same rows shuffled, some of them changed in a column, dropped, doubled, or added;
 * one draw in four left untouched (only shuffled), so that the same rows are drawn often whatever the seed (edits
 * alone left a longer side untouched rarely: 9 of 200 draws for one seed).
 */
const sides = fc.array(row, { maxLength: 10 }).chain((a) => fc.record({
  a: fc.constant(a),
  b: fc.tuple(
    fc.array(fc.tuple(fc.constantFrom('keep', 'keep', 'keep', 'change', 'drop', 'double'), row), { minLength: a.length, maxLength: a.length }),
    fc.array(row, { maxLength: 2 }),
    fc.integer(),
    fc.constantFrom(false, false, false, true),
  ).map(([drawnEdits, drawnAdded, salt, untouched]) => {
    const [edits, added] = untouched ? [[], []] : [drawnEdits, drawnAdded];
    const b = [...a.flatMap((prior, index): Row[] => {
      const [edit, other] = edits[index] ?? ['keep', prior];
      if (edit === 'drop') return [];
      if (edit === 'double') return [prior, prior];
      if (edit === 'change') {
        const columns = Object.keys(prior) as (keyof Row)[];
        const column = columns[Math.abs(salt + index) % columns.length] as keyof Row;
        return [{ ...prior, [column]: other[column] } as Row];
      }
      return [prior];
    }), ...added];
    // Another order than a's, so that only what the rows are can make the checksums equal.
    return b.map((r, index) => ({ r, at: (index * 7919 + salt) % 101 })).sort((x, y) => x.at - y.at).map(({ r }) => r);
  }),
}));

// Given to the property whatever the seed draws: one row against itself changed in one column to a value that `=`
// holds equal (or, for the note, that normalizes alike) but that reads differently.
const BASE: Row = { orderId: 1, region: 'eu', amount: '1.00', rate: '1.0', attributes: '{"a":1}', note: 'ü', seenAt: null, flags: '{1}' };
const EXAMPLES = [{ region: 'EU' }, { rate: '1.00' }, { attributes: '{"a": 1}' }, { note: 'u\u0308' }, { flags: '{1,NULL}' }, {}]
  .map((other: Partial<Row>) => ({ a: [BASE, { ...BASE, orderId: 2 }], b: [{ ...BASE, orderId: 2 }, { ...BASE, ...other }] }));

async function fill(db: TestDatabase, table: string, rows: readonly Row[]): Promise<void> {
  await db.pool.query(`TRUNCATE ${table}`);
  await db.pool.query(
    `INSERT INTO ${table} SELECT '2026-11-02T05:00Z', r.order_id, r.region, r.amount, r.rate, r.attributes, r.note, r.seen_at, r.flags
     FROM jsonb_to_recordset($1::jsonb) AS r(order_id bigint, region text, amount numeric, rate numeric, attributes json, note text, seen_at timestamptz, flags int[])`,
    [JSON.stringify(rows.map((r) => ({ order_id: r.orderId, region: r.region, amount: r.amount, rate: r.rate, attributes: r.attributes, note: r.note, seen_at: r.seenAt, flags: r.flags })))]);
}

async function checksumOf(db: TestDatabase, shape: ChecksumShape, table: string, expression = rowsChecksum(shape)): Promise<string> {
  const { rows } = await db.pool.query<{ checksum: string }>(`SELECT ${expression} AS checksum FROM ${table} t`);
  return rows[0]?.checksum ?? '';
}

/** Whether the two tables hold the same rows, by their text, as a multiset: what the checksum stands for. */
async function sameRows(db: TestDatabase): Promise<boolean> {
  const { rows } = await db.pool.query<{ same: boolean }>(
    `SELECT (SELECT coalesce(array_agg(t::text ORDER BY t::text COLLATE "C"), '{}') FROM w.a t)
          = (SELECT coalesce(array_agg(t::text ORDER BY t::text COLLATE "C"), '{}') FROM w.b t) AS same`);
  return rows[0]?.same === true;
}

describe('rowsChecksum', () => {
  let db: TestDatabase;
  let shape: ChecksumShape;

  beforeAll(async () => {
    db = await createTestDatabase('empty');
    await db.pool.query(SHAPE);
    shape = await checksumShapeOf(db.pool, 'w.shape');
  });

  afterAll(async () => {
    await db.drop();
  });

  it('is the same for two sets of rows exactly when they are the same rows, whatever the order they are read in', async () => {
    console.log(`checksum: FC_SEED=${SEED}`);
    const seen = { same: 0, different: 0 };
    await fc.assert(fc.asyncProperty(sides, async ({ a, b }) => {
      await fill(db, 'w.a', a);
      await fill(db, 'w.b', b);
      const same = await sameRows(db);
      seen[same ? 'same' : 'different'] += 1;
      const [ofA, ofB] = [await checksumOf(db, shape, 'w.a'), await checksumOf(db, shape, 'w.b')];
      expect(ofA).toMatch(/^h1:[0-9a-f]{32}$/);
      expect(ofA === ofB).toBe(same);
    }), { seed: SEED, numRuns: 200, examples: EXAMPLES.map((example) => [example]) });
    // Both answers were drawn.
    expect(seen.same).toBeGreaterThan(10);
    expect(seen.different).toBeGreaterThan(10);
  });

  it('tells apart values that `=` holds equal but read differently: the scale of a numeric, json spacing, case under a case-insensitive collation', async () => {
    const base: Row = { orderId: 1, region: 'eu', amount: '1.00', rate: '1.0', attributes: '{"a":1}', note: 'x', seenAt: null, flags: null };
    for (const other of [{ rate: '1.00' }, { attributes: '{"a": 1}' }, { region: 'EU' }, { rate: '-0' }, { note: 'u\u0308' }] as Partial<Row>[]) {
      await fill(db, 'w.a', [base]);
      await fill(db, 'w.b', [{ ...base, ...other }]);
      expect(await checksumOf(db, shape, 'w.b'), JSON.stringify(other)).not.toBe(await checksumOf(db, shape, 'w.a'));
    }
  });

  it('does not depend on the session\'s time zone (a timestamptz is hashed as the instant it is)', async () => {
    await fill(db, 'w.a', [{ orderId: 1, region: null, amount: null, rate: null, attributes: null, note: null, seenAt: '2026-11-02T05:00:00Z', flags: null }]);
    const client = await db.pool.connect();
    try {
      const at = async (zone: string) => {
        await client.query(`SET TimeZone = '${zone}'`);
        return (await client.query<{ c: string }>(`SELECT ${rowsChecksum(shape)} AS c FROM w.a t`)).rows[0]?.c;
      };
      expect(await at('America/Los_Angeles')).toBe(await at('UTC'));
    } finally {
      await client.query('RESET TimeZone');
      client.release();
    }
  });

  it('mixes each row\'s hash before the sum: without it two rows trading a value (NULL and 0) cancel out', async () => {
    const rowsOf = (first: string | null, second: string | null): Row[] => [
      { orderId: 1, region: null, amount: first, rate: null, attributes: null, note: null, seenAt: null, flags: null },
      { orderId: 2, region: null, amount: second, rate: null, attributes: null, note: null, seenAt: null, flags: null },
    ];
    await fill(db, 'w.a', rowsOf(null, '0.00'));
    await fill(db, 'w.b', rowsOf('0.00', null));
    expect(await sameRows(db)).toBe(false);
    expect(await checksumOf(db, shape, 'w.b')).not.toBe(await checksumOf(db, shape, 'w.a'));
    // The same sum without the mix (hashint8extended) is the guard removed: the two sets collide.
    const unmixed = rowsChecksum(shape).replace('hashint8extended(', '').replace('), 0), 0)', '), 0)');
    expect(unmixed).not.toBe(rowsChecksum(shape));
    expect(await checksumOf(db, shape, 'w.b', unmixed)).toBe(await checksumOf(db, shape, 'w.a', unmixed));
  });

  it('sums the rows\' hashes as bigint to the same figure as each cast to numeric first (checksums recorded that way compare)', async () => {
    // The form of the publishes of 2026-12-06 cast each row's hash to numeric before the sum; a rollback compares the
    // partition now with what they recorded. 3,000 rows: their hashes sum far past 64 bits either way.
    const asNumeric = rowsChecksum(shape).replace('), 0), 0)', '), 0), 0)::numeric');
    expect(asNumeric).not.toBe(rowsChecksum(shape));
    await fc.assert(fc.asyncProperty(fc.array(row, { maxLength: 10 }), async (rows) => {
      await fill(db, 'w.a', rows);
      expect(await checksumOf(db, shape, 'w.a')).toBe(await checksumOf(db, shape, 'w.a', asNumeric));
    }), { seed: SEED, numRuns: 50 });
    await fill(db, 'w.a', []);
    await db.pool.query(`INSERT INTO w.a (partition_hour, order_id, note) SELECT '2026-11-02T05:00Z', g, md5(g::text) FROM generate_series(1, 3000) g`);
    const { rows } = await db.pool.query<{ big: boolean }>(
      `SELECT abs(sum(hashint8extended(hash_record_extended(ROW(t.order_id), 0), 0)::numeric)) > 9223372036854775807 AS big FROM w.a t`);
    expect(rows[0]?.big).toBe(true);
    expect(await checksumOf(db, shape, 'w.a')).toBe(await checksumOf(db, shape, 'w.a', asNumeric));
  });

  it('of no rows is a checksum too, the same every time', async () => {
    await fill(db, 'w.a', []);
    expect(await checksumOf(db, shape, 'w.a')).toBe(`h1:${(await db.pool.query<{ m: string }>(`SELECT md5('0:0') AS m`)).rows[0]?.m}`);
  });

  it('compares with a checksum recorded in the earlier form (md5 of the rows\' text in key order) in that form', async () => {
    await fill(db, 'w.a', [
      { orderId: 2, region: 'eu', amount: '1.00', rate: '1', attributes: '{}', note: 'b', seenAt: null, flags: null },
      { orderId: 1, region: 'us', amount: '2.00', rate: null, attributes: null, note: 'a', seenAt: null, flags: '{1}' },
    ]);
    const legacy = (await db.pool.query<{ m: string }>(`SELECT md5(string_agg(t::text, '|' ORDER BY t.order_id)) AS m FROM w.a t`)).rows[0]?.m ?? '';
    const keyed = { ...shape, keys: ['"order_id"'] };
    expect(await checksumOf(db, shape, 'w.a', rowsChecksumLike(legacy, keyed))).toBe(legacy);
    const current = await checksumOf(db, shape, 'w.a');
    expect(rowsChecksumLike(current, keyed)).toBe(rowsChecksum(shape));
    expect(rowsChecksumLike(null, keyed)).toBe(rowsChecksum(shape));
  });
});
