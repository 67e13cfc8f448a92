// The interleavings of demo night 2026-11-15 (canary 05:00, wave 06–09, wave 10:00 with WAVE_SIZE 4), each
// forced deterministically against the real engine, PostgreSQL and queues: a pause that lands while publishes are
// in flight, per-partition acceptance, a writer racing a publish, a second copy of a publish after Redis lost
// its job, late rows and rollback, rollbacks out of order, a stopped backfill's hours, partition generations.
//
// How each interleaving is forced is said where it is forced. Two seams are used: ctx.hooks.beforeFenceCheck
// (a publish has done its writes and is about to run its commit checks), and locks held from a separate
// connection of the test, which make a step wait at a known statement while the test acts around it.

import { Queue } from 'bullmq';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { toCents } from '../../src/core/money.js';
import { answerPaidAgainst } from '../../src/core/finance/paidAgainst.js';
import { lockPartition, replacePartition, type PartitionSnapshot } from '../../src/core/recompute/partitionStep.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../../src/core/recovery/recovery.js';
import { recordingRefusals } from '../../src/core/refusals.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { loadBackfillReport, type BackfillReport } from '../../src/core/file/status.js';
import { executeStep, type StepContext, type StepRef } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { withTransaction, type Queryable } from '../../src/db/pool.js';
import { BackfillError, ErrorCode } from '../../src/errors.js';
import { createStepQueue, dispatch } from '../../src/queue/stepQueue.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { storedRows } from '../support/storedRows.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const OPERATOR = 'U07ONCALL';
const NIGHT = '2026-11-15';
const hourKey = (hh: string) => `${NIGHT}T${hh}:00Z`;
const HOURS = ['05', '06', '07', '08', '09', '10'].map(hourKey);
const DAY = `partition_hour >= '2026-11-15T00:00Z' AND partition_hour < '2026-11-16T00:00Z'`;

let engine: TestEngine | undefined;
/** Connections of the test itself (lock holders, a racing writer), ended before the engine's database is dropped. */
let clients: pg.Client[] = [];
let queues: Queue[] = [];

afterEach(async () => {
  for (const client of clients) await client.end().catch(() => undefined);
  for (const queue of queues) await queue.close().catch(() => undefined);
  clients = [];
  queues = [];
  await engine?.close();
  engine = undefined;
});

// ---- driving the engine --------------------------------------------------------------------------------------

/** Stages every target by hand (the dispatcher would do the same), so a test can then publish step by step. */
async function stageAll(e: TestEngine, id: number): Promise<void> {
  for (const key of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key })).toBe('done');
}

/**
 * runUntilSettled with a deadline: a backfill stuck for good (the bug some of these tests are about) fails the
 * test with its state and step statuses instead of hanging it. The abandoned runner ends when the engine closes.
 */
async function settle(e: TestEngine, id: number, ctx: StepContext = e.ctx, timeoutMs = 40_000): Promise<BackfillReport> {
  const run = runUntilSettled(ctx, id, () => undefined, e.notifier);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  const outcome = await Promise.race([run, deadline]);
  clearTimeout(timer);
  if (outcome !== 'timeout') return outcome;
  run.catch(() => undefined);
  const report = await loadBackfillReport(e.ctx.pool, id);
  throw new Error(`backfill #${id} did not settle within ${timeoutMs} ms: it is ${report.backfill.state}; steps: ${describeSteps(report)}`);
}

function describeSteps(report: BackfillReport): string {
  return report.steps.map((s) => `${s.kind} ${s.key} ${s.status}`).join(', ');
}

/** Settles a promise into a value, so a test can start work, act around it, and look at the outcome later. */
async function outcomeOf<T>(work: Promise<T>): Promise<{ ok: T } | { error: unknown }> {
  try {
    return { ok: await work };
  } catch (error) {
    return { error };
  }
}

async function stepStatus(e: TestEngine, id: number, kind: StepRef['kind'], key: string): Promise<string | undefined> {
  const { rows } = await e.ctx.pool.query<{ status: string }>(
    'SELECT status FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = $2 AND step_key = $3', [id, kind, key]);
  return rows[0]?.status;
}

async function stateOf(e: TestEngine, id: number): Promise<string | undefined> {
  const { rows } = await e.ctx.pool.query<{ state: string }>('SELECT state FROM backfill.backfills WHERE id = $1', [id]);
  return rows[0]?.state;
}

interface TargetFacts {
  status: string;
  breach: string | null;
  acceptedBy: string | null;
  publishedGeneration: number | null;
}

async function targetOf(e: TestEngine, id: number, hour: string): Promise<TargetFacts | undefined> {
  const { rows } = await e.ctx.pool.query<TargetFacts>(
    `SELECT status, breach, accepted_by AS "acceptedBy", published_generation AS "publishedGeneration"
     FROM backfill.backfill_targets WHERE backfill_id = $1 AND partition_hour = $2`, [id, hour]);
  return rows[0];
}

// ---- what the warehouse holds --------------------------------------------------------------------------------

/**
 * rows, total and a checksum of a partition, leaving out the given orders (late rows a test added): the test's own
 * fingerprint (the md5 of the rows' text in key order), not the bot's rowsChecksum, which some of these check.
 */
async function snapshotOf(e: TestEngine, hour: string, excluding: number[] = [], db: Queryable = e.ctx.pool): Promise<PartitionSnapshot> {
  const { rows } = await db.query<PartitionSnapshot>(
    `SELECT count(*)::int AS rows, coalesce(sum(amount_base), 0)::numeric(18,2)::text AS total,
            md5(coalesce(string_agg(t::text, '|' ORDER BY order_id), '')) AS checksum
     FROM warehouse.orders t WHERE partition_hour = $1 AND order_id <> ALL ($2::bigint[])`, [hour, excluding]);
  const row = rows[0];
  if (!row) throw new Error('snapshot returned no row');
  return row;
}

const snapshotsOf = (e: TestEngine, hours: string[] = HOURS) => Promise.all(hours.map((hour) => snapshotOf(e, hour)));

async function dayTotal(e: TestEngine): Promise<string> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(`SELECT coalesce(sum(amount_base), 0)::numeric(18,2)::text AS total FROM warehouse.orders WHERE ${DAY}`);
  return rows[0]?.total ?? '';
}

/**
 * What the pipeline's step builds for the hour from the source as it is now: the step run in a transaction that
 * is rolled back. The expected figures of a test come from here, never from literals.
 */
async function rebuiltByStep(e: TestEngine, hour: string): Promise<PartitionSnapshot> {
  const pipeline = await requirePipeline(e.ctx.pool, 'orders');
  const client = await e.ctx.pool.connect();
  try {
    await client.query('BEGIN');
    await replacePartition(client, pipeline, new Date(hour));
    return await snapshotOf(e, hour, [], client);
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

async function orderIds(e: TestEngine, hour: string): Promise<Set<number>> {
  const { rows } = await e.ctx.pool.query<{ id: number }>('SELECT order_id AS id FROM warehouse.orders WHERE partition_hour = $1', [hour]);
  return new Set(rows.map((row) => Number(row.id)));
}

async function savedIds(e: TestEngine, backfillId: number, hour: string): Promise<Set<number>> {
  const { rows } = await e.ctx.pool.query<{ id: string }>(
    `SELECT order_id AS id FROM ${await storedRows(e.ctx.pool, 'saved')} WHERE bf_backfill = $1 AND partition_hour = $2`, [backfillId, hour]);
  return new Set(rows.map((row) => Number(row.id)));
}

/** Raises the amount of a few source orders of the hour: the staged data then differs from the preview. */
async function changeSource(e: TestEngine, hour: string, orders: number, by: string): Promise<void> {
  const { rowCount } = await e.ctx.pool.query(
    `UPDATE warehouse.orders_raw SET amount_local = amount_local + $3::numeric
     WHERE event_hour = $1 AND order_id IN (SELECT order_id FROM warehouse.orders_raw WHERE event_hour = $1 ORDER BY order_id LIMIT $2)`,
    [hour, orders, by]);
  expect(rowCount).toBe(orders);
}

// ---- connections and locks of the test itself ------------------------------------------------------------------

async function connect(e: TestEngine, name: string): Promise<{ client: pg.Client; pid: number }> {
  const client = new pg.Client({ connectionString: e.ctx.config.DATABASE_URL, application_name: `interleavings-${name}` });
  clients.push(client);
  await client.connect();
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return { client, pid: rows[0]?.pid ?? -1 };
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** True once a backend of this database other than `except` waits for a lock (on `relation`, when given). */
async function someoneWaitsForLock(e: TestEngine, except: number[], relation?: string): Promise<boolean> {
  const { rows } = await e.ctx.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE NOT l.granted AND a.datname = current_database() AND l.pid <> ALL ($1::int[])
       AND ($2::text IS NULL OR l.relation = $2::text::regclass)`, [except, relation ?? null]);
  return (rows[0]?.n ?? 0) > 0;
}

async function backendWaits(e: TestEngine, pid: number): Promise<boolean> {
  const { rows } = await e.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_locks WHERE pid = $1 AND NOT granted', [pid]);
  return (rows[0]?.n ?? 0) > 0;
}

// ---- refusals ----------------------------------------------------------------------------------------------

/** A refusal as a fact to compare: its code when it is a BackfillError, otherwise the raw error it surfaced. */
function refusalOf(outcome: { ok: unknown } | { error: unknown }): { refused: string } | { raw: string } | { succeeded: true } {
  if ('ok' in outcome) return { succeeded: true };
  const { error } = outcome;
  if (error instanceof BackfillError) return { refused: error.code };
  return { raw: `${String((error as { code?: unknown }).code ?? '')} ${error instanceof Error ? error.message : String(error)}` };
}

function messageOf(outcome: { ok: unknown } | { error: unknown }): string {
  return 'error' in outcome && outcome.error instanceof Error ? outcome.error.message : '';
}

// ================================================================================================================

describe('a pause that lands while publishes are in flight', () => {
  it('leaves the publishes it caught blocked (never skipped), and one continue runs the night to done with every hour rebuilt', async () => {
    engine = await createTestEngine('month-end', { WORKER_CONCURRENCY: '4', WAVE_SIZE: '4' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'interleaving test');
    const prior = await snapshotsOf(e);
    const dayBefore = await dayTotal(e);
    // After the preview: three source orders of 07:00 change, so 07:00's staged total leaves its envelope.
    await changeSource(e, hourKey('07'), 3, '100.00');
    // Every hour is staged before the run: the held claim of 07:00 below holds the backfill's row FOR SHARE while
    // it waits, and a stage's commit (its fence takes that row FOR UPDATE) would queue behind it, so a wave-1 hour
    // still staging could never reach its publish.
    for (const key of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key })).toBe('done');

    // Forcing the interleaving. The publish of 07:00 (the one that will pause the backfill) must run only once
    // the publishes of 06, 08 and 09 have done their writes and are about to commit. So the test holds the row
    // of 07:00's publish step FOR UPDATE from its own connection: 07:00's claim (which locks that row) waits,
    // while the other three run up to ctx.hooks.beforeFenceCheck. When all three are there the row is released:
    // 07:00 breaches and pauses the backfill, and each of the three, waiting in its hook until the backfill is
    // paused (at most 15 s, then it goes on regardless), reaches its commit checks after the pause.
    const holder = await connect(e, 'holder');
    await holder.client.query('BEGIN');
    await holder.client.query(`SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = 'publish' AND step_key = $2 FOR UPDATE`, [id, hourKey('07')]);
    const caught = ['06', '08', '09'].map(hourKey);
    const arrived = new Set<string>();
    let allArrived: () => void = () => undefined;
    const everyoneInFlight = new Promise<void>((resolve) => {
      allArrived = resolve;
    });
    const ctx: StepContext = {
      ...e.ctx,
      hooks: {
        async beforeFenceCheck(backfillId: number, hour: Date) {
          const key = `${hour.toISOString().slice(0, 13)}:00Z`;
          if (backfillId !== id || !caught.includes(key) || arrived.has(key)) return; // re-runs after continue pass
          arrived.add(key);
          if (arrived.size === caught.length) allArrived();
          await waitFor(async () => (await stateOf(e, id)) === 'paused', 15_000);
        },
      },
    };
    const firstRun = outcomeOf(settle(e, id, ctx));
    const inFlight = await Promise.race([everyoneInFlight.then(() => true), new Promise<false>((resolve) => setTimeout(() => resolve(false), 30_000))]);
    await holder.client.query('COMMIT');
    expect(inFlight, 'the publishes of 06, 08 and 09 reached their commit while 07:00 waited').toBe(true);
    const first = await firstRun;
    if ('error' in first) throw first.error;
    const paused = first.ok;

    expect(paused.backfill.state).toBe('paused');
    expect(paused.backfill.pausedReason).toMatch(/07:00/);
    // The publishes in flight when the pause landed: blocked (their writes rolled back) or done, never skipped.
    const caughtStatuses = Object.fromEntries(await Promise.all(caught.map(async (key) => [key, await stepStatus(e, id, 'publish', key)] as const)));
    for (const key of caught) expect(['blocked', 'done'], `publish ${key} is ${caughtStatuses[key]}`).toContain(caughtStatuses[key]);
    for (const key of caught) {
      if (caughtStatuses[key] === 'blocked') expect(await snapshotOf(e, key), `${key} was blocked, so it holds its prior rows`).toEqual(prior[HOURS.indexOf(key)]);
    }
    expect(await stepStatus(e, id, 'publish', hourKey('07'))).toBe('blocked');
    expect((await targetOf(e, id, hourKey('07')))?.breach).toMatch(/\S/);
    expect(await snapshotOf(e, hourKey('07'))).toEqual(prior[2]);

    await continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'three orders were repriced upstream; finance agrees', partitions: [new Date(hourKey('07'))] });
    const done = await settle(e, id, ctx);
    expect(done.backfill.state, describeSteps(done)).toBe('done');
    expect(await stepStatus(e, id, 'publish', hourKey('10'))).toBe('done');
    expect(await stepStatus(e, id, 'watermark', 'reset')).toBe('done');
    expect(done.steps.filter((s) => s.kind === 'publish').map((s) => s.status)).toEqual(['done', 'done', 'done', 'done', 'done', 'done']);
    expect(done.targets.map((t) => t.status)).toEqual(['published', 'published', 'published', 'published', 'published', 'published']);

    // Every hour holds exactly what the step builds from the source as it is now (07:00's change included):
    // no hour left without its rows, none doubled.
    const expected = await Promise.all(HOURS.map((hour) => rebuiltByStep(e, hour)));
    expect(await snapshotsOf(e)).toEqual(expected);
    // The day total is the corrected one: the rest of the day as it was, the six hours as rebuilt.
    const rest = toCents(dayBefore) - prior.reduce((sum, s) => sum + toCents(s.total), 0n);
    const corrected = rest + expected.reduce((sum, s) => sum + toCents(s.total), 0n);
    expect(toCents(await dayTotal(e))).toBe(corrected);
    expect(toCents(done.backfill.totalAfter ?? '0')).toBe(corrected);
    expect(toCents(done.backfill.diff ?? '0')).toBe(corrected - toCents(dayBefore));
  }, 120_000);
});

describe('acceptance is per partition', () => {
  it('a continue naming 07:00 does not let a later wave out of its envelope: 10:00 pauses the backfill again and waits for its own acceptance', async () => {
    // One worker slot: no publish is in flight when 07:00 pauses (that interleaving is the test above), so
    // this test is about acceptance alone.
    engine = await createTestEngine('month-end', { WAVE_SIZE: '4', WORKER_CONCURRENCY: '1' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'interleaving test');
    const prior10 = await snapshotOf(e, hourKey('10'));
    // After the preview, the source of 07:00 and of 10:00 changes, before either is staged, so 10:00's staged
    // rows differ from what its preview showed; its envelope is checked only when its own publish (wave 2)
    // comes, after 07:00's acceptance.
    await changeSource(e, hourKey('07'), 2, '50.00');
    await changeSource(e, hourKey('10'), 2, '75.00');

    const firstPause = await settle(e, id);
    expect(firstPause.backfill.state).toBe('paused');
    expect(firstPause.backfill.pausedReason).toMatch(/07:00/);
    expect((await targetOf(e, id, hourKey('10')))?.status).not.toBe('published');

    await continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the 07:00 repricing is real', partitions: [new Date(hourKey('07'))] });
    const continued = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'continued');
    expect(continued).toHaveLength(1);
    expect(JSON.stringify(continued[0]?.detail.accepted)).toMatch(/07:00/);
    expect(JSON.stringify(continued[0]?.detail.accepted)).not.toMatch(/10:00/);

    const secondPause = await settle(e, id);
    expect(secondPause.backfill.state, describeSteps(secondPause)).toBe('paused');
    expect(secondPause.backfill.pausedReason).toMatch(/10:00/);
    const ten = await targetOf(e, id, hourKey('10'));
    expect(ten?.acceptedBy).toBeNull();
    expect(ten?.status).not.toBe('published');
    expect(ten?.breach).toMatch(/\S/);
    expect(await stepStatus(e, id, 'publish', hourKey('10'))).not.toBe('done');
    expect(await snapshotOf(e, hourKey('10'))).toEqual(prior10);
    const seven = await targetOf(e, id, hourKey('07'));
    expect(seven).toMatchObject({ status: 'published', acceptedBy: OPERATOR });

    // 07:00 is no longer in breach: naming it again accepts nothing, and is refused as such.
    const renamed = await outcomeOf(continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'again', partitions: [new Date(hourKey('07'))] }));
    expect(refusalOf(renamed)).toEqual({ refused: expect.stringMatching(/^(bad_input|wrong_state)$/) });
    expect(await stateOf(e, id)).toBe('paused');

    // Only an acceptance naming 10:00 publishes it.
    await continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the 10:00 repricing is real too', partitions: [new Date(hourKey('10'))] });
    const done = await settle(e, id);
    expect(done.backfill.state, describeSteps(done)).toBe('done');
    expect(await targetOf(e, id, hourKey('10'))).toMatchObject({ status: 'published', acceptedBy: OPERATOR, breach: null });
    expect(await snapshotOf(e, hourKey('10'))).toEqual(await rebuiltByStep(e, hourKey('10')));
  }, 120_000);
});

describe('a writer racing a publish', () => {
  it('saves every row the publish deletes, including rows another writer committed while it ran: none vanishes', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'interleaving test');
    await stageAll(e, id);
    const hour = hourKey('05');
    const liveBefore = await orderIds(e, hour);
    const racing = [999300001, 999300002, 999300003];

    // Forcing the interleaving. The other writer (not the engine: it takes no partition lock) inserts three
    // orders into 05:00 and keeps its transaction open, holding ROW EXCLUSIVE on warehouse.orders. A second
    // connection then asks for SHARE on the table and queues behind it. The publish starts; whatever it reads
    // first, its DELETE needs ROW EXCLUSIVE, which conflicts with the queued SHARE request, so the DELETE waits
    // in the lock queue, right between anything the publish read before it and the delete itself. Only then
    // does the writer commit; SHARE is granted and released at once, and the DELETE runs seeing the three new
    // rows (its snapshot is taken after the lock wait). Those rows must then be saved (or still live), not lost.
    const writer = await connect(e, 'writer');
    const queued = await connect(e, 'queued');
    await writer.client.query('BEGIN');
    await writer.client.query(
      `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
       SELECT $1::timestamptz, o, 1, 4242, 'USD', 10.00, 1, 10.00 FROM unnest($2::bigint[]) AS o`, [hour, racing]);
    await queued.client.query('BEGIN');
    const shareGranted = queued.client.query('LOCK TABLE warehouse.orders IN SHARE MODE');
    expect(await waitFor(() => backendWaits(e, queued.pid), 10_000), 'the SHARE request queued behind the writer').toBe(true);
    const publishing = outcomeOf(executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hour }));
    const reachedDelete = await waitFor(() => someoneWaitsForLock(e, [writer.pid, queued.pid], 'warehouse.orders'), 10_000);
    await writer.client.query('COMMIT');
    await shareGranted;
    await queued.client.query('COMMIT');
    const published = await publishing;
    expect(reachedDelete, 'the publish waited for ROW EXCLUSIVE on warehouse.orders while the writer was open').toBe(true);
    expect(published).toEqual({ ok: 'done' });

    const liveAfter = await orderIds(e, hour);
    const saved = await savedIds(e, id, hour);
    // Every row live right before the publish that is gone afterwards is among the saved prior rows.
    const gone = [...liveBefore, ...racing].filter((order) => !liveAfter.has(order));
    expect(gone.filter((order) => !saved.has(order)), 'deleted by the publish without being saved').toEqual([]);
    // The prior rows are all saved, and each racing row is live (a late row) or saved: the writer's three
    // committed rows are all accounted for.
    expect([...liveBefore].filter((order) => !saved.has(order))).toEqual([]);
    expect(racing.filter((order) => liveAfter.has(order) || saved.has(order))).toEqual(racing);
  });
});

describe('Redis lost while a publish runs', () => {
  it('a second copy of a running publish does not claim it; the night is saved once, as it was, and a rollback restores it exactly', async () => {
    engine = await createTestEngine();
    const e = engine;
    const prior = await snapshotsOf(e);
    const fingerprint = async (sql: string, params: unknown[]) =>
      (await e.ctx.pool.query<{ rows: number; total: string; md5: string }>(sql, params)).rows[0];
    const canary = hourKey('05');
    const priorCanary = await fingerprint(
      `SELECT count(*)::int AS rows, coalesce(sum(amount_base), 0)::numeric(18,2)::text AS total,
              md5(coalesce(string_agg(order_id || ':' || amount_base::text, '|' ORDER BY order_id), '')) AS md5
       FROM warehouse.orders WHERE partition_hour = $1`, [canary]);
    const id = await approvedNight15(e.ctx, 'interleaving test');
    await stageAll(e, id);
    const queue = createStepQueue(e.ctx.config);
    queues.push(queue);
    await dispatch(e.ctx, queue, id);

    // Forcing the interleaving. The test locks the canary's rows FOR UPDATE from its own connection, so the
    // publish (a worker that claimed the step) blocks on its DELETE with the step running. Then Redis loses
    // every job, the dispatcher rebuilds the queue from Postgres, and a second worker runs the same step.
    const holder = await connect(e, 'holder');
    await holder.client.query('BEGIN');
    await holder.client.query('SELECT order_id FROM warehouse.orders WHERE partition_hour = $1 FOR UPDATE', [canary]);
    const publish: StepRef = { backfillId: id, kind: 'publish', key: canary };
    const first = outcomeOf(executeStep(e.ctx, publish));
    const blocked = await waitFor(() => someoneWaitsForLock(e, [holder.pid]), 10_000);
    const lost = createStepQueue(e.ctx.config);
    await lost.obliterate({ force: true });
    expect(await lost.count()).toBe(0);
    await lost.close();
    await dispatch(e.ctx, queue, id);
    const second = outcomeOf(executeStep(e.ctx, publish));
    // A copy that does not claim returns at once; one that claims would wait here for the first one's locks.
    await Promise.race([second, new Promise((resolve) => setTimeout(resolve, 2_000))]);
    await holder.client.query('ROLLBACK');
    expect(blocked, 'the first publish was blocked on the held rows').toBe(true);
    expect(await first).toEqual({ ok: 'done' });
    expect(await second).toEqual({ ok: expect.stringMatching(/^(claimed_elsewhere|already_done|not_runnable)$/) });

    // Saved once, and what was saved is the night as it was, not the backfill's own output.
    const preserved = await fingerprint(
      `SELECT count(*)::int AS rows, coalesce(sum(amount_base), 0)::numeric(18,2)::text AS total,
              md5(coalesce(string_agg(order_id || ':' || amount_base::numeric(14,2)::text, '|' ORDER BY order_id), '')) AS md5
       FROM ${await storedRows(e.ctx.pool, 'saved')} WHERE bf_backfill = $1 AND partition_hour = $2`, [id, canary]);
    expect(preserved).toEqual(priorCanary);
    const recomputed = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'recomputed' && String(ev.detail.partition).endsWith('05:00'));
    expect(recomputed).toHaveLength(1);

    const done = await settle(e, id);
    expect(done.backfill.state, describeSteps(done)).toBe('done');
    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR });
    expect(restored).toHaveLength(6);
    expect((await settle(e, id)).backfill.state).toBe('rolled_back');
    expect(await snapshotsOf(e)).toEqual(prior);
    const { rows } = await e.ctx.pool.query<{ total: string }>(`SELECT sum(amount_base)::text AS total FROM warehouse.orders WHERE ${DAY}`);
    expect(rows[0]?.total).toBe(NIGHT_15.signedTotal);
  }, 90_000);
});

describe('late rows and rollback', () => {
  it('a row written after the publish does not make the rollback impossible: it stays live, the rest is the night as it was', async () => {
    engine = await createTestEngine();
    const e = engine;
    const prior = await snapshotsOf(e);
    const dayBefore = await dayTotal(e);
    const id = await approvedNight15(e.ctx, 'interleaving test');
    await stageAll(e, id);
    for (const key of [hourKey('05'), hourKey('06')]) expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key })).toBe('done');
    await stopBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'wrong step version deployed' });

    // Normal ingestion commits a late order into 06:00 (published by the backfill), under the partition lock.
    const late = 999400001;
    await withTransaction(e.ctx.pool, async (tx) => {
      await lockPartition(tx, 'orders', new Date(hourKey('06')));
      await tx.query(
        `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
         VALUES ($1, $2, 2, 4242, 'USD', 123.45, 1, 123.45)`, [hourKey('06'), late]);
    });

    const rolled = await outcomeOf(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR }));
    expect(refusalOf(rolled), messageOf(rolled)).toEqual({ succeeded: true });
    expect((await settle(e, id)).backfill.state).toBe('rolled_back');

    const { rows } = await e.ctx.pool.query('SELECT partition_hour, amount_base::text AS amount FROM warehouse.orders WHERE order_id = $1', [late]);
    expect(rows).toEqual([{ partition_hour: new Date(hourKey('06')), amount: '123.45' }]);
    expect(await Promise.all(HOURS.map((hour) => snapshotOf(e, hour, [late])))).toEqual(prior);
    expect(toCents(await dayTotal(e))).toBe(toCents(dayBefore) + toCents('123.45'));
  }, 90_000);
});

describe('rollback in the order of the generations', () => {
  it('refuses to roll back #1 while #2 of the same hours stands, naming #2 and changing nothing; paid-against calls #2 current', async () => {
    engine = await createTestEngine();
    const e = engine;
    const first = await approvedNight15(e.ctx, 'interleaving test');
    expect((await settle(e, first)).backfill.state).toBe('done');
    // A small source change, then a second backfill of the same night.
    await changeSource(e, hourKey('06'), 1, '40.00');
    const second = await approvedNight15(e.ctx, 'interleaving test');
    expect((await settle(e, second)).backfill.state).toBe('done');

    const before = { night: await snapshotsOf(e), day: await dayTotal(e) };
    const refused = await outcomeOf(recordingRefusals(e.ctx, { actor: OPERATOR, action: 'rollback', backfillId: first },
      () => rollbackBackfill(e.ctx, { backfillId: first, actor: OPERATOR })));
    expect(refusalOf(refused)).toEqual({ refused: ErrorCode.WrongState });
    expect(messageOf(refused)).toMatch(new RegExp(`#${second}(?!\\d)`));
    // Nothing changed.
    expect({ night: await snapshotsOf(e), day: await dayTotal(e) }).toEqual(before);
    expect(await stateOf(e, first)).toBe('done');
    expect(await stateOf(e, second)).toBe('done');
    const targets = await e.ctx.pool.query<{ status: string }>('SELECT DISTINCT status FROM backfill.backfill_targets WHERE backfill_id = $1', [first]);
    expect(targets.rows).toEqual([{ status: 'published' }]);
    // NOTE: called through recordingRefusals as the CLI and Slack call it; the engine may record it as well.
    expect((await listEvents(e.ctx.pool, first)).filter((ev) => ev.kind === 'refused' && ev.detail.action === 'rollback').length).toBeGreaterThanOrEqual(1);

    const answer = await answerPaidAgainst(e.ctx.pool, { report: 'settlement_report', date: NIGHT });
    expect(answer.current.backfillId).toBe(second);
    expect(toCents(answer.current.total)).toBe(toCents(await dayTotal(e)));
    const report = await e.ctx.pool.query<{ total: string }>(`SELECT total::text FROM warehouse.settlement_report WHERE report_date = $1`, [NIGHT]);
    expect(toCents(answer.current.total)).toBe(toCents(report.rows[0]?.total ?? '0'));
  }, 120_000);
});

describe('a stopped backfill that published holds its hours', () => {
  it('refuses a new backfill over them (backfill_overlap, naming the stopped one) until it is rolled back, which succeeds', async () => {
    engine = await createTestEngine();
    const e = engine;
    const prior = await snapshotsOf(e);
    const id = await approvedNight15(e.ctx, 'interleaving test');
    await stageAll(e, id);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hourKey('05') })).toBe('done');
    await stopBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the canary looks wrong' });

    const overlapping = await outcomeOf(startBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'try again', actor: OPERATOR }));
    expect(refusalOf(overlapping)).toEqual({ refused: ErrorCode.Overlap });
    expect(messageOf(overlapping)).toMatch(new RegExp(`#${id}(?!\\d)`));
    const { rows } = await e.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM backfill.backfills');
    expect(rows[0]?.n).toBe(1);

    const rolled = await outcomeOf(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR }));
    expect(refusalOf(rolled), messageOf(rolled)).toEqual({ succeeded: true });
    expect((await settle(e, id)).backfill.state).toBe('rolled_back');
    expect(await snapshotsOf(e)).toEqual(prior);
    // Rolled back, it holds nothing any more.
    const again = await outcomeOf(startBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'try again', actor: OPERATOR }));
    expect(refusalOf(again), messageOf(again)).toEqual({ succeeded: true });
  }, 90_000);
});

describe('partition generations', () => {
  it('numbers each publish over an hour: backfill #1 wrote generation 1 and #2 generation 2 of every hour', async () => {
    engine = await createTestEngine();
    const e = engine;
    const first = await approvedNight15(e.ctx, 'interleaving test');
    expect((await settle(e, first)).backfill.state).toBe('done');
    const second = await approvedNight15(e.ctx, 'interleaving test');
    expect((await settle(e, second)).backfill.state).toBe('done');

    const { rows } = await e.ctx.pool.query<{ hour: string; generations: { generation: number; backfill: number }[] }>(
      `SELECT to_char(partition_hour AT TIME ZONE 'UTC', 'HH24') AS hour,
              jsonb_agg(jsonb_build_object('generation', generation, 'backfill', backfill_id) ORDER BY generation) AS generations
       FROM backfill.partition_generations WHERE pipeline = 'orders' GROUP BY partition_hour ORDER BY partition_hour`);
    expect(rows).toEqual(['05', '06', '07', '08', '09', '10'].map((hour) => ({
      hour, generations: [{ generation: 1, backfill: first }, { generation: 2, backfill: second }],
    })));
    for (const [backfill, generation] of [[first, 1], [second, 2]] as const) {
      const targets = await e.ctx.pool.query<{ g: number | null }>('SELECT published_generation AS g FROM backfill.backfill_targets WHERE backfill_id = $1 ORDER BY partition_hour', [backfill]);
      expect(targets.rows.map((t) => t.g)).toEqual([generation, generation, generation, generation, generation, generation]);
    }
  }, 120_000);
});

describe('refusals are BackfillErrors, never raw database errors', () => {
  it('answers every refusal of these interleavings with a BackfillError whose message is a sentence, not database text', async () => {
    engine = await createTestEngine();
    const e = engine;
    const start = () => startBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'currency parsed as text', actor: OPERATOR });
    const refusals: string[] = [];
    const refused = (outcome: { ok: unknown } | { error: unknown }) => {
      refusals.push(messageOf(outcome));
      return refusalOf(outcome);
    };

    // #1 publishes the canary and is stopped: its hours are held.
    const one = await approvedNight15(e.ctx, 'interleaving test');
    await stageAll(e, one);
    expect(await executeStep(e.ctx, { backfillId: one, kind: 'publish', key: hourKey('05') })).toBe('done');
    await stopBackfill(e.ctx, { backfillId: one, actor: OPERATOR, reason: 'stopped for the test' });
    expect(refused(await outcomeOf(start())), 'a new backfill over a stopped one that published').toEqual({ refused: ErrorCode.Overlap });
    expect(refused(await outcomeOf(continueBackfill(e.ctx, { backfillId: one, actor: OPERATOR, reason: 'go on' }))), 'continue of a stopped backfill')
      .toEqual({ refused: ErrorCode.WrongState });
    const rolledOne = await outcomeOf(rollbackBackfill(e.ctx, { backfillId: one, actor: OPERATOR }));
    expect(refusalOf(rolledOne), `rollback of the stopped backfill: ${messageOf(rolledOne)}`).toEqual({ succeeded: true });
    expect((await settle(e, one)).backfill.state).toBe('rolled_back');

    // #2 runs; #3 runs after it over the same hours; #2's rollback is then out of order.
    const two = await approvedNight15(e.ctx, 'interleaving test');
    expect((await settle(e, two)).backfill.state).toBe('done');
    const three = await approvedNight15(e.ctx, 'interleaving test');
    expect((await settle(e, three)).backfill.state).toBe('done');
    expect(refused(await outcomeOf(rollbackBackfill(e.ctx, { backfillId: two, actor: OPERATOR }))), 'rollback of #2 under #3')
      .toEqual({ refused: ErrorCode.WrongState });

    // #4 is announced over the same hours; rolling #3 back now either works or is refused, in words.
    const four = await start();
    expect(four.backfill.state).toBe('announced');
    const underAnnounced = await outcomeOf(rollbackBackfill(e.ctx, { backfillId: three, actor: OPERATOR }));
    if ('error' in underAnnounced) refusals.push(messageOf(underAnnounced));
    expect(refusalOf(underAnnounced), `rollback of #3 while #4 over the same hours is announced: ${messageOf(underAnnounced)}`)
      .toEqual(expect.not.objectContaining({ raw: expect.anything() }));

    for (const message of refusals) {
      expect(message.trim().length).toBeGreaterThan(20);
      expect(message).not.toMatch(/violates|constraint|duplicate key value|relation "|SQLSTATE|23P01/i);
    }
  }, 180_000);
});
