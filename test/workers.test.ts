// Several worker processes against one PostgreSQL and one Redis: two `npm run worker` processes (src/workerMain.ts,
// the production entry point) run night 15 together, their Slack calls answered by the local emulator. Every
// step runs once, both processes take part, and every message goes out once.

import type { ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { overrideGate } from '../src/core/announce/gate.js';
import { startBackfill } from '../src/core/announce/start.js';
import { loadBackfillReport } from '../src/core/file/status.js';
import { listEvents } from '../src/db/events.js';
import { createTestEngine, type TestEngine } from './support/engine.js';
import { startSlackEmulator, type SlackEmulator } from '../dev/slack-emulator/index.js';
import { waitUntil } from './support/wait.js';
import { startWorkerProcess } from './support/workerProcess.js';

const OPERATOR = 'U07ONCALL';

let engine: TestEngine | undefined;
let slack: SlackEmulator | undefined;
let processes: ChildProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.map((child) => stop(child)));
  processes = [];
  await slack?.close();
  slack = undefined;
  await engine?.close();
  engine = undefined;
});

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

describe('two worker processes on one database and one Redis', () => {
  it('run night 15 to done together: every step once, both take part, every message once', async () => {
    engine = await createTestEngine('month-end', { WAVE_SIZE: '4' });
    const e = engine;
    slack = await startSlackEmulator();
    const emulator = slack;
    const apiUrl = emulator.url;
    await Promise.all([startWorkerProcess(e, apiUrl, processes), startWorkerProcess(e, apiUrl, processes)]);
    const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    await overrideGate(e.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'two workers test' });
    await waitUntil(async () => ['done', 'failed'].includes((await loadBackfillReport(e.ctx.pool, backfill.id)).backfill.state), 'the backfill to finish', 90_000);
    expect((await loadBackfillReport(e.ctx.pool, backfill.id)).backfill.state).toBe('done');

    const events = await listEvents(e.ctx.pool, backfill.id);
    const started = events.filter((ev) => ev.kind === 'step_started').map((ev) => ev.detail as { step: string; key: string; worker: string; attempt: number });
    const once = (kind: string, key: (detail: Record<string, unknown>) => string) => {
      const keys = events.filter((ev) => ev.kind === kind).map((ev) => key(ev.detail));
      expect(new Set(keys).size).toBe(keys.length);
      return keys.length;
    };
    expect(once('staged', (d) => String(d.partition))).toBe(6);
    expect(once('recomputed', (d) => String(d.partition))).toBe(6);
    expect(once('replayed', (d) => String(d.consumer))).toBe(3);
    // No step was claimed twice except to retry it: each (step, key) started once per attempt.
    const attempts = started.map((s) => `${s.step} ${s.key} ${s.attempt}`);
    expect(new Set(attempts).size).toBe(attempts.length);
    expect(new Set(started.map((s) => s.worker)).size).toBe(2);
    // Each owner's announcement went out once.
    const dms = emulator.callsTo('chat.postMessage').filter((call) => String(call.params.channel).startsWith('D')).map((call) => String(call.params.channel));
    expect(dms.filter((channel) => channel === 'DU07SETTLE')).toHaveLength(1);
    expect(dms.filter((channel) => channel === 'DU07PAYOUTS')).toHaveLength(1);
  }, 150_000);
});
