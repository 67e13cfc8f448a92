// The figures a backfill keeps of each partition when it starts (rows, total and checksum before), and the days'
// totals (the backfill's total before, a signed figure's, what a daily report shows): each read only in the hours,
// or the days, asked for, so that a target partitioned by hour is pruned to their partitions. Compared with the
// statements they replaced (the hours joined to the whole target; the day of an expression of the partition
// column), on both shapes of the demo's target, with an hour and a day that hold no rows; another day's partition
// counted unread, in the session's statistics.

import { afterEach, describe, expect, it } from 'vitest';
import { insertBackfill } from '../../src/db/backfills.js';
import { checksumOver, checksumShapeOf, totalOverDays, wholeUtcDays, type ChecksumShape } from '../../src/db/partitions.js';
import { withTransaction, type Queryable } from '../../src/db/pool.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { insertBackfillSignoff } from '../../src/db/signatures.js';
import { insertTargets } from '../../src/db/targets.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

let engine: TestEngine | undefined;

afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

const HOURS = ['2026-11-15T05:00Z', '2026-11-15T06:00Z', '2026-11-15T07:00Z', '2026-12-31T23:00Z'].map((hour) => new Date(hour));

// What insertTargets read before: the hours joined to the whole target at once (the checksum of the rows joined).
const joined = (shape: ChecksumShape) => `SELECT e.h AS hour, count(t.*)::int AS rows, coalesce(sum(t.amount_base), 0)::numeric(18,2)::text AS total,
    ${checksumOver('t', shape, 't.order_id IS NOT NULL')} AS checksum
  FROM unnest($1::timestamptz[]) AS e(h) LEFT JOIN warehouse.orders t ON t.partition_hour = e.h GROUP BY e.h ORDER BY e.h`;

describe.each([['plain', 'month-end'], ['partitioned by hour', 'month-end-partitioned']] as const)('the figures before, on a target %s', (_shape, scenario) => {
  it('are what one join of the hours to the target gave, an hour without rows too; no other partition is read', async () => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'targets test');
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    const expected = (await e.ctx.pool.query<{ hour: Date; rows: number; total: string; checksum: string }>(joined(await checksumShapeOf(e.ctx.pool, 'warehouse.orders')), [HOURS])).rows;
    expect(expected.map((row) => row.rows > 0)).toEqual([true, true, true, false]);

    const { kept, scans } = await withTransaction(e.ctx.pool, async (tx) => {
      await tx.query('DELETE FROM backfill.backfill_targets WHERE backfill_id = $1', [id]);
      const before = await scansOfAnotherDay(tx);
      await insertTargets(tx, pipeline, id, HOURS.map((hour, index) => ({ hour, rows: index, total: `${index}.00`, keysOnce: true })));
      const after = await scansOfAnotherDay(tx);
      const rows = await tx.query<{ hour: Date; rows: number; total: string; checksum: string; expectedRows: number }>(
        `SELECT partition_hour AS hour, rows_before::int AS rows, total_before::text AS total, checksum_before AS checksum, expected_rows::int AS "expectedRows"
         FROM backfill.backfill_targets WHERE backfill_id = $1 ORDER BY partition_hour`, [id]);
      await tx.query('ROLLBACK; BEGIN');
      return { kept: rows.rows, scans: after - before };
    });
    expect(kept.map(({ expectedRows: _e, ...figures }) => figures)).toEqual(expected);
    expect(kept.map((row) => row.expectedRows)).toEqual([0, 1, 2, 3]);
    expect(scans).toBe(0);
  });

  it("sum whole days as the day of the partition column did (a day named twice, days apart, a day without rows), and read no other day's partition", async () => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    const days = ['2026-11-16', '2026-11-15', '2026-11-15', '2026-11-20', '2026-12-31'];
    const byExpression = async (named: string[]) => (await e.ctx.pool.query<{ total: string }>(
      `SELECT coalesce(sum(amount_base), 0)::numeric(18,2)::text AS total FROM warehouse.orders WHERE (partition_hour AT TIME ZONE 'UTC')::date = ANY ($1::date[])`, [named])).rows[0]?.total;
    expect(Number(await byExpression(days))).toBeGreaterThan(0);
    expect(await byExpression(['2026-12-31'])).toBe('0.00');

    const read = await withTransaction(e.ctx.pool, async (tx) => {
      const before = await scansOfAnotherDay(tx);
      const total = await totalOverDays(tx, pipeline, days);
      const inserted = await insertBackfill(tx, pipeline, {
        reason: 'days test', requestedBy: 'U07ONCALL', firstHour: new Date('2026-11-15T00:00Z'), lastHour: new Date('2026-11-16T23:00Z'), partitionCount: 48,
        watermarkBefore: null, watermarkResetTo: new Date('2026-11-14T23:00Z'), days: ['2026-11-16', '2026-11-15'], limitOverride: null, incidentChannel: null, planId: null, needsSecondApproval: false,
      });
      if (inserted === undefined) throw new Error('no backfill row');
      const { id } = inserted;
      const { rows: [signoff] } = await tx.query<{ id: number }>('SELECT id FROM backfill.signoffs ORDER BY id LIMIT 1');
      await insertBackfillSignoff(tx, pipeline, id, { signoffId: signoff?.id ?? 0, report: 'settlement_report', period: '2026-11-15', total: '1.00', signedBy: 'U07SETTLE', signedAt: new Date() });
      const { rows: [kept] } = await tx.query<{ backfill: string; signoff: string }>(
        `SELECT b.total_before::text AS backfill, s.total_before::text AS signoff FROM backfill.backfills b JOIN backfill.backfill_signoffs s ON s.backfill_id = b.id WHERE b.id = $1`, [id]);
      const after = await scansOfAnotherDay(tx);
      await tx.query('ROLLBACK; BEGIN');
      return { total, kept, returned: inserted.totalBefore, scans: after - before };
    });
    expect(read.total).toBe(await byExpression(days));
    // What the insert returns is what it kept: start's preview takes its days' total from it.
    expect(read.returned).toBe(read.kept?.backfill);
    expect(read.kept).toEqual({ backfill: await byExpression(['2026-11-15', '2026-11-16']), signoff: await byExpression(['2026-11-15']) });
    expect(read.scans).toBe(0);
  });
});

describe('wholeUtcDays', () => {
  it('makes one range of each run of consecutive days, in order, whatever order and repeats the days come in', () => {
    const { condition, params } = wholeUtcDays('"p"', ['2026-11-16', '2026-11-15', '2026-11-20', '2026-11-15', '2026-11-30', '2026-12-01'], 3);
    expect(condition).toBe('(("p" >= $3::timestamptz AND "p" < $4::timestamptz) OR ("p" >= $5::timestamptz AND "p" < $6::timestamptz) OR ("p" >= $7::timestamptz AND "p" < $8::timestamptz))');
    expect(params.map((d) => d.toISOString())).toEqual([
      '2026-11-15T00:00:00.000Z', '2026-11-17T00:00:00.000Z', '2026-11-20T00:00:00.000Z', '2026-11-21T00:00:00.000Z', '2026-11-30T00:00:00.000Z', '2026-12-02T00:00:00.000Z']);
    expect(wholeUtcDays('"p"', [], 1)).toEqual({ condition: 'false', params: [] });
    expect(() => wholeUtcDays('"p"', ['2026-11-15T00:00Z'], 1)).toThrow(/not a day/);
  });
});

/**
 * The session's scans of another day's partition (2026-11-01's) not yet reported to the server's statistics:
 * read before and after, since earlier transactions of the pooled connection may have left some.
 */
async function scansOfAnotherDay(tx: Queryable): Promise<number> {
  const { rows } = await tx.query<{ scans: number }>(
    `SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0)::int AS scans FROM pg_stat_xact_user_tables WHERE schemaname = 'warehouse' AND relname = 'orders_d20261101'`);
  return rows[0]?.scans ?? 0;
}
