import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { approveCapacity, gateStatus, overrideGate } from '../../src/core/announce/gate.js';
import { planBackfill } from '../../src/core/identify/plan.js';
import { recordingRefusals } from '../../src/core/refusals.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { executeStep, type StepContext } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { createPool, withTransaction, type Pool, type SessionSettings } from '../../src/db/pool.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { planMessage } from '../../src/views/blocks.js';
import { renderPlan } from '../../src/views/text.js';
import { startWorkers } from '../../src/worker.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const OPERATOR = 'U07ONCALL';
const SECOND = 'U07LEAD';
const NIGHT = '2026-11-15';
const dayTotal = `SELECT sum(amount_base)::text AS t FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`;

let engine: TestEngine | undefined;
const opened: { end(): Promise<void> }[] = [];
afterEach(async () => {
  for (const resource of opened.splice(0).reverse()) await resource.end().catch(() => undefined);
  await engine?.close();
  engine = undefined;
});

/** The engine's database through a pool with these bounds, under an application name of its own. */
function boundedContext(e: TestEngine, bounds: SessionSettings): { ctx: StepContext; pool: Pool; applicationName: string } {
  const applicationName = `bounds-${randomBytes(4).toString('hex')}`;
  const pool = createPool(e.ctx.config.DATABASE_URL, applicationName, bounds);
  opened.push(pool);
  return { ctx: { ...e.ctx, pool }, pool, applicationName };
}

/** Another connection takes the target table's strongest lock and keeps it until the test lets go. */
async function holdTargetLock(e: TestEngine): Promise<() => Promise<void>> {
  const holder = new pg.Client({ connectionString: e.ctx.config.DATABASE_URL, application_name: 'bounds-lock-holder' });
  await holder.connect();
  opened.push(holder);
  await holder.query('BEGIN');
  await holder.query('LOCK TABLE warehouse.orders IN ACCESS EXCLUSIVE MODE');
  return async () => {
    await holder.query('ROLLBACK');
  };
}

async function stepRow(ctx: StepContext, id: number, key: string): Promise<{ status: string; error: string | null }> {
  const { rows } = await ctx.pool.query<{ status: string; error: string | null }>(
    `SELECT status, error FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = 'stage' AND step_key = $2`, [id, key]);
  return rows[0] ?? { status: 'missing', error: null };
}

describe('statement and lock timeouts', () => {
  it('cancels a statement past STATEMENT_TIMEOUT_MS with a sentence naming the setting, not a hang', async () => {
    engine = await createTestEngine();
    const { pool } = boundedContext(engine, { statementTimeoutMs: 300, lockTimeoutMs: 60_000 });
    // Not a hang, without a clock: a sleep the server did not cancel would end without an error.
    await expect(withTransaction(pool, (tx) => tx.query('SELECT pg_sleep(10)'))).rejects.toSatisfy((error: unknown) =>
      isBackfillError(error, ErrorCode.Timeout) && !error.retryable && /ran longer than STATEMENT_TIMEOUT_MS \(300 ms\) and PostgreSQL cancelled it/.test(error.message));
    // The setting is on every connection of the pool, whoever checks it out.
    const { rows } = await pool.query<{ statement: string; lock: string }>(`SELECT current_setting('statement_timeout') AS statement, current_setting('lock_timeout') AS lock`);
    expect(rows[0]).toEqual({ statement: '300ms', lock: '1min' });
  });

  it('fails a step whose statement waits past STATEMENT_TIMEOUT_MS, saying so on the step and the backfill', async () => {
    engine = await createTestEngine();
    const { ctx } = boundedContext(engine, { statementTimeoutMs: 1_000, lockTimeoutMs: 60_000 });
    const id = await approvedNight15(ctx, 'bounds test');
    const release = await holdTargetLock(engine);
    const key = '2026-11-15T05:00Z';
    await expect(executeStep(ctx, { backfillId: id, kind: 'stage', key })).rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.Timeout));
    await release();
    expect(await stepRow(ctx, id, key)).toEqual({ status: 'failed', error: expect.stringMatching(/STATEMENT_TIMEOUT_MS \(1000 ms\)/) });
    const { rows } = await ctx.pool.query('SELECT state, failure FROM backfill.backfills WHERE id = $1', [id]);
    expect(rows[0]).toEqual({ state: 'failed', failure: expect.stringMatching(/^stage 2026-11-15T05:00Z failed: A statement ran longer than STATEMENT_TIMEOUT_MS/) });
  });

  it('gives a step back for a retry when its lock wait passes LOCK_TIMEOUT_MS', async () => {
    engine = await createTestEngine();
    const { ctx } = boundedContext(engine, { statementTimeoutMs: 60_000, lockTimeoutMs: 300 });
    const id = await approvedNight15(ctx, 'bounds test');
    const release = await holdTargetLock(engine);
    const key = '2026-11-15T06:00Z';
    await expect(executeStep(ctx, { backfillId: id, kind: 'stage', key }, { finalAttempt: false }))
      .rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.Timeout) && error.retryable);
    expect(await stepRow(ctx, id, key)).toEqual({ status: 'pending', error: expect.stringMatching(/waited longer than LOCK_TIMEOUT_MS \(300 ms\) for a lock/) });
    await release();
    expect(await executeStep(ctx, { backfillId: id, kind: 'stage', key })).toBe('done');
  });

  it('turns a plan cancelled by the timeout into a recorded refusal', async () => {
    engine = await createTestEngine();
    const { ctx } = boundedContext(engine, { statementTimeoutMs: 500, lockTimeoutMs: 60_000 });
    const release = await holdTargetLock(engine);
    const request = { pipeline: 'orders', target: NIGHT, reason: 'dry run', actor: OPERATOR };
    await expect(recordingRefusals(ctx, { actor: OPERATOR, action: 'plan', input: { pipeline: 'orders', target: NIGHT } }, () => planBackfill(ctx, request)))
      .rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.Timeout));
    await release();
    const { rows } = await ctx.pool.query(`SELECT detail->>'code' AS code, detail->>'action' AS action FROM backfill.events WHERE kind = 'refused'`);
    expect(rows).toEqual([{ code: 'timeout', action: 'plan' }]);
  });
});

describe('closing the workers', () => {
  it('cancels the statements its steps still run after the close deadline; the steps go back to pending and finish later', async () => {
    engine = await createTestEngine();
    const { ctx, applicationName } = boundedContext(engine, { statementTimeoutMs: 120_000, lockTimeoutMs: 120_000 });
    const id = await approvedNight15(ctx, 'bounds test');
    const release = await holdTargetLock(engine);
    const activity = async (filter: string) => {
      // The workers' sessions: by the pool's name, or, inside a claimed step's transaction, by its claim's name.
      const { rows } = await engine!.ctx.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE (application_name = $1 OR application_name LIKE 'backfill-bot bf' || $2::text || ' %') AND datname = current_database()
           AND state = 'active' ${filter}`, [applicationName, String(id)]);
      return rows[0]?.n ?? 0;
    };
    const workers = await startWorkers(ctx, { sweepMs: 200, closeDeadlineMs: 500 });
    await waitUntil(async () => (await activity(`AND wait_event_type = 'Lock'`)) > 0, 'a stage statement waiting for the lock');
    // The lock is held until the test lets go, after this: a close that did not cancel its statements would never return.
    await workers.close();
    expect(await activity('')).toBe(0);
    const { rows } = await ctx.pool.query<{ status: string; error: string | null }>(
      `SELECT status, error FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = 'stage' AND error IS NOT NULL`, [id]);
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) expect(row).toEqual({ status: 'pending', error: expect.stringMatching(/cancelled on request \(its worker was stopping/) });
    // The lock holder lets go; another worker runs the backfill to the end on the same rows.
    await release();
    const report = await runUntilSettled(ctx, id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    expect((await ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.correctedTotal);
  });
});

describe('size and capacity', () => {
  it('plans the rows and bytes it will stage and keep, from the preview and the target row width', async () => {
    engine = await createTestEngine();
    const e = engine;
    const plan = await planBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'dry run', actor: OPERATOR });
    const size = plan.size;
    if (!size) throw new Error('planBackfill gave no size');
    const live = await e.ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = ANY ($1::timestamptz[])`, [plan.identified.hours]);
    expect(size.rows).toBe(plan.expected.reduce((sum, x) => sum + x.rows, 0));
    expect(size.rows).toBeGreaterThan(0);
    expect(size.replacedRows).toBe(live.rows[0]?.n);
    expect(size.rowWidth).toBeGreaterThan(size.keyWidth);
    expect(size.keyWidth).toBeGreaterThan(0);
    // staged + expected + baseline (each with its index entry) to stage; the saved rows and their index to keep.
    const row = size.rowWidth + 16;
    const key = size.keyWidth + 16;
    expect(size.stageBytes).toBe(size.rows * (row + key) + size.rows * 2 * key + size.replacedRows * key);
    expect(size.keepBytes).toBe(size.replacedRows * (row + key));
    expect(size.needsSecondApproval).toEqual([]);
    expect(renderPlan(plan)).toMatch(new RegExp(`Size: ${size.rows.toLocaleString('en-US')} rows written, ${size.replacedRows.toLocaleString('en-US')} replaced \\(about ${size.rowWidth} bytes a row\\); stages \\d+(\\.\\d)? kB and keeps \\d+(\\.\\d)? kB for a rollback in bf_orders`));
    expect(renderPlan(plan)).toContain("Second operator's approval: not needed");
    expect(JSON.stringify(planMessage(plan).blocks)).toContain('*Size:*');
    const planned = await e.ctx.pool.query(`SELECT detail->'size'->>'rows' AS rows FROM backfill.events WHERE kind = 'planned'`);
    expect(planned.rows).toEqual([{ rows: String(size.rows) }]);
  });

  it('records the size on the backfill row and timeline at start; within both limits it needs no second approval', async () => {
    engine = await createTestEngine();
    const e = engine;
    const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'currency parsed as text', actor: OPERATOR });
    expect(backfill.needsSecondApproval).toBe(false);
    const { rows } = await e.ctx.pool.query(
      `SELECT b.planned_rows::int AS rows, b.planned_replaced_rows::int AS replaced, b.planned_stage_bytes > 0 AS staged, b.planned_keep_bytes > 0 AS kept,
              (SELECT sum(expected_rows)::int FROM backfill.backfill_targets WHERE backfill_id = b.id) AS expected,
              (SELECT sum(rows_before)::int FROM backfill.backfill_targets WHERE backfill_id = b.id) AS before
       FROM backfill.backfills b WHERE b.id = $1`, [backfill.id]);
    expect(rows[0]).toEqual({ rows: rows[0].expected, replaced: rows[0].before, staged: true, kept: true, expected: expect.any(Number), before: expect.any(Number) });
    const sized = (await listEvents(e.ctx.pool, backfill.id)).find((event) => event.kind === 'sized');
    expect(sized?.detail).toMatchObject({ rows: rows[0].rows, needsSecondApproval: [], limits: { partitions: 24, rows: 2_000_000 } });
    await expect(approveCapacity(e.ctx, { backfillId: backfill.id, actor: SECOND })).rejects.toSatisfy((error: unknown) =>
      isBackfillError(error, ErrorCode.BadInput) && /within the capacity limits \(6 partitions of at most 24, [\d,]+ rows of at most 2,000,000\)/.test(error.message));
  });

  it('holds a backfill over CAPACITY_ROWS_LIMIT for a second operator, even within CAPACITY_LIMIT', async () => {
    engine = await createTestEngine('month-end', { CAPACITY_ROWS_LIMIT: '100' });
    const e = engine;
    const plan = await planBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'dry run', actor: OPERATOR });
    expect(plan.size?.needsSecondApproval).toEqual([expect.stringMatching(/^[\d,]+ rows, more than CAPACITY_ROWS_LIMIT \(100\)$/)]);
    expect(renderPlan(plan)).toMatch(/Second operator's approval: needed \([\d,]+ rows, more than CAPACITY_ROWS_LIMIT \(100\)\)/);
    await expectSecondApprovalGate(e, /rows, more than CAPACITY_ROWS_LIMIT/);
  });

  it('holds a backfill over CAPACITY_LIMIT partitions for a second operator, even within CAPACITY_ROWS_LIMIT', async () => {
    engine = await createTestEngine('month-end', { CAPACITY_LIMIT: '3' });
    await expectSecondApprovalGate(engine, /^6 partitions, more than CAPACITY_LIMIT \(3\)$/);
  });
});

/** Started and overridden, it still waits for the capacity approval; not from the requester; then it opens. */
async function expectSecondApprovalGate(e: TestEngine, reason: RegExp): Promise<void> {
  const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'currency parsed as text', actor: OPERATOR });
  expect(backfill.needsSecondApproval).toBe(true);
  const sized = (await listEvents(e.ctx.pool, backfill.id)).find((event) => event.kind === 'sized');
  expect(sized?.detail.needsSecondApproval).toEqual([expect.stringMatching(reason)]);
  await overrideGate(e.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'owners on leave' });
  const waiting = await gateStatus(e.ctx.pool, backfill.id);
  expect(waiting.backfill.state).toBe('announced');
  expect(waiting.waitingFor).toEqual([{ consumer: 'capacity approval', owner: 'a second operator' }]);
  await expect(approveCapacity(e.ctx, { backfillId: backfill.id, actor: OPERATOR })).rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.NotAllowed));
  const approved = await approveCapacity(e.ctx, { backfillId: backfill.id, actor: SECOND });
  expect(approved.approved).toBe(true);
  expect(approved.backfill.state).toBe('approved');
}
