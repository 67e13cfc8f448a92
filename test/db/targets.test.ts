// The figures a backfill keeps of each partition when it starts (rows, total and checksum before): read only in
// the hours backfilled, so that a target partitioned by hour is pruned to their partitions. Compared with the
// statement they replaced (the hours joined to the whole target), on both shapes of the demo's target, with an
// hour that holds no rows; another day's partition counted unread, in the session's statistics.

import { afterEach, describe, expect, it } from 'vitest';
import { withTransaction, type Queryable } from '../../src/db/pool.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { insertTargets } from '../../src/db/targets.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

let engine: TestEngine | undefined;

afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

const HOURS = ['2026-11-15T05:00Z', '2026-11-15T06:00Z', '2026-11-15T07:00Z', '2026-12-31T23:00Z'].map((hour) => new Date(hour));

// What insertTargets read before: the hours joined to the whole target at once.
const JOINED = `SELECT e.h AS hour, count(t.*)::int AS rows, coalesce(sum(t.amount_base), 0)::numeric(18,2)::text AS total,
    md5(coalesce(string_agg(t::text, '|' ORDER BY t.order_id), '')) AS checksum
  FROM unnest($1::timestamptz[]) AS e(h) LEFT JOIN warehouse.orders t ON t.partition_hour = e.h GROUP BY e.h ORDER BY e.h`;

describe.each([['plain', 'month-end'], ['partitioned by hour', 'month-end-partitioned']] as const)('the figures before, on a target %s', (_shape, scenario) => {
  it('are what one join of the hours to the target gave, an hour without rows too; no other partition is read', async () => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'targets test');
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    const expected = (await e.ctx.pool.query<{ hour: Date; rows: number; total: string; checksum: string }>(JOINED, [HOURS])).rows;
    expect(expected.map((row) => row.rows > 0)).toEqual([true, true, true, false]);

    const { kept, scans } = await withTransaction(e.ctx.pool, async (tx) => {
      await tx.query('DELETE FROM backfill.backfill_targets WHERE backfill_id = $1', [id]);
      const before = await scansOfAnotherDay(tx);
      await insertTargets(tx, pipeline, id, HOURS.map((hour, index) => ({ hour, rows: index, total: `${index}.00` })));
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
