import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { findRunnableSteps } from '../../src/core/lifecycle/dispatch.js';
import { executeStep } from '../../src/core/procedure.js';
import { stagePartition } from '../../src/core/recompute/stagePublish.js';
import { requireBackfill } from '../../src/db/backfills.js';
import { listEvents } from '../../src/db/events.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

// Staging overlaps publishing: a partition published by rewrite publishes once its own stage is done and every
// earlier wave is published (the canary first), not once every partition is staged; and on the queue a publish
// goes ahead of the stages waiting, so later hours stage while earlier ones publish. A publish by swap too: a
// stage by swap holds no lock on the target, whose ACCESS EXCLUSIVE the swap's catalog window takes.

const HOURS = ['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15T${h}:00Z`);
const hour = (index: number) => HOURS[index] as string;

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function runnable(e: TestEngine, id: number): Promise<string[]> {
  // An hour's step by its hour (05 for 2026-11-15T05:00Z), any other by its key.
  return (await findRunnableSteps(e.ctx.pool, id)).map((step) => `${step.kind} ${step.key.length > 13 ? step.key.slice(11, 13) : step.key}`);
}

describe('staging overlaps publishing, within the canary and wave rules', () => {
  it('lets a partition publish once it is staged and the waves before it are published, while other hours are still unstaged', async () => {
    // Waves of two: 05 is the canary (wave 0), 06 and 07 wave 1, 08 and 09 wave 2, 10 wave 3.
    engine = await createTestEngine('month-end', { WAVE_SIZE: '2' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'overlap test');
    expect(await runnable(e, id)).toEqual(['stage 05', 'stage 06', 'stage 07', 'stage 08', 'stage 09', 'stage 10']);

    // The canary's stage alone lets the canary publish; nothing of wave 1 yet, staged or not.
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(0) })).toBe('done');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(2) })).toBe('done');
    expect(await runnable(e, id)).toEqual(['stage 06', 'stage 08', 'stage 09', 'stage 10', 'publish 05']);
    // The claim holds the same rule: 07 is staged, but the canary is not published.
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(2) })).toBe('not_runnable');

    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(0) })).toBe('done');
    // Wave 1 opens: 07 (staged) may publish, 06 (not staged) may not, and the claim refuses it too.
    expect(await runnable(e, id)).toEqual(['stage 06', 'stage 08', 'stage 09', 'stage 10', 'publish 07']);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(1) })).toBe('not_runnable');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(2) })).toBe('done');

    // Wave 2 waits for the whole of wave 1, staged 08 included.
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(3) })).toBe('done');
    expect(await runnable(e, id)).toEqual(['stage 06', 'stage 09', 'stage 10']);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(1) })).toBe('done');
    expect(await runnable(e, id)).toEqual(['stage 09', 'stage 10', 'publish 06']);

    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(1) })).toBe('done');
    expect(await runnable(e, id)).toEqual(['stage 09', 'stage 10', 'publish 08']);

    // The watermark still waits for every stage and every publish.
    for (const index of [4, 5]) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(index) })).toBe('done');
    for (const index of [3, 4]) expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(index) })).toBe('done');
    expect(await runnable(e, id)).toEqual(['publish 10']);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(5) })).toBe('done');
    expect(await runnable(e, id)).toEqual(['watermark reset']);
  });

  it('lets a partition published by swap publish once it is staged and the waves before it are published, as by rewrite', async () => {
    engine = await createTestEngine('month-end-partitioned', { WAVE_SIZE: '2' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'overlap test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(0) })).toBe('done');
    const { rows } = await e.ctx.pool.query<{ own: boolean }>(
      'SELECT staged_relid IS NOT NULL AS own FROM backfill.backfill_targets WHERE backfill_id = $1 AND partition_hour = $2', [id, hour(0)]);
    expect(rows[0]?.own, 'the canary was staged into a table of its own, for a swap').toBe(true);
    expect(await runnable(e, id)).toEqual(['stage 06', 'stage 07', 'stage 08', 'stage 09', 'stage 10', 'publish 05']);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(0) })).toBe('done');
    for (const index of [1, 2]) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(index) })).toBe('done');
    expect(await runnable(e, id)).toEqual(['stage 08', 'stage 09', 'stage 10', 'publish 06', 'publish 07']);
  });

  it('stages a partition for a swap without a lock on the target, so a swap of another hour commits while that stage is still open', async () => {
    // A swap held up by the stage would give its step back for a retry after LOCK_TIMEOUT_MS.
    engine = await createTestEngine('month-end-partitioned', { WAVE_SIZE: '2', LOCK_TIMEOUT_MS: '3000' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'overlap test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hour(0) })).toBe('done');

    // The stage of 06 in a transaction of its own, held open at its end, where a stage commits.
    const stage = await e.ctx.pool.connect();
    try {
      await stage.query('BEGIN');
      expect(await stagePartition(stage, await requireBackfill(stage, id), new Date(hour(1)), { swapMinRows: 0 })).toBe('staged');
      const { rows: [own] } = await stage.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const { rows: held } = await e.ctx.pool.query<{ relation: string; mode: string }>(
        `SELECT relation::regclass::text AS relation, mode FROM pg_locks
         WHERE pid = $1 AND locktype = 'relation' AND relation::regclass::text ~ '^warehouse\\.orders($|_p)' ORDER BY 1, 2`, [own?.pid]);
      expect(held, 'the stage holds its own hour\'s partition, and nothing of the target or its other partitions').toEqual([
        { relation: 'warehouse.orders_p2026111506', mode: 'AccessShareLock' },
        { relation: 'warehouse.orders_p2026111506_pkey', mode: 'AccessShareLock' },
      ]);
      const { rows: [staged] } = await stage.query<{ swap: boolean }>(
        'SELECT staged_relid IS NOT NULL AS swap FROM backfill.backfill_targets WHERE backfill_id = $1 AND partition_hour = $2', [id, hour(1)]);
      expect(staged?.swap, '06 was staged for a swap').toBe(true);

      // The canary's swap takes the target ACCESS EXCLUSIVE: it commits while the stage of 06 is still open.
      expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour(0) })).toBe('done');
      const published = (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'recomputed');
      expect(published.map((event) => [event.detail.partition, event.detail.publishedBy])).toEqual([['2026-11-15 05:00', 'swap']]);
      // Four takes (the staged table, the probe, writers out, the catalog window), none of them tried twice.
      expect(published[0]?.detail.lockTries, 'each of its locks was granted at the first try').toBe(4);
      await stage.query('COMMIT');
    } finally {
      await stage.query('ROLLBACK').catch(() => undefined);
      stage.release();
    }
  });

  it('on the queue, publishes the canary before the last hours are staged, and the backfill ends as it would in order', async () => {
    // One job at a time makes the queue's order the order the steps ran in.
    engine = await createTestEngine('month-end', { WAVE_SIZE: '2', WORKER_CONCURRENCY: '1' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'overlap test');
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.diff).toBe('-12408.45');

    const started = (await listEvents(e.ctx.pool, id))
      .filter((event) => event.kind === 'step_started' && (event.detail.step === 'stage' || event.detail.step === 'publish'))
      .map((event) => `${String(event.detail.step)} ${String(event.detail.key).slice(11, 13)}`);
    // Each publish runs as soon as the graph allows it, ahead of the stages still queued: the canary right after
    // its own stage, each wave once its hours are staged.
    expect(started).toEqual([
      'stage 05', 'publish 05', 'stage 06', 'publish 06', 'stage 07', 'publish 07', 'stage 08', 'publish 08', 'stage 09', 'publish 09',
      'stage 10', 'publish 10',
    ]);
  });
});
