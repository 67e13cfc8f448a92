// The claim token as the fence: a worker that stalled between its claim and its step's transaction (waiting for a
// connection, a long GC pause) holds no transaction when another worker takes the step over, so the takeover has
// no session to end (terminateTransactionsNamed finds none). What refuses its commit then is the token: the
// takeover replaced it, and the commit check (checkClaim) reads it under the step's row lock.
//
// The stall is forced at a known point: the worker's pool holds back its second checkout (the first is the
// claim's transaction, the second the publish's) until the test has taken the step over.
//
// The other way round, a holder frozen inside its transaction after its fence holds the backfill's row (and its
// step's): a claim of any step of that backfill ends every such session whose lease ran out before it locks
// anything, instead of waiting on it until IDLE_IN_TRANSACTION_TIMEOUT_MS.

import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { claimHolderName, claimStep } from '../../src/core/lifecycle/stepClaims.js';
import { executeStep, type StepContext, type StepRef } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { createPool, type Pool } from '../../src/db/pool.js';
import { approvedNight15, countRows, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';
import { storedRows } from '../support/storedRows.js';

const HOURS = ['05', '06', '07', '08', '09', '10'].map((hh) => `2026-11-15T${hh}:00Z`);
const CANARY = HOURS[0] ?? '';
const LONG_LEASE_MS = 600_000;

let engine: TestEngine | undefined;
let pools: Pool[] = [];
let clients: pg.Client[] = [];
/** Lets a held-back checkout go on, so a failing test does not hang its teardown. */
let releaseStall: () => void = () => undefined;

afterEach(async () => {
  releaseStall();
  for (const pool of pools) await pool.end().catch(() => undefined);
  pools = [];
  for (const client of clients) await client.end().catch(() => undefined);
  clients = [];
  await engine?.close();
  engine = undefined;
});

/**
 * A pool whose `nth` checkout by `connect()` (the form withTransaction takes) waits until released; the pool's own
 * `query` (a callback checkout) is never held back.
 */
function stallingPool(e: TestEngine, nth: number): { pool: Pool; stalled: () => boolean; release: () => void } {
  const pool = createPool(e.ctx.config.DATABASE_URL, 'backfill-bot-stalled');
  pools.push(pool);
  const connect = pool.connect.bind(pool) as (...args: unknown[]) => unknown;
  let checkouts = 0;
  let stalled = false;
  const gate = new Promise<void>((resolve) => { releaseStall = resolve; });
  const held = (...args: unknown[]): unknown => {
    if (args.length > 0) return connect(...args);
    checkouts += 1;
    if (checkouts !== nth) return connect();
    stalled = true;
    return gate.then(() => connect());
  };
  pool.connect = held as Pool['connect'];
  return { pool, stalled: () => stalled, release: () => releaseStall() };
}

async function stepRow(e: TestEngine, ref: StepRef): Promise<{ status: string; token: string | null } | undefined> {
  const { rows } = await e.ctx.pool.query<{ status: string; token: string | null }>(
    `SELECT status, claim_token::text AS token FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text`,
    [ref.backfillId, ref.kind, ref.key]);
  return rows[0];
}

/** What another worker finds once the holder stopped renewing: the lease ran out (the database's clock). */
async function expireLease(e: TestEngine, ref: StepRef): Promise<void> {
  await e.ctx.pool.query(
    `UPDATE backfill.backfill_steps SET lease_expires_at = clock_timestamp() - interval '1 millisecond'
     WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text AND status = 'running'`, [ref.backfillId, ref.kind, ref.key]);
}

const canaryRows = 'SELECT order_id::text AS id, amount_base::text AS amount FROM warehouse.orders WHERE partition_hour = $1 ORDER BY order_id';

describe('the claim token', () => {
  it('refuses the commit of a publish whose claim another worker took over while it held no transaction: nothing of it commits', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'fence test');
    for (const key of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key })).toBe('done');
    const ref: StepRef = { backfillId: id, kind: 'publish', key: CANARY };
    const liveBefore = (await e.ctx.pool.query(canaryRows, [CANARY])).rows;

    // The stalled worker claims the canary's publish, then waits for a connection for its transaction. Its lease is
    // far longer than the test, so it never renews: the test ends the lease, as a worker that stopped renewing would.
    const stall = stallingPool(e, 2);
    const stalledCtx: StepContext = { ...e.ctx, pool: stall.pool, config: { ...e.ctx.config, STEP_LEASE_MS: LONG_LEASE_MS } };
    const stalledRun = executeStep(stalledCtx, ref);
    await waitUntil(() => stall.stalled(), 'the publish to claim its step and wait for its transaction');
    const first = await stepRow(e, ref);
    expect(first?.status).toBe('running');

    // Another worker takes it over: a new token, and no session to end (the stalled one holds no transaction).
    await expireLease(e, ref);
    const takeover = await claimStep(e.ctx.pool, ref, LONG_LEASE_MS);
    expect(takeover).toMatchObject({ outcome: 'claimed', takeover: true });
    const taken = await stepRow(e, ref);
    expect(taken?.token).not.toBe(first?.token);
    const started = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'step_started' && ev.detail.step === 'publish');
    expect(started.at(-1)?.detail).not.toHaveProperty('endedSessions');

    // The stalled worker goes on: its publish does every write, and its commit check finds the token changed.
    stall.release();
    expect(await stalledRun).toBe('claimed_elsewhere');
    expect((await e.ctx.pool.query(canaryRows, [CANARY])).rows).toEqual(liveBefore);
    expect(await countRows(e.ctx, `SELECT 1 FROM ${await storedRows(e.ctx.pool, 'saved')} WHERE bf_backfill = $1`, [id])).toBe(0);
    expect(await countRows(e.ctx, 'SELECT 1 FROM backfill.partition_generations WHERE backfill_id = $1', [id])).toBe(0);
    const events = await listEvents(e.ctx.pool, id);
    expect(events.filter((ev) => ev.kind === 'recomputed')).toHaveLength(0);
    expect(events.find((ev) => ev.kind === 'claim_lost')?.detail.message)
      .toBe(`publish ${CANARY} of backfill #${id} is no longer this worker's (it is running): nothing of this run commits`);
    // The step is the taker's still, untouched by the refused run.
    expect(await stepRow(e, ref)).toEqual(taken);

    // Whoever holds the step next publishes it, once.
    await expireLease(e, ref);
    expect(await executeStep(e.ctx, ref)).toBe('done');
    expect((await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'recomputed')).toHaveLength(1);
    expect(await countRows(e.ctx, 'SELECT 1 FROM backfill.partition_generations WHERE backfill_id = $1', [id])).toBe(1);
  });

  it('ends a holder frozen after its fence, holding the backfill\'s and the step\'s rows, before the takeover waits on them', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'fence test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: CANARY })).toBe('done');
    const ref: StepRef = { backfillId: id, kind: 'publish', key: CANARY };
    const frozen = await frozenAfterFence(e, ref);

    // The takeover does not wait for the idle timeout: it ends the frozen session first, then claims.
    const takeover = await claimStep(e.ctx.pool, ref, LONG_LEASE_MS);
    expect(takeover).toMatchObject({ outcome: 'claimed', takeover: true });
    expect((await frozen.ended).message).toMatch(/terminat/);
    const started = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'step_started' && ev.detail.step === 'publish');
    expect(started.at(-1)?.detail.endedSessions).toEqual([frozen.pid]);
  });

  it('ends a holder of another step frozen after its fence before a claim of any step of the backfill waits on its row', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'fence test');
    const frozen = await frozenAfterFence(e, { backfillId: id, kind: 'stage', key: HOURS[1] ?? '' });

    const other = await claimStep(e.ctx.pool, { backfillId: id, kind: 'stage', key: HOURS[2] ?? '' }, LONG_LEASE_MS);
    expect(other).toMatchObject({ outcome: 'claimed', takeover: false });
    expect((await frozen.ended).message).toMatch(/terminat/);
    const started = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'step_started' && ev.detail.key === HOURS[2]);
    expect(started.at(-1)?.detail.endedSessions).toEqual([frozen.pid]);
    // The frozen one's step is still running under its expired claim: whoever claims it next takes it over.
    expect(await claimStep(e.ctx.pool, { backfillId: id, kind: 'stage', key: HOURS[1] ?? '' }, LONG_LEASE_MS)).toMatchObject({ outcome: 'claimed', takeover: true });
  });
});

/**
 * A holder of `ref`'s claim whose lease ran out, its transaction stopped right after its fence (checkClaim): the
 * backfill's row and the step's locked, nothing committed, under the claim's name, as a worker frozen there
 * (SIGSTOP, a paused VM) leaves it. `ended` settles when its session is ended.
 */
async function frozenAfterFence(e: TestEngine, ref: StepRef): Promise<{ pid: number; ended: Promise<Error> }> {
  const claim = await claimStep(e.ctx.pool, ref, LONG_LEASE_MS);
  if (claim.outcome !== 'claimed') throw new Error(`the first claim was ${claim.outcome}`);
  await expireLease(e, ref);
  const frozen = new pg.Client({ connectionString: e.ctx.config.DATABASE_URL, application_name: claimHolderName(ref, claim.token) });
  clients.push(frozen);
  const ended = new Promise<Error>((resolve) => frozen.on('error', resolve));
  await frozen.connect();
  await frozen.query('BEGIN');
  await frozen.query('SELECT 1 FROM backfill.backfills WHERE id = $1 FOR UPDATE', [ref.backfillId]);
  await frozen.query('SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = $2 AND step_key = $3 FOR UPDATE', [ref.backfillId, ref.kind, ref.key]);
  const { rows } = await frozen.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return { pid: rows[0]?.pid ?? 0, ended };
}
