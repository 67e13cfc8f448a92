// `npm run faults` measures how soon an in-flight backfill goes on after a fault, against the bound
// docs/operating.md ("Recovery bound") promises (STEP_LEASE_MS + the 5 s dispatcher sweep + a margin for the step
// itself). Its core runs here for one fault, once, so the script keeps working: a worker process is killed
// (SIGKILL) while it publishes a partition, the other one must take that step over within the bound, and night 15
// must end done with its exact figures. It is the fault that needs no Redis of its own and whose bound is all
// lease and sweep. And a restart of the PostgreSQL the script starts for it, in immediate mode: the server
// recovers as after a crash, which empties the unlogged tables of the rows staged for a rewrite.
//
// The bound itself is wall-clock time, measured by `npm run faults` (which exits 1 when a recovery misses it) and not
// asserted here: a suite run on a loaded machine stretches every step and the server's own crash recovery. Here the
// recovery must happen, by the mechanism the bound rests on (a takeover of the lost claim), and end exactly.

import { describe, expect, it } from 'vitest';
import { boundMs, NIGHT_15_DIFF, runFaults } from '../bench/faultRun.js';
import { adminUrl, testRedisUrl } from './support/db.js';

describe('npm run faults', () => {
  it('measures the takeover of a killed worker\'s publish (its bound: STEP_LEASE_MS + one sweep), and night 15 ends done exactly', async () => {
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
    // The run was measured: the killed worker's step and a step that was waiting were both done again.
    expect(run?.heldDoneMs).toEqual(expect.any(Number));
    expect(run?.pendingDoneMs).toEqual(expect.any(Number));
    expect(run?.withinBound).toBe((run?.recoveryMs ?? Infinity) <= boundMs(options));
  }, 240_000);

  it('restarts a PostgreSQL of its own (immediate: crash recovery) mid-publish, measured from when it is back, and night 15 ends done exactly', async () => {
    const options = {
      serverUrl: adminUrl(), redisUrl: testRedisUrl(), faults: ['postgres-restarted-immediate'] as const, runs: 1,
      leaseMs: 5_000, marginMs: 3_000, timeoutMs: 120_000, workerConcurrency: 2, log: () => undefined,
    };
    const [summary] = await runFaults(options);
    const run = summary?.runs[0];
    expect(run?.error).toBeUndefined();
    expect(run?.injected).toContain('pg_ctl restart -m immediate');
    expect(run).toMatchObject({ state: 'done', diff: NIGHT_15_DIFF, recomputed: 6, exact: true });
    // Crash recovery emptied the unlogged tables of the hours staged before it, the held hour's among them: its
    // publish, taken over, staged it again before writing (src/core/recompute/storeTables.ts, stagedRowsLost).
    expect(run?.stagedAgain).toBeGreaterThanOrEqual(1);
    // The server was down for a while, and the times count from when it was back.
    expect(run?.outageMs).toBeGreaterThan(0);
    expect(run?.injected).toMatch(/back on its port after/);
    expect(run?.heldDoneMs).toEqual(expect.any(Number));
    expect(run?.pendingDoneMs).toEqual(expect.any(Number));
  }, 240_000);
});
