// The locks of a publish by swap, against real sessions of other people holding theirs: an analyst reading a
// staged or saved table, a long report reading warehouse.orders. The swap takes every lock before it detaches
// anything, in one order, in short tries; readers and writers of the other hours never wait behind it for
// longer than one try, and the wait it really had is reported. Orderings are forced with locks held from
// connections of the test and observed in pg_locks, never with sleeps.

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { executeStep, type StepContext } from '../../src/core/procedure.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { runUntilSettled } from '../../src/cli/runner.js';
import { listEvents } from '../../src/db/events.js';
import { createPool } from '../../src/db/pool.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';

const OPERATOR = 'U07ONCALL';
const NIGHT = '2026-11-15';
const hourKey = (hh: string) => `${NIGHT}T${hh}:00Z`;
/** Long enough for any one try of the swap (at most 1 s) on a busy machine; far shorter than a wait behind it. */
const OTHER_READER_TIMEOUT = '5s';
/** Condition waits here are generous: a busy machine is slow, never wrong. */
const PATIENCE_MS = 30_000;

let engine: TestEngine | undefined;
let opened: { end(): Promise<void> }[] = [];

afterEach(async () => {
  for (const resource of opened.splice(0).reverse()) await resource.end().catch(() => undefined);
  opened = [];
  await engine?.close();
  engine = undefined;
});

async function connect(e: TestEngine, name: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: e.ctx.config.DATABASE_URL, application_name: name });
  await client.connect();
  opened.push(client);
  return client;
}

interface LockTry { tries: number; waitedMs: number; waitingOn: string }

/** A step context whose swaps report each try that was not granted in time. */
function observed(ctx: StepContext): { ctx: StepContext; tries: LockTry[] } {
  const tries: LockTry[] = [];
  return { ctx: { ...ctx, hooks: { onLockWait: (attempt) => { tries.push(attempt); } } }, tries };
}

/** A session that is waiting for a lock on `table` (not granted), and whether it holds any lock on warehouse.orders at that same moment. */
async function waiterOn(e: TestEngine, table: string): Promise<{ pid: number; holdsTarget: boolean } | undefined> {
  const { rows } = await e.ctx.pool.query<{ pid: number; holdsTarget: boolean }>(
    `WITH locks AS MATERIALIZED (SELECT pid, relation, granted FROM pg_locks WHERE locktype = 'relation')
     SELECT w.pid, EXISTS (SELECT 1 FROM locks h WHERE h.pid = w.pid AND h.granted AND h.relation = 'warehouse.orders'::regclass) AS "holdsTarget"
     FROM locks w WHERE NOT w.granted AND w.relation = to_regclass($1::text) LIMIT 1`, [table]);
  return rows[0];
}

/**
 * Another person's session reads an hour the publish does not touch, then writes one (rolled back), each with
 * a short statement_timeout: neither may wait behind the swap for longer than one of its tries.
 */
async function otherHourIsServed(client: pg.Client, hh = '08'): Promise<number> {
  await client.query(`SET statement_timeout = '${OTHER_READER_TIMEOUT}'`);
  const { rows } = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = $1', [hourKey(hh)]);
  await client.query('BEGIN');
  try {
    await client.query(
      `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
       VALUES ($1, 990777, 1, 7, 'SEK', 100.00, 0.1, 10.00)`, [hourKey(hh)]);
  } finally {
    await client.query('ROLLBACK');
  }
  return rows[0]?.n ?? -1;
}

async function stepResult(e: TestEngine, id: number, kind: string, key: string): Promise<Record<string, unknown>> {
  const { rows } = await e.ctx.pool.query<{ result: Record<string, unknown> | null }>(
    'SELECT result FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = $2 AND step_key = $3', [id, kind, key]);
  return rows[0]?.result ?? {};
}

async function recomputedDetail(e: TestEngine, id: number, hh: string): Promise<Record<string, unknown>> {
  const events = await listEvents(e.ctx.pool, id);
  return (events.find((ev) => ev.kind === 'recomputed' && (ev.detail as { partition?: string }).partition === `${NIGHT} ${hh}:00`)?.detail ?? {}) as Record<string, unknown>;
}

async function liveOid(e: TestEngine, hh: string): Promise<number | undefined> {
  const { rows } = await e.ctx.pool.query<{ oid: number }>(`SELECT to_regclass($1::text)::oid::int AS oid`, [`warehouse.orders_p20261115${hh}`]);
  return rows[0]?.oid;
}

/** A promise that also says whether it has settled yet. */
function tracked<T>(promise: Promise<T>): { promise: Promise<T>; settled: () => boolean } {
  let done = false;
  const settledPromise = promise.finally(() => { done = true; });
  settledPromise.catch(() => undefined);
  return { promise: settledPromise, settled: () => done };
}

async function stagedNight(e: TestEngine): Promise<{ id: number; staged: string }> {
  const id = await approvedNight15(e.ctx, 'swap lock test');
  for (const hh of ['05', '06', '07', '08', '09', '10']) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
  return { id, staged: `bf_orders.p2026111505_b${id}_g1` };
}

describe('the locks of a publish by swap', { timeout: 120_000 }, () => {
  it('a reader of the staged table holds up the swap alone: readers and writers of other hours never wait behind it, and the swap completes once the reader ends', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const { id, staged } = await stagedNight(e);
    const prior = await liveOid(e, '05');
    const analyst = await connect(e, 'swap-locks-analyst');
    await analyst.query('BEGIN');
    await analyst.query(`SELECT count(*) FROM ${staged}`);
    const other = await connect(e, 'swap-locks-other-hour');

    const { ctx, tries } = observed(e.ctx);
    const publish = tracked(executeStep(ctx, { backfillId: id, kind: 'publish', key: hourKey('05') }));
    // The swap waits on the staged table, and while it does it holds nothing of warehouse.orders: the order
    // takes the store's table first.
    let waiting: { pid: number; holdsTarget: boolean } | undefined;
    await waitUntil(async () => (waiting = await waiterOn(e, staged)) !== undefined, 'the swap to wait for the analyst', PATIENCE_MS);
    // Try after try, the other hours are served as if nothing were publishing.
    for (let round = 1; round <= 3; round += 1) {
      expect(await otherHourIsServed(other)).toBeGreaterThan(0);
      expect(waiting?.holdsTarget).toBe(false);
      const seen = tries.length;
      await waitUntil(() => tries.length > seen, 'another try of the swap', PATIENCE_MS);
    }
    expect(publish.settled()).toBe(false);
    expect(tries.every((t) => t.waitingOn === staged)).toBe(true);
    expect(await liveOid(e, '05')).toBe(prior);

    await analyst.query('COMMIT');
    expect(await publish.promise).toBe('done');
    expect(await liveOid(e, '05')).not.toBe(prior);
    const result = await stepResult(e, id, 'publish', hourKey('05'));
    expect(result).toMatchObject({ outcome: 'published', swapMs: expect.any(Number), lockWaitMs: expect.any(Number) });
    // Every try that failed, and the one that took the locks, and the second set (the target, the partition).
    expect(result.lockTries).toBeGreaterThanOrEqual(tries.length + 2);
    expect(await recomputedDetail(e, id, '05')).toMatchObject({ publishedBy: 'swap', lockWaitMs: result.lockWaitMs, lockTries: result.lockTries, swapMs: result.swapMs });
  });

  it('a long reader of warehouse.orders: other readers and writers are not queued behind the swap, which completes after the reader ends and reports the wait it had', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const { id } = await stagedNight(e);
    const report = await connect(e, 'swap-locks-long-report');
    await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    const first = await report.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = $1', [hourKey('05')]);
    const other = await connect(e, 'swap-locks-other-hour');

    const { ctx, tries } = observed(e.ctx);
    const publish = tracked(executeStep(ctx, { backfillId: id, kind: 'publish', key: hourKey('05') }));
    await waitUntil(async () => (await waiterOn(e, 'warehouse.orders')) !== undefined, 'the swap to wait for the report', PATIENCE_MS);
    const waitSeenAt = performance.now();
    for (let round = 1; round <= 3; round += 1) {
      // While it waits out the report, the swap holds nothing of the target: writers go on too.
      expect(await otherHourIsServed(other)).toBeGreaterThan(0);
      const seen = tries.length;
      await waitUntil(() => tries.length > seen, 'another try of the swap', PATIENCE_MS);
    }
    // The report still sees the prior partition whole.
    const again = await report.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = $1', [hourKey('05')]);
    expect(again.rows[0]?.n).toBe(first.rows[0]?.n);
    expect(publish.settled()).toBe(false);
    const heldMs = performance.now() - waitSeenAt;
    await report.query('COMMIT');

    expect(await publish.promise).toBe('done');
    const result = await stepResult(e, id, 'publish', hourKey('05'));
    // A lower bound, not a speed: the swap was waiting before the test saw it, and until after the report let go.
    expect(result.lockWaitMs).toBeGreaterThanOrEqual(heldMs);
    expect(result.lockTries).toBeGreaterThan(tries.length);
    expect(result.swapMs).toBeLessThan(Number(result.lockWaitMs));
    expect(await recomputedDetail(e, id, '05')).toMatchObject({ lockWaitMs: result.lockWaitMs, lockTries: result.lockTries });
  });

  it('a long reader of the hour\'s partition by its own name is waited out by the probe: the swap measures once, and writers of other hours go on meanwhile', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const { id } = await stagedNight(e);
    const reader = await connect(e, 'swap-locks-partition-reader');
    await reader.query('BEGIN');
    await reader.query('SELECT count(*) FROM warehouse.orders_p2026111505');
    const other = await connect(e, 'swap-locks-other-hour');
    const tries: LockTry[] = [];
    let measurings = 0;
    const ctx: StepContext = { ...e.ctx, hooks: { onLockWait: (attempt) => { tries.push(attempt); }, beforeCatalogLocks: async () => { measurings += 1; } } };
    const publish = tracked(executeStep(ctx, { backfillId: id, kind: 'publish', key: hourKey('05') }));
    await waitUntil(() => tries.length >= 3, 'the swap to meet the reader', PATIENCE_MS);
    expect(await otherHourIsServed(other)).toBeGreaterThan(0);
    expect(publish.settled()).toBe(false);
    await reader.query('COMMIT');
    expect(await publish.promise).toBe('done');
    expect(new Set(tries.map((t) => t.waitingOn.replace(/"/g, '')))).toEqual(new Set(['warehouse.orders_p2026111505']));
    expect(measurings, 'it waited in the probe, holding nothing, not in the catalog window after measuring each time').toBe(1);
  });

  it('a reader that arrives while the swap measures makes it give back the target and start again: writers are not held meanwhile, and nothing is carried twice', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const { id, staged } = await stagedNight(e);
    const late = await connect(e, 'swap-locks-late-writer');
    // A late row, carried by every measuring: a second carry into the same staged table would double it.
    await late.query(
      `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
       VALUES ($1, 990555, 1, 7, 'SEK', 100.00, 0.1, 10.00)`, [hourKey('05')]);
    const report = await connect(e, 'swap-locks-arriving-report');
    const other = await connect(e, 'swap-locks-other-hour');
    let measurings = 0;
    const tries: LockTry[] = [];
    const ctx: StepContext = { ...e.ctx, hooks: {
      onLockWait: (attempt) => { tries.push(attempt); },
      // The first time only: a report begins reading the target between the measuring and the swap's locks.
      beforeCatalogLocks: async () => {
        measurings += 1;
        if (measurings > 1) return;
        await report.query('BEGIN');
        await report.query('SELECT count(*) FROM warehouse.orders WHERE partition_hour = $1', [hourKey('06')]);
      },
    } };
    const publish = tracked(executeStep(ctx, { backfillId: id, kind: 'publish', key: hourKey('05') }));
    await waitUntil(() => tries.some((t) => t.waitingOn.replace(/"/g, '') === 'warehouse.orders'), 'the swap to meet the report', PATIENCE_MS);
    for (let round = 1; round <= 3; round += 1) {
      expect(await otherHourIsServed(other)).toBeGreaterThan(0);
      const seen = tries.length;
      await waitUntil(() => tries.length > seen, 'another try of the swap', PATIENCE_MS);
    }
    expect(publish.settled()).toBe(false);
    await report.query('COMMIT');
    expect(await publish.promise).toBe('done');
    expect(measurings).toBeGreaterThanOrEqual(2);
    const { rows } = await e.ctx.pool.query<{ n: number; late: number }>(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE order_id = 990555)::int AS late FROM warehouse.orders WHERE partition_hour = $1`, [hourKey('05')]);
    expect(rows[0]?.late).toBe(1);
    expect(await recomputedDetail(e, id, '05')).toMatchObject({ lateRows: 1, rowsAfter: rows[0]?.n });
    expect(await e.ctx.pool.query(`SELECT 1 FROM pg_class WHERE oid = to_regclass($1::text)`, [staged]).then((r) => r.rowCount)).toBe(0);
  });

  it('a writer of the hour\'s partition by its own name waits while the swap measures, and its row is live in the published partition after', async () => {
    // The swap locks the target alone (LOCK TABLE ONLY), so it must lock the hour's partition by name too: a row
    // written into the partition being swapped out, past the swap's measure, would leave with it.
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const { id } = await stagedNight(e);
    const prior = await liveOid(e, '05');
    const writer = await connect(e, 'swap-locks-partition-writer');
    let insert: { promise: Promise<unknown>; settled: () => boolean } | undefined;
    const ctx: StepContext = { ...e.ctx, hooks: {
      beforeCatalogLocks: async () => {
        if (insert) return;
        insert = tracked(writer.query(
          `INSERT INTO warehouse.orders_p2026111505 (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
           VALUES ($1, 990556, 1, 7, 'SEK', 100.00, 0.1, 10.00)`, [hourKey('05')]));
        await waitUntil(async () => (await waiterOn(e, 'warehouse.orders_p2026111505')) !== undefined, 'the writer to wait for the hour\'s partition', PATIENCE_MS);
      },
    } };
    expect(await executeStep(ctx, { backfillId: id, kind: 'publish', key: hourKey('05') })).toBe('done');
    expect(insert?.settled(), 'the writer was still waiting when the publish committed').toBe(false);
    await insert?.promise;
    expect(await liveOid(e, '05'), 'the partition was swapped').not.toBe(prior);
    const { rows } = await e.ctx.pool.query<{ live: number; saved: number }>(
      `SELECT (SELECT count(*) FROM warehouse.orders WHERE partition_hour = $1 AND order_id = 990556)::int AS live,
              (SELECT count(*) FROM bf_orders.p2026111505_b${id}_saved WHERE order_id = 990556)::int AS saved`, [hourKey('05')]);
    expect(rows[0], 'the row is live, in the published partition, and not in the one swapped out').toEqual({ live: 1, saved: 0 });
    expect(await recomputedDetail(e, id, '05')).toMatchObject({ publishedBy: 'swap', lateRows: 0 });
  });

  it('gives the step back for a retry, having changed nothing, when its locks are not all granted within LOCK_TIMEOUT_MS', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const { id, staged } = await stagedNight(e);
    const prior = await liveOid(e, '05');
    const pool = createPool(e.ctx.config.DATABASE_URL, `swap-locks-${randomBytes(4).toString('hex')}`, { statementTimeoutMs: 60_000, lockTimeoutMs: 400 });
    opened.push(pool);
    const bounded = { ...e.ctx, pool };
    const analyst = await connect(e, 'swap-locks-analyst');
    await analyst.query('BEGIN');
    await analyst.query(`SELECT count(*) FROM ${staged}`);

    const refusal = await executeStep(bounded, { backfillId: id, kind: 'publish', key: hourKey('05') }, { finalAttempt: false }).catch((error: unknown) => error);
    expect(isBackfillError(refusal, ErrorCode.Timeout) && refusal.retryable).toBe(true);
    expect((refusal as Error).message).toMatch(new RegExp(`^The swap of ${NIGHT} 05:00 could not take its locks within LOCK_TIMEOUT_MS \\(400 ms\\): another transaction held ${staged.replace(/\./g, '\\.')} through \\d+ tries`));
    const { rows } = await e.ctx.pool.query<{ status: string }>(`SELECT status FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = 'publish' AND step_key = $2`, [id, hourKey('05')]);
    expect(rows[0]?.status).toBe('pending');
    expect(await liveOid(e, '05')).toBe(prior);

    await analyst.query('COMMIT');
    expect(await executeStep(bounded, { backfillId: id, kind: 'publish', key: hourKey('05') })).toBe('done');
    expect(await liveOid(e, '05')).not.toBe(prior);
  });

  it('rollback by swap takes its locks in the same order: a reader of a saved table holds up the rollback alone', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap lock test');
    const settled = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(settled.backfill.state).toBe('done');
    const published = await liveOid(e, '05');
    const saved = `bf_orders.p2026111505_b${id}_saved`;
    const analyst = await connect(e, 'swap-locks-analyst');
    await analyst.query('BEGIN');
    await analyst.query(`SELECT count(*) FROM ${saved}`);
    const other = await connect(e, 'swap-locks-other-hour');

    const rollback = tracked(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'swap lock test' }));
    for (let round = 1; round <= 3; round += 1) {
      let waiting: { pid: number; holdsTarget: boolean } | undefined;
      await waitUntil(async () => (waiting = await waiterOn(e, saved)) !== undefined, 'the rollback to wait for the analyst', PATIENCE_MS);
      expect(await otherHourIsServed(other)).toBeGreaterThan(0);
      expect(waiting?.holdsTarget).toBe(false);
    }
    expect(rollback.settled()).toBe(false);
    expect(await liveOid(e, '05')).toBe(published);

    await analyst.query('COMMIT');
    expect((await rollback.promise).restored).toHaveLength(6);
    expect(await liveOid(e, '05')).not.toBe(published);
  });

  it('a reader of warehouse.orders that arrives while the rollback holds writers out makes it give the target back: writers of another hour get through while it waits, and the wait is reported', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap lock test');
    const settled = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(settled.backfill.state).toBe('done');
    const published = await liveOid(e, '05');
    // The rollback's checks read the keys the publish wrote: held here, they keep it inside its window with the
    // target EXCLUSIVE (writers out, readers in) until the test has let a report in.
    const written = `bf_orders.p2026111505_b${id}_written`;
    const gate = await connect(e, 'swap-locks-gate');
    await gate.query('BEGIN');
    await gate.query(`LOCK TABLE ${written} IN ACCESS EXCLUSIVE MODE`);
    const report = await connect(e, 'swap-locks-arriving-report');
    const other = await connect(e, 'swap-locks-other-hour');

    const rollback = tracked(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'swap lock test' }));
    let waiting: { pid: number; holdsTarget: boolean } | undefined;
    await waitUntil(async () => (waiting = await waiterOn(e, written)) !== undefined, 'the rollback to check with writers out', PATIENCE_MS);
    expect(waiting?.holdsTarget).toBe(true);
    await report.query('BEGIN');
    await report.query('SELECT count(*) FROM warehouse.orders WHERE partition_hour = $1', [hourKey('06')]);
    await gate.query('COMMIT');

    // The report holds warehouse.orders for as long as the test likes: the rollback's catalog locks wait for it,
    // and meanwhile a writer of an hour the rollback does not touch (12:00) gets through, again and again.
    for (let round = 1; round <= 3; round += 1) {
      await waitUntil(async () => (await waiterOn(e, 'warehouse.orders')) !== undefined, 'the rollback to wait for the report', PATIENCE_MS);
      expect(await otherHourIsServed(other, '12')).toBeGreaterThan(0);
    }
    expect(rollback.settled()).toBe(false);
    expect(await liveOid(e, '05')).toBe(published);

    await report.query('COMMIT');
    expect((await rollback.promise).restored).toHaveLength(6);
    expect(await liveOid(e, '05')).not.toBe(published);
    const rolledBack = (await listEvents(e.ctx.pool, id)).find((ev) => ev.kind === 'rolled_back')?.detail as { lockWaitMs?: number; lockTries?: number } | undefined;
    expect(rolledBack?.lockTries).toBeGreaterThan(1);
    expect(rolledBack?.lockWaitMs).toBeGreaterThan(0);
  });
});
