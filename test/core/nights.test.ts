import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { tick } from '../../src/core/recompute/tick.js';
import { deliverNight9Source } from '../../dev/demo/seed.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR = 'U07ONCALL';

describe('night 27: a partial load', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('recovers the late shard\'s rows, moving the watermark back to the hour before', async () => {
    const shardCount = async () => (await engine.ctx.pool.query(
      `SELECT count(DISTINCT shard)::int AS n, count(*)::int AS rows FROM warehouse.orders WHERE partition_hour BETWEEN '2026-11-27T02:00Z' AND '2026-11-27T05:00Z'`)).rows[0];
    const before = await shardCount();
    expect(before.n).toBe(2);
    const raw = await engine.ctx.pool.query(`SELECT count(*)::int AS rows FROM warehouse.orders_raw WHERE event_hour BETWEEN '2026-11-27T02:00Z' AND '2026-11-27T05:00Z'`);
    const { backfill, plan } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-27', reason: 'shard 3 landed late', actor: OPERATOR });
    expect(plan.identified.hours).toHaveLength(4);
    expect(plan.direction).toBe('up');
    expect(backfill.watermarkResetTo.toISOString()).toBe('2026-11-27T01:00:00.000Z');
    await overrideGate(engine.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'test' });
    const report = await runUntilSettled(engine.ctx, backfill.id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    const after = await shardCount();
    expect(after).toEqual({ n: 3, rows: raw.rows[0].rows });
    expect(Number(report.backfill.diff)).toBeGreaterThan(0);
    expect(report.signed[0]).toMatchObject({ report: 'settlement_report', period: '2026-11-27' });
  });
});

describe('night 9: an upstream outage', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine('night-9-outage');
  });
  afterAll(async () => engine.close());

  it('needs no backfill: the watermark never passed the missing hours', async () => {
    await expect(startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-09', reason: 'outage', actor: OPERATOR }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e, ErrorCode.NothingToBackfill) && /not processed yet .* the normal run \(tick\)/s.test(e.message));
  });

  it('waits at the watermark while the source is missing, then catches up through tick and lists the stale readers', async () => {
    const idle = await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler' });
    expect(idle.processed).toHaveLength(0);
    expect(idle.stoppedBecause).toMatch(/2026-11-09 00:00 has 0 of 3 shards/);
    await deliverNight9Source(engine.ctx.pool);
    const result = await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler' });
    expect(result.processed[0]?.toISOString()).toBe('2026-11-09T00:00:00.000Z');
    expect(result.watermark && result.watermark > new Date('2026-11-09T13:00:00Z')).toBe(true);
    const rows = await engine.ctx.pool.query(
      `SELECT count(DISTINCT partition_hour)::int AS n FROM warehouse.orders WHERE partition_hour BETWEEN '2026-11-09T00:00Z' AND '2026-11-09T13:00Z'`);
    expect(rows.rows[0].n).toBe(14);
    const stale = [...new Set(result.staleReaders.map((r) => r.consumer))].sort();
    expect(stale).toEqual(['demand_forecast', 'settlement_report']);
    expect(result.staleReaders.filter((r) => r.consumer === 'settlement_report')).toHaveLength(24);
  });
});
