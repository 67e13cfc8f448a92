import { afterEach, describe, expect, it } from 'vitest';
import { executeStep } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

// The live keys of an hour when it is staged that the staged rows lack (its baseline, by which its publish tells
// late rows) are kept in a table of the store of their own for that run and hour, published by rewrite as by swap
// (storeTables.ts). An hour staged before, whose keys are in the store's shared baseline, is published by those.

const CANARY = '2026-11-15T05:00Z';
const LATE_ORDER = 9_200_000_001;

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function liveKeys(e: TestEngine): Promise<number> {
  const { rows } = await e.ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = $1`, [CANARY]);
  return rows[0]?.n ?? 0;
}

/** A new order of the canary hour, committed by normal ingestion after the hour was staged. */
async function lateOrder(e: TestEngine): Promise<void> {
  await e.ctx.pool.query(
    `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
     VALUES ($1::timestamptz, $2::bigint, 1, 4242, 'EUR', 100.00, 1.000000, 100.00)`, [CANARY, LATE_ORDER]);
}

async function publishedWithLateRow(e: TestEngine, id: number): Promise<void> {
  expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: CANARY })).toBe('done');
  const late = await e.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE order_id = $1', [LATE_ORDER]);
  expect(late.rows[0]?.n).toBe(1);
  const kept = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'late_rows_kept').map((ev) => ev.detail.rows);
  expect(kept).toEqual([1]);
}

describe('the baseline of a run\'s hour', () => {
  it('is a table of its own for an hour published by rewrite, holding the live keys of the staging the staged rows lack, and none in the shared baseline', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'baseline test');
    expect(await liveKeys(e)).toBeGreaterThan(0);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: CANARY })).toBe('done');
    // Night 15's step keeps every live key of the hour: there is none to keep (test/core/measuredAtStaging.test.ts
    // stages a step that drops one).
    const own = await e.ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM bf_orders."p2026111505_b${id}_g1_baseline"`);
    expect(own.rows[0]?.n).toBe(0);
    const shared = await e.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM bf_orders.baseline WHERE bf_backfill = $1', [id]);
    expect(shared.rows[0]?.n).toBe(0);
    await lateOrder(e);
    await publishedWithLateRow(e, id);
  });

  it('publishes an hour staged before it had one by the shared baseline\'s keys, carrying the late row', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'baseline test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: CANARY })).toBe('done');
    // As an hour staged by an earlier version had it: every live key in the shared baseline, no table of its own.
    const copied = await e.ctx.pool.query(`INSERT INTO bf_orders.baseline SELECT $1, 1, partition_hour, order_id FROM warehouse.orders WHERE partition_hour = $2`, [id, CANARY]);
    expect(copied.rowCount).toBe(await liveKeys(e));
    await e.ctx.pool.query(`DROP TABLE bf_orders."p2026111505_b${id}_g1_baseline"`);
    await lateOrder(e);
    await publishedWithLateRow(e, id);
  });
});
