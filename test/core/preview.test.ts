import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { planBackfill } from '../../src/core/identify/plan.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';
import { slackNoticeText } from '../../src/views/notices.js';

const OPERATOR = 'U07ONCALL';
const REQUEST = { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR };

// What the fixed step would produce for an hour, as one aggregate row: the declared estimate of the pipeline.
const ESTIMATE_SQL = `SELECT count(*) AS rows, sum(round(r.amount_local * coalesce(fx.rate_to_base, 1), 2)) AS total
  FROM warehouse.orders_raw r
  LEFT JOIN warehouse.fx_rates fx ON fx.rate_date = (r.event_hour AT TIME ZONE 'UTC')::date AND fx.currency = upper(btrim(r.currency_raw, ' "'))
  WHERE r.event_hour = $1::timestamptz`;

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

describe('the preview', () => {
  it('runs the step query once, aggregated, writing nothing to the table; start keeps its rows by key as the envelope', async () => {
    engine = await createTestEngine();
    const e = engine;
    const dead = async () => (await e.ctx.pool.query(`SELECT n_tup_del::int AS n FROM pg_stat_user_tables WHERE relid = 'warehouse.orders'::regclass`)).rows[0]?.n;
    const deletedBefore = await dead();
    const plan = await planBackfill(e.ctx, REQUEST);
    expect(plan.previewedBy).toBe('step');
    expect(plan.expectedTotalAfter).toBe('1271902.10');
    const { backfill } = await startBackfill(e.ctx, REQUEST);
    // The old preview deleted and re-inserted every target hour in a rolled-back transaction; this one reads.
    expect(await dead()).toBe(deletedBefore);
    const kept = await e.ctx.pool.query(`SELECT count(*)::int AS n, sum(bf_measure)::text AS total FROM bf_orders.expected WHERE bf_backfill = $1`, [backfill.id]);
    const targets = await e.ctx.pool.query(`SELECT sum(expected_rows)::int AS n, sum(expected_total)::text AS total FROM backfill.backfill_targets WHERE backfill_id = $1`, [backfill.id]);
    expect(kept.rows[0]).toEqual(targets.rows[0]);
    expect(kept.rows[0].n).toBeGreaterThan(300);
    expect((await e.ctx.pool.query('SELECT previewed_by FROM backfill.backfills WHERE id = $1', [backfill.id])).rows[0].previewed_by).toBe('step');
  });

  it('uses the pipeline\'s estimate query when it declares one, says so, and checks each partition\'s rows and total against it', async () => {
    engine = await createTestEngine();
    const e = engine;
    await e.ctx.pool.query(`UPDATE backfill.pipelines SET estimate_sql = $1 WHERE name = 'orders'`, [ESTIMATE_SQL]);
    const plan = await planBackfill(e.ctx, REQUEST);
    expect(plan.previewedBy).toBe('estimate');
    expect(plan.expectedTotalAfter).toBe('1271902.10');
    expect(plan.announcements[0]?.facts.previewedBy).toBe('estimate');
    expect(slackNoticeText({ kind: 'announcement', facts: plan.announcements[0]!.facts })).toMatch(/from the pipeline's estimate/);
    const { backfill } = await startBackfill(e.ctx, REQUEST);
    expect((await e.ctx.pool.query(`SELECT count(*)::int AS n FROM bf_orders.expected WHERE bf_backfill = $1`, [backfill.id])).rows[0].n).toBe(0);
    // After the announcement one order of 07:00 changes upstream: its total leaves the estimate.
    await e.ctx.pool.query(`UPDATE warehouse.orders_raw SET amount_local = amount_local + 10 WHERE order_id = (SELECT min(order_id) FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T07:00Z')`);
    await overrideGate(e.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'preview test' });
    const paused = await runUntilSettled(e.ctx, backfill.id, () => undefined, e.notifier);
    expect(paused.backfill.state).toBe('paused');
    expect(paused.backfill.pausedReason).toMatch(/^2026-11-15 07:00: the staged partition has 60 rows totalling [\d.]+, not the estimated 60 rows totalling [\d.]+$/);
    // The canary passed its estimate; 07:00 and the wave after it wait for an operator.
    const published = paused.targets.filter((t) => t.status === 'published').map((t) => t.partitionHour.toISOString().slice(11, 13));
    expect(published).toContain('05');
    expect(published).not.toContain('07');
    expect(published).not.toContain('10');
  });
});
