// `npm run faults` measures how soon an in-flight backfill goes on after a fault, against the bound
// docs/operating.md ("Recovery bound") promises (STEP_LEASE_MS + the 5 s dispatcher sweep + a margin for the step
// itself). Its core runs here for one fault, once, so the script keeps working: a worker process is killed
// (SIGKILL) while it publishes a partition, the other one must take that step over within the bound, and night 15
// must end done with its exact figures. It is the fault that needs no Redis of its own and whose bound is all
// lease and sweep. And a restart of the PostgreSQL the script starts for it, in immediate mode: the server
// recovers as after a crash.

import { describe, expect, it } from 'vitest';
import { boundMs, NIGHT_15_DIFF, runFaults } from '../bench/faultRun.js';
import { adminUrl, testRedisUrl } from './support/db.js';

describe('npm run faults', () => {
  it('measures the takeover of a killed worker\'s publish within STEP_LEASE_MS + one sweep, and night 15 ends done exactly', async () => {
    // A lease long enough that a busy machine's pauses do not expire live claims, short enough to be the bound.
    const options = {
      serverUrl: adminUrl(), redisUrl: testRedisUrl(), faults: ['worker-killed'] as const, runs: 1,
      leaseMs: 5_000, marginMs: 3_000, timeoutMs: 120_000, workerConcurrency: 2, log: () => undefined,
    };
    const [summary] = await runFaults(options);
    expect(summary?.fault).toBe('worker-killed');
    const run = summary?.runs[0];
    expect(run?.error).toBeUndefined();
    expect(run).toMatchObject({ state: 'done', diff: NIGHT_15_DIFF, recomputed: 6, exact: true });
    // The killed worker's publish was taken over by the other one, not left to BullMQ's stalled-job check.
    expect(run?.takeovers).toBeGreaterThanOrEqual(1);
    // The product's bound is the point of the script: a recovery that misses it fails here too.
    expect(run?.recoveryMs).toBeLessThanOrEqual(boundMs(options));
    expect(summary?.ok).toBe(true);
  }, 240_000);

  it('restarts a PostgreSQL of its own (immediate: crash recovery) mid-publish, and night 15 ends done exactly within the bound', async () => {
    const options = {
      serverUrl: adminUrl(), redisUrl: testRedisUrl(), faults: ['postgres-restarted-immediate'] as const, runs: 1,
      leaseMs: 5_000, marginMs: 3_000, timeoutMs: 120_000, workerConcurrency: 2, log: () => undefined,
    };
    const [summary] = await runFaults(options);
    const run = summary?.runs[0];
    expect(run?.error).toBeUndefined();
    expect(run?.injected).toContain('pg_ctl restart -m immediate');
    expect(run).toMatchObject({ state: 'done', diff: NIGHT_15_DIFF, recomputed: 6, exact: true });
    expect(run?.recoveryMs).toBeLessThanOrEqual(boundMs(options));
    expect(summary?.ok).toBe(true);
  }, 240_000);
});
