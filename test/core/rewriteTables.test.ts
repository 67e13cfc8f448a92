// Where a publish by rewrite keeps its rows: an hour of SWAP_MIN_ROWS rows or more is staged, and its prior rows
// saved, in tables of the run's own without an index (p<hour>_b<id>_g1_staged and _saved); a smaller one in the
// store's shared staged and saved tables. Staging records which (backfill_targets.staged_apart), and the publish
// and a rollback read that record, never the setting of the moment. Night 15 on the demo's plain target, with
// the threshold between its hours' sizes. Real PostgreSQL and queues.

import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { listEvents } from '../../src/db/events.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const HOURS = ['05', '06', '07', '08', '09', '10'];
const hourKey = (hh: string) => `2026-11-15T${hh}:00Z`;

let engine: TestEngine | undefined;

afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

/** Each hour's rows of warehouse.orders in key order, as text. */
async function hourRows(e: TestEngine): Promise<string[]> {
  return Promise.all(HOURS.map(async (hh) => {
    const { rows } = await e.ctx.pool.query<{ rows: string }>(
      `SELECT string_agg(o::text, '|' ORDER BY o.order_id) AS rows FROM warehouse.orders o WHERE o.partition_hour = $1`, [hourKey(hh)]);
    return rows[0]?.rows ?? '';
  }));
}

async function dayTotal(e: TestEngine): Promise<string> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(
    `SELECT sum(amount_base)::numeric(18,2)::text AS total FROM warehouse.orders WHERE partition_hour >= '2026-11-15T00:00Z' AND partition_hour < '2026-11-16T00:00Z'`);
  return rows[0]?.total ?? '';
}

/** Per hour: whether it was staged apart, its rows in each of the store's tables (null: it has no table of its own), and how many its publish saved. */
async function whereKept(e: TestEngine, id: number) {
  const { rows } = await e.ctx.pool.query<{ apart: boolean; sharedStaged: number; sharedSaved: number; rowsSaved: number }>(
    `SELECT t.staged_apart AS apart,
            (SELECT count(*)::int FROM bf_orders.staged s WHERE s.bf_backfill = t.backfill_id AND s.partition_hour = t.partition_hour) AS "sharedStaged",
            (SELECT count(*)::int FROM bf_orders.saved s WHERE s.bf_backfill = t.backfill_id AND s.partition_hour = t.partition_hour) AS "sharedSaved",
            p.rows_saved AS "rowsSaved"
     FROM backfill.backfill_targets t JOIN backfill.preserved_partitions p USING (backfill_id, partition_hour)
     WHERE t.backfill_id = $1 ORDER BY t.partition_hour`, [id]);
  return Promise.all(rows.map(async (row, index) => {
    const own = `bf_orders.p20261115${HOURS[index] ?? ''}_b${id}_g1`;
    const count = async (table: string) => (await e.ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]?.n ?? 0;
    const present = (await e.ctx.pool.query<{ present: boolean }>('SELECT to_regclass($1) IS NOT NULL AS present', [`${own}_staged`])).rows[0]?.present;
    return { ...row, ownStaged: present ? await count(`${own}_staged`) : null, ownSaved: present ? await count(`${own}_saved`) : null };
  }));
}

describe('the tables a publish by rewrite keeps its rows in', () => {
  it('keeps the hours from SWAP_MIN_ROWS up in tables of their own and the smaller in the shared ones, and a rollback reads where staging put them, whatever the setting is by then', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const before = await hourRows(e);
    const id = await approvedNight15(e.ctx, 'rewrite tables test');
    const { rows: sized } = await e.ctx.pool.query<{ size: number }>(
      'SELECT greatest(rows_before, expected_rows)::int AS size FROM backfill.backfill_targets WHERE backfill_id = $1 ORDER BY partition_hour', [id]);
    const sizes = sized.map((row) => row.size);
    const threshold = [...sizes].sort((a, b) => a - b)[3] ?? 0;
    const apart = sizes.map((size) => size >= threshold);
    expect(apart.filter(Boolean).length).toBeGreaterThan(1);
    expect(apart.filter((a) => !a).length).toBeGreaterThan(1);

    const report = await runUntilSettled({ ...e.ctx, config: { ...e.ctx.config, SWAP_MIN_ROWS: threshold } }, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);
    // Every hour went by rewrite (the target is one table), whichever tables held its rows.
    const events = await listEvents(e.ctx.pool, id);
    expect(events.filter((ev) => ev.kind === 'recomputed').map((ev) => ev.detail.publishedBy)).toEqual(HOURS.map(() => 'rewrite'));

    const kept = await whereKept(e, id);
    expect(kept.map((hour) => hour.apart)).toEqual(apart);
    for (const [index, hour] of kept.entries()) {
      expect(hour.rowsSaved).toBeGreaterThan(0);
      if (apart[index]) {
        // Nothing of it in the shared tables; its own hold what it staged and exactly the rows its publish deleted.
        expect({ sharedStaged: hour.sharedStaged, sharedSaved: hour.sharedSaved }).toEqual({ sharedStaged: 0, sharedSaved: 0 });
        expect(hour.ownStaged).toBeGreaterThan(0);
        expect(hour.ownSaved).toBe(hour.rowsSaved);
      } else {
        expect({ ownStaged: hour.ownStaged, ownSaved: hour.ownSaved }).toEqual({ ownStaged: null, ownSaved: null });
        expect(hour.sharedStaged).toBeGreaterThan(0);
        expect(hour.sharedSaved).toBe(hour.rowsSaved);
      }
    }
    // Own tables carry no index: each is read whole.
    const { rows: indexed } = await e.ctx.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = 'bf_orders'::regnamespace AND c.relname ~ '_g1_(staged|saved)$'`);
    expect(indexed[0]?.n).toBe(0);

    // The rollback runs with every hour above the setting now (0): the smaller hours' rows are still in the shared
    // tables, and are read there.
    expect(e.ctx.config.SWAP_MIN_ROWS).toBe(0);
    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: 'U07ONCALL', reason: 'rewrite tables test' });
    expect(restored).toHaveLength(HOURS.length);
    expect(await dayTotal(e)).toBe(NIGHT_15.signedTotal);
    expect(await hourRows(e)).toEqual(before);
  });
});
