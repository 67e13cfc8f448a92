import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { planBackfill } from '../../src/core/identify/plan.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';
import { slackNoticeText } from '../../src/views/notices.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

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
    expect(plan.expectedTotalAfter).toBe(NIGHT_15.correctedTotal);
    const { backfill, plan: started } = await startBackfill(e.ctx, REQUEST);
    // Start previews again in its own transaction, reading the days once (the backfill row's total before) and
    // the hours once (the targets' figures before): the same figures as the plan's own reads.
    expect({ before: started.totalBefore, after: started.expectedTotalAfter, kept: backfill.totalBefore }).toEqual({ before: plan.totalBefore, after: NIGHT_15.correctedTotal, kept: plan.totalBefore });
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

  it('keeps an hour whose previewed keys repeat as unproven, all its rows, and every other hour as proven once by the store\'s unique index', async () => {
    engine = await createTestEngine();
    const e = engine;
    // One order of 05:00 landed twice: the step gives its key twice for that hour.
    await e.ctx.pool.query(`INSERT INTO warehouse.orders_raw SELECT * FROM warehouse.orders_raw WHERE order_id = (SELECT min(order_id) FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T05:00Z')`);
    const plan = await planBackfill(e.ctx, REQUEST);
    const { backfill, plan: started } = await startBackfill(e.ctx, REQUEST);
    // The figures are the plan's: the hour refused once-keyed was kept again whole, in the same transaction.
    expect(started.expected).toEqual(plan.expected);
    const hours = await e.ctx.pool.query<{ hour: string; once: boolean | null; kept: number; expected: number }>(
      `SELECT to_char(t.partition_hour AT TIME ZONE 'UTC', 'HH24') AS hour, t.expected_keys_once AS once, t.expected_rows::int AS expected,
              (SELECT count(*)::int FROM bf_orders.expected x WHERE x.bf_backfill = t.backfill_id AND x.partition_hour = t.partition_hour
                 AND x.bf_keys_once IS NOT DISTINCT FROM (CASE WHEN t.expected_keys_once THEN true END)) AS kept
       FROM backfill.backfill_targets t WHERE t.backfill_id = $1 ORDER BY 1`, [backfill.id]);
    expect(hours.rows.length).toBeGreaterThan(1);
    for (const row of hours.rows) {
      // The target says whether its keys repeat (false for 05:00); each of its rows carries true where none does,
      // else NULL; and all were kept.
      expect({ hour: row.hour, once: row.once, kept: row.kept }).toEqual({ hour: row.hour, once: row.hour !== '05', kept: row.expected });
    }
    // Unproven is NULL, never false: the index's uniqueness holds among the rows flagged true alone.
    await expect(e.ctx.pool.query(`INSERT INTO bf_orders.expected SELECT bf_backfill, partition_hour, order_id, bf_measure, true FROM bf_orders.expected WHERE bf_backfill = $1 AND bf_keys_once LIMIT 1`, [backfill.id]))
      .rejects.toThrow(/expected_keys_once/);
    await expect(e.ctx.pool.query(`UPDATE bf_orders.expected SET bf_keys_once = false WHERE bf_backfill = $1`, [backfill.id])).rejects.toThrow(/expected_keys_once_true/);
  });

  it('brings a store made before the flag to it at the next start: its rows unproven, the old index replaced, no lock taken once it has it', async () => {
    engine = await createTestEngine();
    const e = engine;
    const first = await startBackfill(e.ctx, { ...REQUEST, target: '2026-11-15T05:00..2026-11-15T06:00' });
    // The expected table as stores made before it were: no flag, and an index on (backfill, partition, key).
    await e.ctx.pool.query('ALTER TABLE bf_orders.expected DROP COLUMN bf_keys_once; CREATE INDEX expected_by_key ON bf_orders.expected (bf_backfill, partition_hour, order_id)');
    const second = await startBackfill(e.ctx, { ...REQUEST, target: '2026-11-15T07:00..2026-11-15T08:00' });
    const flags = await e.ctx.pool.query<{ backfill: number; once: boolean | null; n: number }>(
      `SELECT bf_backfill::int AS backfill, bf_keys_once AS once, count(*)::int AS n FROM bf_orders.expected GROUP BY 1, 2 ORDER BY 1`);
    expect(flags.rows.map(({ backfill, once }) => ({ backfill, once }))).toEqual([{ backfill: first.backfill.id, once: null }, { backfill: second.backfill.id, once: true }]);
    const indexes = await e.ctx.pool.query<{ name: string }>(`SELECT indexrelid::regclass::text AS name FROM pg_index WHERE indrelid = 'bf_orders.expected'::regclass ORDER BY 1`);
    expect(indexes.rows.map((row) => row.name)).toEqual(['bf_orders.expected_keys_once']);
    // A store that has the flag is left as it is: a start takes no lock on the table that would wait for a measure.
    const holder = await e.ctx.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE bf_orders.expected IN ROW EXCLUSIVE MODE');
      const third = await startBackfill(e.ctx, { ...REQUEST, target: '2026-11-15T09:00..2026-11-15T10:00' });
      expect(third.backfill.id).toBeGreaterThan(second.backfill.id);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
  });

  it('uses the pipeline\'s estimate query when it declares one, says so, and checks each partition\'s rows and total against it', async () => {
    engine = await createTestEngine();
    const e = engine;
    await e.ctx.pool.query(`UPDATE backfill.pipelines SET estimate_sql = $1 WHERE name = 'orders'`, [ESTIMATE_SQL]);
    const plan = await planBackfill(e.ctx, REQUEST);
    expect(plan.previewedBy).toBe('estimate');
    expect(plan.expectedTotalAfter).toBe(NIGHT_15.correctedTotal);
    expect(plan.announcements[0]?.facts.previewedBy).toBe('estimate');
    expect(slackNoticeText({ kind: 'announcement', facts: plan.announcements[0]!.facts })).toMatch(/from the pipeline's estimate/);
    const { backfill, plan: started } = await startBackfill(e.ctx, REQUEST);
    expect({ before: started.totalBefore, after: started.expectedTotalAfter }).toEqual({ before: plan.totalBefore, after: plan.expectedTotalAfter });
    expect((await e.ctx.pool.query(`SELECT count(*)::int AS n FROM bf_orders.expected WHERE bf_backfill = $1`, [backfill.id])).rows[0].n).toBe(0);
    // Nothing kept, so no key of it repeats.
    expect((await e.ctx.pool.query(`SELECT bool_and(expected_keys_once) AS once FROM backfill.backfill_targets WHERE backfill_id = $1`, [backfill.id])).rows[0].once).toBe(true);
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
