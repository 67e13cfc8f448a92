import { afterEach, describe, expect, it, vi } from 'vitest';
import { startBackfill } from '../../src/core/announce/start.js';
import { sendReminder } from '../../src/core/announce/reminders.js';
import { executeStep } from '../../src/core/procedure.js';
import { createStepQueue, dispatch } from '../../src/queue/stepQueue.js';
import { startWorkers } from '../../src/worker.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';

const OPERATOR = 'U07ONCALL';
const REMINDER_MS = 60_000;
/** The worker's clock runs this far ahead of the database's. */
const AHEAD_MS = 2 * 60_000;

let engine: TestEngine | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await engine?.close();
  engine = undefined;
});

async function announcedNight15(e: TestEngine): Promise<number> {
  const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
  for (const key of ['payout_export', 'settlement_report']) await executeStep(e.ctx, { backfillId: backfill.id, kind: 'announce', key });
  const { rows } = await e.ctx.pool.query<{ state: string }>('SELECT state FROM backfill.backfills WHERE id = $1', [backfill.id]);
  expect(rows[0]?.state).toBe('announced');
  return backfill.id;
}

describe('reminders follow the database clock', () => {
  it('a worker whose clock runs ahead neither schedules nor sends a reminder before ANNOUNCE_REMINDER_MS has passed in the database', async () => {
    engine = await createTestEngine('month-end', { ANNOUNCE_REMINDER_MS: String(REMINDER_MS) });
    const e = engine;
    const id = await announcedNight15(e);
    // Only the process's Date moves: PostgreSQL and the queue keep their own clocks, as on a skewed machine.
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() + AHEAD_MS);

    expect(await sendReminder(e.ctx, id, 'payout_export')).toBe(false);
    expect(e.notifier.reminded).toEqual([]);

    const queue = createStepQueue(e.ctx.config);
    try {
      await dispatch(e.ctx, queue, id);
      for (const consumer of ['payout_export', 'settlement_report']) {
        const job = await queue.getJob(`bf${id}-remind-${consumer}`);
        // Almost the whole minute is still to wait (by the worker's clock the reminder would be 1 min late already).
        expect(job?.opts.delay).toBeGreaterThan(REMINDER_MS - 10_000);
        expect(job?.opts.delay).toBeLessThanOrEqual(REMINDER_MS);
      }
    } finally {
      await queue.close();
    }

    // A job that comes early anyway (its delay counted by another clock) completes sending nothing, and the
    // next dispatch schedules it again instead of leaving the announcement unreminded for good.
    const workers = await startWorkers(e.ctx, { sweepMs: 3_600_000 });
    try {
      const jobId = `bf${id}-remind-payout_export`;
      await (await workers.queue.getJob(jobId))?.promote();
      await waitUntil(async () => (await (await workers.queue.getJob(jobId))?.getState()) === 'completed', 'the early reminder job to run');
      expect((await workers.queue.getJob(jobId))?.returnvalue).toBe('not_due');
      expect(e.notifier.reminded).toEqual([]);
      await workers.kick(id);
      const again = await workers.queue.getJob(jobId);
      expect(await again?.getState()).toBe('delayed');
      expect(again?.opts.delay).toBeGreaterThan(REMINDER_MS - 10_000);
    } finally {
      await workers.close();
    }

    // The minute passes in the database (the announcements went out 61 s earlier by its clock): now it is sent, once.
    await e.ctx.pool.query(`UPDATE backfill.backfill_steps SET finished_at = finished_at - interval '61 seconds' WHERE backfill_id = $1 AND kind = 'announce'`, [id]);
    expect(await sendReminder(e.ctx, id, 'payout_export')).toBe(true);
    expect(await sendReminder(e.ctx, id, 'payout_export')).toBe(false);
    expect(e.notifier.reminded).toHaveLength(1);
  });
});
