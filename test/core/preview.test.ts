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

/** The pipeline's table summed over the day of an expression of its partition column. */
async function dayTotal(e: TestEngine, day: string): Promise<string | undefined> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(
    `SELECT coalesce(sum(amount_base), 0)::numeric(18,2)::text AS total FROM warehouse.orders WHERE (partition_hour AT TIME ZONE 'UTC')::date = $1::date`, [day]);
  return rows[0]?.total;
}

async function signedFiguresBefore(e: TestEngine, backfillId: number): Promise<{ period: string; total: string }[]> {
  const { rows } = await e.ctx.pool.query<{ period: string; total: string }>(
    `SELECT to_char(period, 'YYYY-MM-DD') AS period, total_before::text AS total FROM backfill.backfill_signoffs WHERE backfill_id = $1 ORDER BY period`, [backfillId]);
  return rows;
}

describe('the preview', () => {
  it('runs the step query once, aggregated, writing nothing to the table; start keeps its rows by key as the envelope', async () => {
    engine = await createTestEngine();
    const e = engine;
    const dead = async () => (await e.ctx.pool.query(`SELECT n_tup_del::int AS n FROM pg_stat_user_tables WHERE relid = 'warehouse.orders'::regclass`)).rows[0]?.n;
    const deletedBefore = await dead();
    const plan = await planBackfill(e.ctx, REQUEST);
    expect(plan.previewedBy).toBe('step');
    expect(plan.expectedTotalAfter).toBe('1271902.10');
    const { backfill, plan: started } = await startBackfill(e.ctx, REQUEST);
    // Start previews again in its own transaction, reading the days once (the backfill row's total before) and
    // the hours once (the targets' figures before): the same figures as the plan's own reads.
    expect({ before: started.totalBefore, after: started.expectedTotalAfter, kept: backfill.totalBefore }).toEqual({ before: plan.totalBefore, after: '1271902.10', kept: plan.totalBefore });
    // The settlement report signed for the night, the backfill's one day: its total before is the day's.
    expect(await signedFiguresBefore(e, backfill.id)).toEqual([{ period: '2026-11-15', total: await dayTotal(e, '2026-11-15') }]);
    expect(plan.totalBefore).toBe(await dayTotal(e, '2026-11-15'));
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
    const { backfill, plan: started } = await startBackfill(e.ctx, REQUEST);
    expect({ before: started.totalBefore, after: started.expectedTotalAfter }).toEqual({ before: plan.totalBefore, after: plan.expectedTotalAfter });
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

  it('gives start the figures the plan gives over hours of two days, each day summed whole, an hour with no live rows too', async () => {
    engine = await createTestEngine();
    const e = engine;
    // Midnight's live rows are gone and one source row of 23:00 changed: the preview differs from what is live.
    await e.ctx.pool.query(`DELETE FROM warehouse.orders WHERE partition_hour = '2026-11-16T00:00Z'`);
    await e.ctx.pool.query(`UPDATE warehouse.orders_raw SET amount_local = amount_local + 10 WHERE order_id = (SELECT min(order_id) FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T23:00Z')`);
    const request = { ...REQUEST, target: '2026-11-15T22:00..2026-11-16T01:00' };
    const plan = await planBackfill(e.ctx, request);
    expect(plan.days).toEqual(['2026-11-15', '2026-11-16']);
    const { backfill, plan: started } = await startBackfill(e.ctx, request);
    expect({ before: started.totalBefore, after: started.expectedTotalAfter, expected: started.expected })
      .toEqual({ before: plan.totalBefore, after: plan.expectedTotalAfter, expected: plan.expected });
    expect(backfill.totalBefore).toBe(plan.totalBefore);
    // The total after is the days' total less the hours' live rows plus the preview's: the targets hold both.
    const { rows } = await e.ctx.pool.query<{ live: string; previewed: string }>(
      `SELECT sum(total_before)::text AS live, sum(expected_total)::text AS previewed FROM backfill.backfill_targets WHERE backfill_id = $1`, [backfill.id]);
    const cents = (money: string | undefined) => Math.round(Number(money) * 100);
    expect(rows[0]?.live).not.toBe(rows[0]?.previewed);
    // Over two days, the figure signed for each has that day's total before, not the backfill's.
    expect(await signedFiguresBefore(e, backfill.id)).toEqual([
      { period: '2026-11-15', total: await dayTotal(e, '2026-11-15') }, { period: '2026-11-16', total: await dayTotal(e, '2026-11-16') }]);
    expect(cents(started.expectedTotalAfter)).toBe(cents(plan.totalBefore) - cents(rows[0]?.live) + cents(rows[0]?.previewed));
  });
});
