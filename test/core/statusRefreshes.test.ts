import { afterEach, describe, expect, it } from 'vitest';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { startWorkers } from '../../src/worker.js';
import { approvedNight15, createTestEngine, RecordingMessenger, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';

// The status message is a view of the rows: a step's job does not wait for it. The real messenger holds
// refreshes to one a STATUS_THROTTLE_MS and waits out Slack's rate limits inside one, so a job that waited for its
// refresh held its worker slot that long after every step. Here every refresh is held until the test lets it go:
// the night still runs to done, and a closing worker waits for the refreshes it asked for.

/** Slack taking its time: each status refresh waits until the test releases them all. */
class HeldStatus extends RecordingMessenger {
  asked = 0;
  finished = 0;
  private release: () => void = () => undefined;
  private readonly released = new Promise<void>((resolve) => {
    this.release = resolve;
  });

  override async changed(): Promise<void> {
    this.asked += 1;
    await this.released;
    this.finished += 1;
  }

  letGo(): void {
    this.release();
  }
}

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

describe('status refreshes do not hold the engine', () => {
  it('runs night 15 to done while every status refresh is held, and a closing worker waits for them', async () => {
    engine = await createTestEngine('month-end', { WORKER_CONCURRENCY: '2' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'status refresh test');
    const messenger = new HeldStatus();
    const workers = await startWorkers({ ...e.ctx, messenger }, { sweepMs: 200, closeDeadlineMs: 30_000 });
    let closing: Promise<void> | undefined;
    try {
      await workers.kick(id);
      await waitUntil(async () => {
        const report = await loadBackfillReport(e.ctx.pool, id);
        return report.backfill.state === 'done' && report.steps.every((step) => step.status !== 'pending' && step.status !== 'running');
      }, 'night 15 done with its status refreshes held');
      expect(messenger.asked).toBeGreaterThan(0);
      expect(messenger.finished).toBe(0);
      expect(messenger.diffs).toEqual([id]);

      closing = workers.close();
      messenger.letGo();
      await closing;
      expect(messenger.finished).toBe(messenger.asked);
    } finally {
      messenger.letGo();
      if (!closing) await workers.close();
    }
  });
});
