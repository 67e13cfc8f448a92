import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { startApproved } from '../../src/core/lifecycle/dispatch.js';
import { cancelBackfill, overrideGate } from '../../src/core/announce/gate.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { listRetention, pruneStoredRows, RETENTION_ACTOR, retentionVerdicts, type RetentionCandidate } from '../../src/core/recovery/retention.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { executeStep } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { RETENTION_JOB } from '../../src/queue/registry.js';
import { createStepQueue } from '../../src/queue/stepQueue.js';
import { startWorkers } from '../../src/worker.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';
import { storedRows } from '../support/storedRows.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const OPERATOR = 'U07ONCALL';
const DAY_MS = 24 * 3600 * 1000;
const dayTotal = `SELECT sum(amount_base)::text AS t FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`;
const CLI = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const run = promisify(execFile);

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function doneNight15(e: TestEngine): Promise<number> {
  const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
  await overrideGate(e.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'retention test' });
  for (const key of ['payout_export', 'settlement_report']) await executeStep(e.ctx, { backfillId: backfill.id, kind: 'announce', key });
  await startApproved(e.ctx, backfill.id);
  const report = await runUntilSettled(e.ctx, backfill.id, () => undefined, e.notifier);
  expect(report.backfill.state).toBe('done');
  return backfill.id;
}

/** The backfill's rows in each table of the orders store; its baseline keys in the tables of each hour too. */
async function stored(e: TestEngine, id: number): Promise<Record<string, number>> {
  const { rows } = await e.ctx.pool.query<Record<string, number>>(
    `SELECT (SELECT count(*)::int FROM ${await storedRows(e.ctx.pool, 'staged')} WHERE bf_backfill = $1) AS staged, (SELECT count(*)::int FROM ${await storedRows(e.ctx.pool, 'saved')} WHERE bf_backfill = $1) AS saved,
            (SELECT count(*)::int FROM bf_orders.baseline WHERE bf_backfill = $1) AS baseline, (SELECT count(*)::int FROM bf_orders.expected WHERE bf_backfill = $1) AS expected`, [id]);
  const row = rows[0] ?? {};
  for (const name of await baselineTables(e, id)) row.baseline = (row.baseline ?? 0) + ((await e.ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${name}`)).rows[0]?.n ?? 0);
  return row;
}

/** The backfill's baseline tables of their own (one per staged hour), qualified. */
async function baselineTables(e: TestEngine, id: number): Promise<string[]> {
  const { rows } = await e.ctx.pool.query<{ name: string }>(
    `SELECT format('bf_orders.%I', relname) AS name FROM pg_class WHERE relnamespace = 'bf_orders'::regnamespace AND relname ~ ('^p[0-9]{10}_b' || $1::int || '_g[0-9]+_baseline$')`, [id]);
  return rows.map((r) => r.name);
}

const later = (days: number) => new Date(Date.now() + days * DAY_MS);

describe('the retention rule', () => {
  const old = new Date('2026-01-01T00:00:00Z');
  const asOf = new Date('2026-03-01T00:00:00Z');
  const candidate = (over: Partial<RetentionCandidate>): RetentionCandidate =>
    ({ backfillId: 1, pipeline: 'orders', state: 'done', finishedAt: old, publishedPartitions: 6, supersededBy: [], pruned: [], ...over });
  const actions = (over: Partial<RetentionCandidate>) => retentionVerdicts(candidate(over), asOf, 30).map((v) => `${v.kind}:${v.action}`);

  it('keeps everything of a backfill in flight or finished within RETENTION_DAYS', () => {
    expect(actions({ state: 'paused' })).toEqual(['scratch:keep', 'undo:keep']);
    expect(actions({ state: 'rolling_back' })).toEqual(['scratch:keep', 'undo:keep']);
    expect(actions({ finishedAt: new Date('2026-02-10T00:00:00Z') })).toEqual(['scratch:keep', 'undo:keep']);
  });

  it('drops the scratch rows of any finished backfill past the age, and the undo rows only when no rollback can need them', () => {
    expect(actions({ state: 'done' })).toEqual(['scratch:drop', 'undo:confirm']);
    expect(actions({ state: 'stopped' })).toEqual(['scratch:drop', 'undo:confirm']);
    expect(actions({ state: 'failed', supersededBy: [2] })).toEqual(['scratch:drop', 'undo:confirm']);
    expect(actions({ state: 'rolled_back', publishedPartitions: 0 })).toEqual(['scratch:drop', 'undo:drop']);
    expect(actions({ state: 'cancelled', publishedPartitions: 0 })).toEqual(['scratch:drop', 'undo:drop']);
    expect(actions({ state: 'failed', publishedPartitions: 0 })).toEqual(['scratch:drop', 'undo:drop']);
    expect(actions({ state: 'done', pruned: ['scratch'] })).toEqual(['undo:confirm']);
    const [, undo] = retentionVerdicts(candidate({ supersededBy: [4, 7] }), asOf, 30);
    expect(undo?.why).toBe('finished 59 day(s) ago, but its rollback is refused while #4, #7 stand(s) over its partitions, and allowed again if that is rolled back: ' +
      'only `retention --prune` drops them, and then it can no longer be rolled back');
  });
});

describe('retention of stored rows', () => {
  it('drops nothing of a backfill finished within RETENTION_DAYS', async () => {
    engine = await createTestEngine();
    const id = await doneNight15(engine);
    const before = await stored(engine, id);
    expect(await listRetention(engine.ctx)).toMatchObject({ items: [], kept: 1, retentionDays: 30 });
    expect(await pruneStoredRows(engine.ctx, { actor: OPERATOR, includeRollbackRows: true })).toEqual([]);
    expect(await stored(engine, id)).toEqual(before);
  });

  it('past the age, the job drops the baseline and expected keys but keeps what a still-allowed rollback needs; the rollback then works', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await doneNight15(e);
    const before = await stored(e, id);
    expect(await baselineTables(e, id)).toHaveLength(6);
    // The baseline holds the live keys the staged rows lacked (measureStaged): night 15's step keeps every key.
    expect(before).toEqual({ staged: expect.any(Number), saved: expect.any(Number), baseline: 0, expected: expect.any(Number) });
    expect([before.staged, before.saved, before.expected].every((n) => n! > 0)).toBe(true);
    const report = await listRetention(e.ctx, { asOf: later(31) });
    expect(report.items.map((item) => [item.kind, item.action, item.tables.map((t) => [t.table, t.rows])])).toEqual([
      ['scratch', 'drop', [['baseline', before.baseline], ['expected', before.expected]]],
      ['undo', 'confirm', [['staged', before.staged], ['saved', before.saved]]],
    ]);
    expect(report.items[1]?.why).toMatch(/its rollback is still allowed: only `retention --prune` drops them/);
    expect(report.items.every((item) => item.tables.every((t) => t.rows === 0 || t.bytes > t.rows))).toBe(true);

    const pruned = await pruneStoredRows(e.ctx, { actor: RETENTION_ACTOR, includeRollbackRows: false, asOf: later(31) });
    expect(pruned.map((p) => p.kinds)).toEqual([['scratch']]);
    expect(await stored(e, id)).toEqual({ ...before, baseline: 0, expected: 0 });
    // Its tables of their own are gone too, empty as they were: with them, what a rollback read as kept.
    expect(await baselineTables(e, id)).toEqual([]);
    const event = (await listEvents(e.ctx.pool, id)).find((ev) => ev.kind === 'pruned');
    expect(event).toMatchObject({ actor: 'retention', detail: { kinds: ['scratch'], rows: before.baseline! + before.expected! } });
    // A second run finds nothing more to do.
    expect(await pruneStoredRows(e.ctx, { actor: RETENTION_ACTOR, includeRollbackRows: false, asOf: later(31) })).toEqual([]);

    await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'retention test' });
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('rolled_back');
    expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.signedTotal);
    // Rolled back, nothing can need its staged and saved rows any more: the job drops them past the age.
    expect((await pruneStoredRows(e.ctx, { actor: RETENTION_ACTOR, includeRollbackRows: false, asOf: later(31) })).map((p) => p.kinds)).toEqual([['undo']]);
    expect(await stored(e, id)).toEqual({ staged: 0, saved: 0, baseline: 0, expected: 0 });
  });

  it('drops the rows of a still-allowed rollback only with --prune and past the age; the rollback is then refused and changes nothing', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await doneNight15(e);
    expect(await pruneStoredRows(e.ctx, { actor: OPERATOR, includeRollbackRows: true, asOf: later(29) })).toEqual([]);
    const pruned = await pruneStoredRows(e.ctx, { actor: OPERATOR, includeRollbackRows: true, asOf: later(31) });
    expect(pruned.map((p) => [p.backfillId, p.kinds])).toEqual([[id, ['scratch', 'undo']]]);
    expect(await stored(e, id)).toEqual({ staged: 0, saved: 0, baseline: 0, expected: 0 });
    const { rows } = await e.ctx.pool.query('SELECT rows_kind, pruned_by FROM backfill.row_retention WHERE backfill_id = $1 ORDER BY rows_kind', [id]);
    expect(rows).toEqual([{ rows_kind: 'scratch', pruned_by: OPERATOR }, { rows_kind: 'undo', pruned_by: OPERATOR }]);
    await expect(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR })).rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.WrongState) &&
      error.message.startsWith(`Backfill #${id} cannot be rolled back: its saved prior rows were dropped by retention (${OPERATOR}, `));
    expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.correctedTotal);
    expect((await e.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = $1', [id])).rows[0]?.state).toBe('done');
  });

  it('the scheduled job prunes an old cancelled backfill on its own, once, and says so in its timeline', async () => {
    engine = await createTestEngine('month-end', { RETENTION_INTERVAL_MS: '200' });
    const e = engine;
    const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'wrong night', actor: OPERATOR });
    await cancelBackfill(e.ctx, { backfillId: backfill.id, actor: OPERATOR });
    expect((await stored(e, backfill.id)).expected).toBeGreaterThan(0);
    await e.ctx.pool.query(`UPDATE backfill.backfills SET finished_at = now() - interval '40 days' WHERE id = $1`, [backfill.id]);
    const workers = await startWorkers(e.ctx, { sweepMs: 200 });
    try {
      await waitUntil(async () => (await listEvents(e.ctx.pool, backfill.id)).some((ev) => ev.kind === 'pruned'), 'the retention job to prune');
      // Runs after that one find nothing more to do.
      const runs = async () => (await workers.queue.getJobs(['completed'])).filter((job) => job.name === 'retention').length;
      const first = await runs();
      await waitUntil(async () => (await runs()) >= first + 2, 'two more retention runs');
    } finally {
      await workers.close();
    }
    const pruned = (await listEvents(e.ctx.pool, backfill.id)).filter((ev) => ev.kind === 'pruned');
    expect(pruned).toHaveLength(1);
    expect(pruned[0]?.actor).toBe('retention');
    expect(await stored(e, backfill.id)).toEqual({ staged: 0, saved: 0, baseline: 0, expected: 0 });
  });

  it('the workers\' sweep puts the retention schedule back after the queue was emptied, and leaves one in place alone', async () => {
    engine = await createTestEngine('month-end', { RETENTION_INTERVAL_MS: '3600000' });
    const e = engine;
    const workers = await startWorkers(e.ctx, { sweepMs: 200 });
    try {
      const placed = await workers.queue.getJobScheduler(RETENTION_JOB);
      expect(placed?.every).toBe(3_600_000);
      // A sweep finds it in place and keeps its next run.
      await workers.kick();
      expect((await workers.queue.getJobScheduler(RETENTION_JOB))?.next).toBe(placed?.next);
      // Everything the queue held is gone (Redis flushed, or restarted empty): this test's own queue only.
      const emptied = createStepQueue(e.ctx.config);
      await emptied.obliterate({ force: true });
      expect(await emptied.getJobScheduler(RETENTION_JOB)).toBeUndefined();
      await emptied.close();
      await waitUntil(async () => (await workers.queue.getJobScheduler(RETENTION_JOB))?.every === 3_600_000, 'the sweep to restore the retention schedule');
      expect((await workers.queue.getJobSchedulers()).map((s) => s.key)).toEqual([RETENTION_JOB]);
    } finally {
      await workers.close();
    }
  });

  it('`backfill retention` lists what would go with rows and bytes, and --prune drops it', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await doneNight15(e);
    await e.ctx.pool.query(`UPDATE backfill.backfills SET finished_at = now() - interval '45 days' WHERE id = $1`, [id]);
    const before = await stored(e, id);
    const cli = async (...args: string[]) => (await run(process.execPath, ['--import', 'tsx', CLI, ...args], {
      env: { ...process.env, DATABASE_URL: e.ctx.config.DATABASE_URL, QUEUE_PREFIX: e.ctx.config.QUEUE_PREFIX, RETENTION_DAYS: '30' },
    })).stdout;
    const listed = await cli('retention');
    expect(listed).toMatch(new RegExp(`#${id} orders \\(done\\): drops scratch rows, [\\d,]+ rows, [\\d.]+ kB \\(baseline ${before.baseline}, expected ${before.expected}\\)`));
    expect(listed).toMatch(new RegExp(`#${id} orders \\(done\\): keeps unless --prune undo rows, [\\d,]+ rows, [\\d.]+ kB \\(staged ${before.staged}, saved ${before.saved}\\)`));
    expect(listed).toContain('finished 45 day(s) ago, but its rollback is still allowed');
    expect(await stored(e, id)).toEqual(before);
    const pruned = await cli('retention', '--prune');
    expect(pruned).toMatch(new RegExp(`#${id} orders: dropped scratch and undo rows`));
    expect(pruned).toMatch(/Dropped [\d,]+ rows \([\d.]+ kB\) of 1 backfill\(s\)/);
    expect(await stored(e, id)).toEqual({ staged: 0, saved: 0, baseline: 0, expected: 0 });
    expect(await cli('retention')).toContain('nothing to drop');
  });
});
