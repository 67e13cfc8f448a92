import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { executeStep } from '../../src/core/procedure.js';
import { createStepQueue, dispatch } from '../../src/queue/stepQueue.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR = 'U07ONCALL';

async function enqueuedInTimeline(engine: TestEngine, backfillId: number): Promise<{ step: string; key: string; jobId: string }[]> {
  const { rows } = await engine.ctx.pool.query<{ step: string; key: string; jobId: string }>(
    `SELECT detail ->> 'step' AS step, detail ->> 'key' AS key, detail ->> 'jobId' AS "jobId" FROM backfill.events
     WHERE backfill_id = $1 AND kind = 'job_enqueued' ORDER BY id`, [backfillId]);
  return rows;
}

describe('the database is the truth; the queue only carries work', () => {
  let engine: TestEngine;
  let backfillId: number;

  beforeAll(async () => {
    engine = await createTestEngine();
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    backfillId = backfill.id;
    await overrideGate(engine.ctx, { backfillId, actor: OPERATOR, reason: 'durability test' });
  });
  afterAll(async () => engine.close());

  it('enqueues each step once, under a deterministic id, however often the dispatcher runs', async () => {
    const queue = createStepQueue(engine.ctx.config);
    try {
      const first = await dispatch(engine.ctx, queue, backfillId);
      const second = await dispatch(engine.ctx, queue, backfillId);
      // The gate is open (override) but nothing is recomputed before the announcements have gone out.
      expect(first.map((s) => `${s.kind} ${s.key}`)).toEqual(['announce payout_export', 'announce settlement_report']);
      expect(second).toEqual([]);
      expect(await queue.count()).toBe(2);
      expect(await queue.getJob(`bf${backfillId}-announce-settlement_report`)).toBeDefined();
      // Each job added is in the timeline once, in the order it was added (one statement records a dispatch's jobs).
      expect(await enqueuedInTimeline(engine, backfillId)).toEqual(first.map((s) => ({ step: s.kind, key: s.key, jobId: `bf${backfillId}-${s.kind}-${s.key}` })));
      for (const key of ['payout_export', 'settlement_report']) expect(await executeStep(engine.ctx, { backfillId, kind: 'announce', key })).toBe('done');
      const stages = await dispatch(engine.ctx, queue, backfillId);
      expect(stages.length).toBeGreaterThan(1);
      expect((await enqueuedInTimeline(engine, backfillId)).slice(first.length)).toEqual(
        stages.map((s) => ({ step: s.kind, key: s.key, jobId: `bf${backfillId}-${s.kind}-${s.key.replace(/[^A-Za-z0-9_.-]/g, '')}` })));
    } finally {
      await queue.close();
    }
  });

  it('rebuilds the jobs from Postgres when Redis lost them, and finishes with nothing doubled', async () => {
    const lost = createStepQueue(engine.ctx.config);
    await lost.obliterate({ force: true });
    expect(await lost.count()).toBe(0);
    await lost.close();
    const rowsBefore = await countRows(engine.ctx, `SELECT 1 FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`);
    const report = await runUntilSettled(engine.ctx, backfillId, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.diff).toBe('-12408.45');
    expect(await countRows(engine.ctx, `SELECT 1 FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`)).toBe(rowsBefore);
    expect(engine.notifier.sent).toHaveLength(1);
  });

  it('treats a repeated delivery of a finished step as a no-op', async () => {
    const events = await countRows(engine.ctx, 'SELECT 1 FROM backfill.events WHERE backfill_id = $1', [backfillId]);
    for (const step of [{ kind: 'publish', key: '2026-11-15T05:00Z' }, { kind: 'stage', key: '2026-11-15T05:00Z' }, { kind: 'replay', key: 'settlement_report' }, { kind: 'compare', key: 'totals' }] as const) {
      expect(await executeStep(engine.ctx, { backfillId, ...step })).toBe('already_done');
    }
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.events WHERE backfill_id = $1', [backfillId])).toBe(events);
    const attempts = await engine.ctx.pool.query(`SELECT max(attempts)::int AS m FROM backfill.backfill_steps WHERE backfill_id = $1`, [backfillId]);
    expect(attempts.rows[0].m).toBe(1);
  });
});
