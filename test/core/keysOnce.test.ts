// Staging's measure counts no distinct keys where every side is proven to hold each key once: the live partition
// and the staged table by their unique indexes (built before the measure for a swap), the plan by start's
// expected_keys_once. Where a side is not proven, or a unique index refuses the staged rows, it counts as ever and
// a repeated key still blocks the publish. Where they are proven, the plan's rows are compared with the staged ones
// by fingerprint instead of joined. Real PostgreSQL and the demo world, night 15.

import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { stagePartition } from '../../src/core/recompute/stagePublish.js';
import { requireBackfill } from '../../src/db/backfills.js';
import { listEvents } from '../../src/db/events.js';
import { withStatementSeam, withTransaction } from '../../src/db/pool.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { againstPlan } from '../../src/db/reconcile.js';
import { findStagedReconciliation } from '../../src/db/reconciliations.js';
import { runSource, STAGED_RUN, tableSource } from '../../src/db/rowStore.js';
import { rewriteTablesOf } from '../../src/core/recompute/storeTables.js';
import { findPublishTarget } from '../../src/db/targets.js';
import { rowStoreOf } from '../../src/core/recompute/rowStore.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

const CANARY = new Date('2026-11-15T05:00Z');
const dayTotal = `SELECT sum(amount_base)::text AS t FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`;

/** The demo's target published by rewrite, and its partitioned twin published by swap. */
const BOTH_SHAPES = [
  { scenario: 'month-end', by: 'rewrite' },
  { scenario: 'month-end-partitioned', by: 'swap' },
] as const;

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

/** Stages the canary hour apart (as a large hour is) in a transaction rolled back after; the measure's text. */
async function measureOfStage(e: TestEngine, backfillId: number): Promise<string> {
  const backfill = await requireBackfill(e.ctx.pool, backfillId);
  const client = await e.ctx.pool.connect();
  const statements: string[] = [];
  try {
    await client.query('BEGIN');
    expect(await stagePartition(withStatementSeam(client, async (statement) => { statements.push(statement); }), backfill, CANARY, { swapMinRows: 0 })).toBe('staged');
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
  // The one statement that joins the sides takes its snapshot's xmin (src/db/reconcile.ts, joinedRows).
  const measures = statements.filter((statement) => statement.includes('pg_snapshot_xmin'));
  expect(measures).toHaveLength(1);
  return measures[0] ?? '';
}

describe('staging\'s measure of keys proven once', () => {
  it('counts no distinct keys for a swap, whose live partition, staged table and plan are each proven', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const id = await approvedNight15(engine.ctx, 'keys once');
    const measure = await measureOfStage(engine, id);
    expect(measure).toContain('FULL JOIN');
    expect(measure).not.toContain('count(DISTINCT');
    // Nor does it join the plan's rows: their fingerprint is compared with the staged rows' (planByFingerprint).
    expect(measure).not.toContain('bf_measure');
  });

  it.each(BOTH_SHAPES)('records the envelope\'s figures the join with the plan gives, whether the staged rows are as planned or not ($by)', async ({ scenario }) => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'keys once');
    // After start, the canary hour gets an order more and one of its orders changes; the next hour stays as planned.
    await e.ctx.pool.query(`INSERT INTO warehouse.orders_raw (order_id, shard, event_hour, merchant_id, currency_raw, amount_local, landed_at)
      SELECT order_id + 100000000, shard, event_hour, merchant_id, currency_raw, amount_local, landed_at FROM warehouse.orders_raw
      WHERE event_hour = '2026-11-15T05:00Z' ORDER BY order_id LIMIT 1`);
    await e.ctx.pool.query(`UPDATE warehouse.orders_raw SET amount_local = amount_local + 7 WHERE order_id = (SELECT max(order_id) FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T05:00Z' AND order_id < 100000000)`);
    const backfill = await requireBackfill(e.ctx.pool, id);
    const store = await rowStoreOf(e.ctx.pool, await requirePipeline(e.ctx.pool, backfill.pipeline));
    for (const hour of [CANARY, new Date('2026-11-15T06:00Z')]) {
      await withTransaction(e.ctx.pool, async (tx) => expect(await stagePartition(tx, backfill, hour, { swapMinRows: 0 })).toBe('staged'));
      const target = await findPublishTarget(e.ctx.pool, id, hour);
      if (!target) throw new Error('no target');
      const run: [number, number, Date] = [id, STAGED_RUN, hour];
      const staged = target.stagedTable ? tableSource(store, target.stagedTable) : runSource(store, rewriteTablesOf(store, run, target.stagedApart).staged);
      const joined = await againstPlan(e.ctx.pool, store, run, staged);
      const recorded = await findStagedReconciliation(e.ctx.pool, id, STAGED_RUN, hour);
      expect(recorded?.plan).toEqual(joined);
      if (hour === CANARY) expect(joined).toMatchObject({ added: 1, lost: 0, stagedRows: joined.planned + 1 });
      else expect(joined).toMatchObject({ added: 0, lost: 0, stagedRows: joined.planned, stagedKnown: joined.expected });
    }
  });

  it('counts them where a side is not proven: a plain target\'s staged rows, a plan whose keys repeated, a target without a unique key', async () => {
    engine = await createTestEngine('month-end');
    const plain = await approvedNight15(engine.ctx, 'keys once');
    const plainMeasure = await measureOfStage(engine, plain);
    expect(plainMeasure).toContain('count(DISTINCT');
    // Its plan, proven once by start, is compared by fingerprint all the same.
    expect(plainMeasure).not.toContain('bf_measure');
    await engine.close();

    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    // One order of the canary hour landed twice before start: its plan is kept unproven (expected_keys_once false).
    const twice = `INSERT INTO warehouse.orders_raw SELECT * FROM warehouse.orders_raw WHERE order_id = (SELECT min(order_id) FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T05:00Z')`;
    await e.ctx.pool.query(twice);
    const repeated = await approvedNight15(e.ctx, 'keys once');
    await e.ctx.pool.query(`DELETE FROM warehouse.orders_raw r USING (SELECT ctid FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T05:00Z' ORDER BY order_id, ctid LIMIT 1) d WHERE r.ctid = d.ctid`);
    const repeatedMeasure = await measureOfStage(e, repeated);
    expect(repeatedMeasure).toContain('count(DISTINCT');
    expect(repeatedMeasure).toContain('bf_measure');
    await e.close();

    engine = await createTestEngine('month-end-partitioned');
    // The target's primary key dropped: nothing proves the live rows' keys once.
    await engine.ctx.pool.query(`DO $$ BEGIN
      EXECUTE (SELECT format('ALTER TABLE warehouse.orders DROP CONSTRAINT %I', conname) FROM pg_constraint WHERE conrelid = 'warehouse.orders'::regclass AND contype = 'p');
    END $$`);
    const unkeyed = await approvedNight15(engine.ctx, 'keys once');
    expect(await measureOfStage(engine, unkeyed)).toContain('count(DISTINCT');
  });

  it.each(BOTH_SHAPES)('blocks the publish of a key the step repeats only after start, its plan proven once ($by)', async ({ scenario }) => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'keys once');
    const once = await e.ctx.pool.query<{ once: boolean }>(`SELECT bool_and(expected_keys_once) AS once FROM backfill.backfill_targets WHERE backfill_id = $1`, [id]);
    expect(once.rows[0]?.once).toBe(true);
    const before = (await e.ctx.pool.query<{ t: string }>(dayTotal)).rows[0]?.t;
    // After start, one order of the canary hour lands twice: the staged rows hold its key twice. For a swap the
    // target's primary key, built on the staged table before the measure, refuses them; the measure then counts.
    await e.ctx.pool.query(`INSERT INTO warehouse.orders_raw SELECT * FROM warehouse.orders_raw WHERE order_id = (SELECT min(order_id) FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T05:00Z')`);
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('paused');
    expect(report.backfill.pausedReason).toBe('2026-11-15 05:00: 1 duplicate key(s) in the staged data: the publish is blocked');
    expect((await e.ctx.pool.query<{ t: string }>(dayTotal)).rows[0]?.t).toBe(before);
    // Staged, recorded as a breach, not failed: the step is not at fault for the target's key, the data is.
    const staged = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'staged' && ev.detail.partition === '2026-11-15 05:00');
    expect(staged.map((ev) => ev.detail.keysDuplicated)).toEqual([1]);
    expect((await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'step_failed')).toEqual([]);
  });
});
