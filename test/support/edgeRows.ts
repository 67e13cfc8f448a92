import fc from 'fast-check';

// Rows over the edge cases of comparing and checksumming rows by key, for the property tests that fill tables of
// this shape (test/core/onePass.test.ts, test/db/checksum.test.ts): NULL and repeated keys, a region under a
// case-insensitive collation, numerics of a fixed scale and of none, json spelled apart, text that normalizes alike.

export interface EdgeRow {
  orderId: number | null;
  region: string | null;
  amount: string | null;
  rate: string | null;
  attributes: string | null;
  note: string | null;
}

/** Few keys (1 to `keys`) and few values, so that sides share keys, repeat them and differ in one column often. */
export function edgeRow(keys: number): fc.Arbitrary<EdgeRow> {
  return fc.record({
    orderId: fc.option(fc.integer({ min: 1, max: keys }), { freq: 12 }),
    region: fc.option(fc.constantFrom('eu', 'EU', 'us', 'Us'), { freq: 6 }),
    amount: fc.option(fc.constantFrom('0.00', '1.00', '1.50', '-0.00', '99999999.99'), { freq: 8 }),
    rate: fc.option(fc.constantFrom('1', '1.0', '1.00', '-0', '0', '2.5e3'), { freq: 6 }),
    attributes: fc.option(fc.constantFrom('{}', '{"a":1}', '{"a": 1}', '[1,2]', 'null'), { freq: 6 }),
    note: fc.option(fc.constantFrom('', 'x', 'X', 'ü', 'u\u0308', '|', 'a|b'), { freq: 6 }),
  });
}
