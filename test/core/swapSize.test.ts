// The size a swap pays from (SWAP_MIN_ROWS): on a target partitioned by hour, a partition of its own hour is
// published by swap only when it holds, or its preview expects, that many rows; a smaller one by rewrite, the
// plain target's way. Night 15 on the demo's partitioned target, with the threshold between its hours' sizes so
// that one backfill publishes both ways, then a rollback of it. Real PostgreSQL and queues.

import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { loadConfig } from '../../src/config.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { listEvents } from '../../src/db/events.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { storedRows } from '../support/storedRows.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const NIGHT = '2026-11-15';
const HOURS = ['05', '06', '07', '08', '09', '10'];
const hourKey = (hh: string) => `${NIGHT}T${hh}:00Z`;
const DAY = `partition_hour >= '2026-11-15T00:00Z' AND partition_hour < '2026-11-16T00:00Z'`;

let engine: TestEngine | undefined;

afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

/** Each hour's partition of warehouse.orders: its table's oid and its rows in key order, as text. */
async function partitions(e: TestEngine): Promise<{ oid: number; rows: string }[]> {
  return Promise.all(HOURS.map(async (hh) => {
    const { rows } = await e.ctx.pool.query<{ oid: number; rows: string }>(
      `SELECT (SELECT c.oid::int FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'warehouse.orders'::regclass AND c.relname = $2) AS oid,
              (SELECT string_agg(o::text, '|' ORDER BY o.order_id) FROM warehouse.orders o WHERE o.partition_hour = $1) AS rows`,
      [hourKey(hh), `orders_p20261115${hh}`]);
    const row = rows[0];
    if (!row) throw new Error(`no partition of ${hh}:00`);
    return row;
  }));
}

async function dayTotal(e: TestEngine): Promise<string> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(`SELECT sum(amount_base)::numeric(18,2)::text AS total FROM warehouse.orders WHERE ${DAY}`);
  return rows[0]?.total ?? '';
}

/** What a publish decides its way by: the hour's live rows when announced, and the rows its preview expects. */
async function sizes(e: TestEngine, id: number): Promise<number[]> {
  const { rows } = await e.ctx.pool.query<{ size: number }>(
    'SELECT greatest(rows_before, expected_rows)::int AS size FROM backfill.backfill_targets WHERE backfill_id = $1 ORDER BY partition_hour', [id]);
  return rows.map((row) => row.size);
}

describe('the size a swap pays from (SWAP_MIN_ROWS)', () => {
  it('is 10,000 rows unless set, and refuses a value that is not a count of rows, saying what would do', () => {
    expect(loadConfig({}).SWAP_MIN_ROWS).toBe(10_000);
    expect(loadConfig({ SWAP_MIN_ROWS: '0' }).SWAP_MIN_ROWS).toBe(0);
    expect(() => loadConfig({ SWAP_MIN_ROWS: 'some' })).toThrowError(/SWAP_MIN_ROWS must be a whole number of rows, e\.g\. 10000/);
    expect(() => loadConfig({ SWAP_MIN_ROWS: '-1' })).toThrowError(/SWAP_MIN_ROWS must be 0 \(always swap\) or more/);
  });

  it('publishes the hours below it by rewrite and the others by swap in one backfill, and a rollback puts each back as it was', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const before = await partitions(e);
    const id = await approvedNight15(e.ctx, 'swap size test');
    const size = await sizes(e, id);
    const threshold = [...size].sort((a, b) => a - b)[3] ?? 0;
    // A preview that did not count an hour's rows says nothing of its size: that hour is swapped, the smallest here.
    const unsized = size.indexOf(Math.min(...size));
    await e.ctx.pool.query(`UPDATE backfill.backfill_targets SET expected_rows = NULL WHERE backfill_id = $1 AND partition_hour = $2`, [id, hourKey(HOURS[unsized] ?? '')]);
    const expected = HOURS.map((_, index) => (index === unsized || (size[index] ?? 0) >= threshold ? 'swap' : 'rewrite'));
    expect(expected.filter((way) => way === 'rewrite').length).toBeGreaterThan(1);
    expect(expected.filter((way) => way === 'swap').length).toBeGreaterThan(1);

    const ctx = { ...e.ctx, config: { ...e.ctx.config, SWAP_MIN_ROWS: threshold } };
    const report = await runUntilSettled(ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);
    const events = await listEvents(e.ctx.pool, id);
    // By hour: the steps ran side by side, in no fixed order.
    const ways = (kind: string, field: 'publishBy' | 'publishedBy') => events.filter((ev) => ev.kind === kind)
      .map((ev) => ev.detail as { partition: string } & Record<typeof field, string>).sort((a, b) => a.partition.localeCompare(b.partition)).map((d) => d[field]);
    expect(ways('staged', 'publishBy')).toEqual(expected);
    expect(ways('recomputed', 'publishedBy')).toEqual(expected);
    // A rewrite replaced the rows of the partition it found; a swap put another table in its place.
    const published = await partitions(e);
    for (const [index, way] of expected.entries()) {
      if (way === 'rewrite') expect(published[index]?.oid).toBe(before[index]?.oid);
      else expect(published[index]?.oid).not.toBe(before[index]?.oid);
    }
    // Saved both ways: the rewritten hours' prior rows in the store's shared saved rows, the swapped hours' partitions whole.
    const { rows: saved } = await e.ctx.pool.query<{ hour: string; table: string | null; rows: number }>(
      `SELECT to_char(p.partition_hour AT TIME ZONE 'UTC', 'HH24') AS hour, p.saved_table AS table,
              (SELECT count(*)::int FROM ${await storedRows(e.ctx.pool, 'saved', 's')} WHERE s.bf_backfill = p.backfill_id AND s.partition_hour = p.partition_hour) AS rows
       FROM backfill.preserved_partitions p WHERE p.backfill_id = $1 ORDER BY p.partition_hour`, [id]);
    expect(saved.map((s) => (s.table === null ? 'rewrite' : 'swap'))).toEqual(expected);
    for (const [index, s] of saved.entries()) expect(s.rows > 0).toBe(expected[index] === 'rewrite');

    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: 'U07ONCALL', reason: 'swap size test' });
    expect(restored).toHaveLength(HOURS.length);
    expect(await dayTotal(e)).toBe(NIGHT_15.signedTotal);
    // Every hour holds its rows as before, in the table it was in before (the swapped ones' prior tables are back).
    expect(await partitions(e)).toEqual(before);
  });
});
