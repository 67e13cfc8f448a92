// A consumer's queue whose Redis is down must fail the replay (retryably), not hold the step and its claim for
// ever: the queues' connections retry without end, so each call has a deadline of its own.

import { describe, expect, it } from 'vitest';
import type { RunConfig } from '../../src/backends.js';
import { loadConfig } from '../../src/config.js';
import { isBackfillError } from '../../src/errors.js';
import { BullmqReplayJobs } from '../../src/queue/replayJobs.js';

describe("a consumer's queue that does not answer", () => {
  it('fails the add and the state check after WEBHOOK_TIMEOUT_MS, retryably, naming the queue and what to check', async () => {
    const config = { ...loadConfig({ WEBHOOK_TIMEOUT_MS: '300' }), DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres' } as RunConfig;
    const jobs = new BullmqReplayJobs(config);
    // Port 1 on loopback: nothing listens, every connection attempt is refused and retried.
    const target = { queue: 'payouts', connection: 'redis://127.0.0.1:1' };
    try {
      for (const call of [() => jobs.add(target, { name: 'replay', jobId: 'backfill-1-replay-payout_export', data: {} }), () => jobs.state(target, 'backfill-1-replay-payout_export')]) {
        const error: unknown = await call().then(() => undefined, (e: unknown) => e);
        expect(isBackfillError(error) && error.retryable).toBe(true);
        expect((error as Error).message).toBe('the queue payouts did not answer within 300 ms (WEBHOOK_TIMEOUT_MS): check that its Redis or database is up and reachable from the workers');
      }
    } finally {
      await Promise.race([jobs.close(), new Promise((resolve) => setTimeout(resolve, 2000))]);
    }
  });
});
