// A worker that stops answering inside a step's transaction (SIGSTOP, a paused VM, a process gone between two
// statements) loses that transaction within a bound, and whatever it does when it resumes commits nothing:
//  - every pool connection carries idle_in_transaction_session_timeout (IDLE_IN_TRANSACTION_TIMEOUT_MS, by default
//    STEP_LEASE_MS), so PostgreSQL itself ends a session left idle in a transaction;
//  - a worker taking a step over after its lease ran out ends the old holder's session, found by the name its open
//    transaction carries (stepClaims.ts, claimHolderName), so the takeover never waits on the frozen one's locks;
//  - the frozen one, resumed, finds its connection gone or its claim taken: nothing of it commits.

import type { ChildProcess } from 'node:child_process';
import { webApi } from '@slack/bolt';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { startSlackEmulator, type SlackEmulator } from '../../dev/slack-emulator/index.js';
import { claimHolderName } from '../../src/core/lifecycle/stepClaims.js';
import { executeStep, type StepContext, type StepRef } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { SlackMessenger } from '../../src/slack/delivery/messenger.js';
import { createPool, sessionSettings, terminateTransactionsNamed, type Pool } from '../../src/db/pool.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';
import { startWorkerProcess } from '../support/workerProcess.js';

const NIGHT = '2026-11-15';
const HOURS = ['05', '06', '07', '08', '09', '10'].map((hh) => `${NIGHT}T${hh}:00Z`);
const CANARY = HOURS[0] ?? '';

const OPERATOR = 'U07ONCALL';

let engine: TestEngine | undefined;
let pools: Pool[] = [];
let clients: pg.Client[] = [];
let children: ChildProcess[] = [];
let slack: SlackEmulator | undefined;
/** Lets a frozen in-process publish go on, so its pool can end (a failing test would otherwise hang its teardown). */
let resumeFrozen: () => void = () => undefined;

afterEach(async () => {
  resumeFrozen();
  for (const child of children) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    await exited;
  }
  children = [];
  await slack?.close();
  slack = undefined;
  for (const client of clients) await client.end().catch(() => undefined);
  for (const pool of pools) await pool.end().catch(() => undefined);
  clients = [];
  pools = [];
  await engine?.close();
  engine = undefined;
});

function poolFor(e: TestEngine, name: string, bounds: Parameters<typeof createPool>[2] = {}): Pool {
  const pool = createPool(e.ctx.config.DATABASE_URL, name, bounds);
  pools.push(pool);
  return pool;
}

async function connect(e: TestEngine, name: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: e.ctx.config.DATABASE_URL, application_name: name });
  // Its session may be ended under it (that is what is tested): an unheard 'error' would end the process.
  client.on('error', () => undefined);
  await client.connect();
  clients.push(client);
  return client;
}

async function sessionOf(pool: Pool, applicationName: string): Promise<{ pid: number; state: string } | undefined> {
  const { rows } = await pool.query<{ pid: number; state: string }>(
    'SELECT pid, state FROM pg_stat_activity WHERE application_name = $1::text AND datname = current_database()', [applicationName]);
  return rows[0];
}

async function alive(pool: Pool, pid: number): Promise<boolean> {
  const { rows } = await pool.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1::int', [pid]);
  return rows.length > 0;
}

async function claimToken(pool: Pool, ref: StepRef): Promise<string | null> {
  const { rows } = await pool.query<{ token: string | null }>(
    `SELECT claim_token::text AS token FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text`,
    [ref.backfillId, ref.kind, ref.key]);
  return rows[0]?.token ?? null;
}

/** What another worker finds once the holder stopped renewing: the lease ran out (the database's clock). */
async function expireLease(pool: Pool, ref: StepRef): Promise<void> {
  await pool.query(
    `UPDATE backfill.backfill_steps SET lease_expires_at = clock_timestamp() - interval '1 millisecond'
     WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text AND status = 'running'`, [ref.backfillId, ref.kind, ref.key]);
}

async function stageAll(e: TestEngine, id: number): Promise<void> {
  for (const key of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key })).toBe('done');
}

describe('a session idle inside a transaction', () => {
  it('is ended by PostgreSQL after IDLE_IN_TRANSACTION_TIMEOUT_MS, and what it wrote rolls back', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    // The default follows the lease; a value of its own wins.
    expect(sessionSettings({ ...e.ctx.config, STEP_LEASE_MS: 45_000 }).idleInTransactionTimeoutMs).toBe(45_000);
    expect(sessionSettings({ ...e.ctx.config, IDLE_IN_TRANSACTION_TIMEOUT_MS: 300 }).idleInTransactionTimeoutMs).toBe(300);
    const pool = poolFor(e, 'backfill-bot-idle', sessionSettings({ ...e.ctx.config, IDLE_IN_TRANSACTION_TIMEOUT_MS: 300 }));
    const client = await pool.connect();
    const lost = new Promise<Error>((resolve) => client.once('error', resolve));
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? -1;
    await client.query('BEGIN');
    await client.query(`INSERT INTO backfill.events (actor, kind, detail) VALUES ('frozen', 'frozen_write', '{}'::jsonb)`);
    // The worker stops here: nothing more is sent.
    try {
      await waitUntil(async () => !(await alive(e.ctx.pool, pid)), 'the idle session to be ended', 20_000);
    } finally {
      client.release(true);
    }
    expect((await lost).message).toMatch(/idle-in-transaction timeout|terminat/i);
    // Set on every connection of the pool, with TCP keepalives (a vanished server is noticed, not waited on for hours).
    expect(pool.options).toMatchObject({ keepAlive: true, idle_in_transaction_session_timeout: 300 });
    const { rows } = await e.ctx.pool.query(`SELECT 1 FROM backfill.events WHERE kind = 'frozen_write'`);
    expect(rows).toHaveLength(0);
  });
});

describe('ending the holder of a claim', () => {
  it("ends only a session of the bot's own role whose open transaction carries the claim's name", async () => {
    engine = await createTestEngine('empty');
    const e = engine;
    const name = claimHolderName({ backfillId: 7, kind: 'publish', key: CANARY }, '00000000-0000-4000-8000-000000000007');
    expect(name.length).toBeLessThanOrEqual(63);
    const opened = async (client: pg.Client, as: string) => {
      await client.query('BEGIN');
      await client.query(`SELECT set_config('application_name', $1::text, true)`, [as]);
    };
    const holder = await connect(e, 'backfill-bot-holder');
    await opened(holder, name);
    const otherName = await connect(e, 'backfill-bot-other');
    await opened(otherName, `${name.slice(0, -1)}0`);
    // The name outside any transaction: a pid whose claim's transaction ended is never signalled.
    const idle = await connect(e, name);
    const pidOf = async (client: pg.Client) => (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? -1;
    const [holderPid, otherPid, idlePid] = [await pidOf(holder), await pidOf(otherName), await pidOf(idle)];

    // Another role's session with the very name: a superuser bot (DATABASE_URL may be one) must not end it
    // either. Only a superuser can make that role; under the embedded server the bot is none, and the server
    // itself refuses it what this query filters out.
    const { rows: [me] } = await e.ctx.pool.query<{ superuser: boolean }>('SELECT rolsuper AS superuser FROM pg_roles WHERE rolname = current_user');
    const otherRole = `backfill_bot_test_other_${process.pid}`;
    let foreign: pg.Client | undefined;
    if (me?.superuser) {
      await e.ctx.pool.query(`CREATE ROLE ${otherRole} LOGIN`);
      const url = new URL(e.ctx.config.DATABASE_URL);
      url.username = otherRole;
      url.password = '';
      foreign = new pg.Client({ connectionString: url.toString(), application_name: 'backfill-bot-foreign' });
      foreign.on('error', () => undefined);
      await foreign.connect();
      clients.push(foreign);
      await opened(foreign, name);
    }
    try {
      const foreignPid = foreign ? await pidOf(foreign) : undefined;
      expect(await terminateTransactionsNamed(e.ctx.pool, [name], 5_000)).toEqual([holderPid]);
      expect(await alive(e.ctx.pool, holderPid)).toBe(false);
      for (const pid of [otherPid, idlePid, ...(foreignPid === undefined ? [] : [foreignPid])]) expect(await alive(e.ctx.pool, pid)).toBe(true);
    } finally {
      if (foreign) {
        await foreign.end().catch(() => undefined);
        await e.ctx.pool.query(`DROP ROLE IF EXISTS ${otherRole}`);
      }
    }
  });
});

describe('a worker frozen inside a publish', () => {
  it('loses its transaction when another worker takes the step over; the taker publishes; the frozen one commits nothing', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen worker test');
    await stageAll(e, id);
    const ref: StepRef = { backfillId: id, kind: 'publish', key: CANARY };

    // The frozen worker: its publish does every write and then stops before its commit checks, idle in its
    // transaction with the partition's locks held. A lease far longer than the test, so it never renews: the test
    // ends the lease itself, as a worker that stopped renewing would find it.
    const frozenAt = new Promise<void>((resolve) => { resumeFrozen = resolve; });
    let reachedSeam = false;
    const frozen: StepContext = {
      ...e.ctx, pool: poolFor(e, 'backfill-bot-frozen'), config: { ...e.ctx.config, STEP_LEASE_MS: 600_000 },
      hooks: { beforeFenceCheck: async () => { reachedSeam = true; await frozenAt; } },
    };
    const frozenRun = executeStep(frozen, ref).then((outcome) => ({ outcome }), (error: unknown) => ({ error }));
    await waitUntil(() => reachedSeam, 'the frozen publish to reach its commit checks');
    const token = await claimToken(e.ctx.pool, ref);
    expect(token).not.toBeNull();
    const holder = await sessionOf(e.ctx.pool, claimHolderName(ref, token ?? ''));
    expect(holder?.state).toBe('idle in transaction');

    // Another transaction of the same role that is not the claim's: a takeover must leave it alone.
    const bystander = await connect(e, 'backfill-bot-bystander');
    await bystander.query('BEGIN');
    await bystander.query('SELECT 1');

    // The taker waits for a lock at most 10 s: without ending the frozen session it would fail on the partition's lock.
    const taker: StepContext = { ...e.ctx, pool: poolFor(e, 'backfill-bot-taker', { lockTimeoutMs: 10_000 }) };
    await expireLease(e.ctx.pool, ref);
    expect(await executeStep(taker, ref)).toBe('done');
    expect(await alive(e.ctx.pool, holder?.pid ?? -1)).toBe(false);
    expect((await bystander.query<{ n: number }>('SELECT 1 AS n')).rows[0]?.n).toBe(1);

    // Resumed (SIGCONT), the frozen worker's commit finds its connection gone: nothing of it commits.
    resumeFrozen();
    const result = await frozenRun;
    expect('error' in result).toBe(true);
    const events = await listEvents(e.ctx.pool, id);
    const takeover = events.find((ev) => ev.kind === 'step_started' && ev.detail.step === 'publish' && ev.detail.takeover === true);
    expect(takeover?.detail.endedSessions).toEqual([holder?.pid]);
    expect(events.filter((ev) => ev.kind === 'recomputed' && ev.detail.partition === '2026-11-15 05:00')).toHaveLength(1);
    const { rows: generations } = await e.ctx.pool.query(
      `SELECT generation FROM backfill.partition_generations WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [id, CANARY]);
    expect(generations).toHaveLength(1);
    const { rows: step } = await e.ctx.pool.query<{ status: string; attempts: number }>(
      `SELECT status, attempts FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = 'publish' AND step_key = $2::text`, [id, CANARY]);
    expect(step[0]).toMatchObject({ status: 'done', attempts: 2 });
  });
});

describe('a worker process stopped (SIGSTOP) inside a publish', () => {
  it('loses its transaction at the takeover, the taker publishes, and resumed (SIGCONT) it commits nothing', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    slack = await startSlackEmulator();
    // The idle timeout far away, so it is the takeover that ends the stopped worker's session here. One job at a
    // time: the publish is the only transaction the stopped worker holds open. With stages beside it (they stage
    // while the canary publishes), one stopped at its fence would hold the backfill's row, which only that stage's
    // own takeover (or the idle timeout) ends, and this test's taker runs the publish alone.
    const child = await startWorkerProcess(e, slack.url, children, { STEP_LEASE_MS: '1500', IDLE_IN_TRANSACTION_TIMEOUT_MS: '600000', WORKER_CONCURRENCY: '1' });

    // The test holds a row of the canary's hour (only the publish writes those rows; the stage reads), so the
    // worker's publish waits at a known statement inside its transaction, holding the partition's lock; stopped
    // there and then let through, its session sits idle in that transaction.
    const blocker = await connect(e, 'backfill-bot-test-blocker');
    await blocker.query('BEGIN');
    await blocker.query('SELECT 1 FROM warehouse.orders WHERE partition_hour = $1::timestamptz LIMIT 1 FOR UPDATE', [CANARY]);
    const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'currency parsed as text', actor: OPERATOR });
    await overrideGate(e.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'frozen worker process test' });
    const ref: StepRef = { backfillId: backfill.id, kind: 'publish', key: CANARY };
    const holderName = async () => claimHolderName(ref, (await claimToken(e.ctx.pool, ref)) ?? '');
    const waitingOnUs = async () => {
      const { rows } = await e.ctx.pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = $1::text AND wait_event_type = 'Lock'`, [await holderName()]);
      return rows.length > 0;
    };
    await waitUntil(waitingOnUs, "the worker's publish to wait for the canary's rows", 60_000);
    child.kill('SIGSTOP');
    await blocker.query('COMMIT');
    const name = await holderName();
    await waitUntil(async () => (await sessionOf(e.ctx.pool, name))?.state === 'idle in transaction', "the stopped worker's session to sit idle in its transaction");
    const holder = await sessionOf(e.ctx.pool, name);

    // Stopped, it renews nothing: once its lease has run out (the database's clock) another worker takes over.
    await waitUntil(async () => {
      const { rows } = await e.ctx.pool.query(
        `SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = 'publish' AND step_key = $2::text AND lease_expires_at < clock_timestamp()`,
        [backfill.id, CANARY]);
      return rows.length > 0;
    }, "the stopped worker's lease to run out");
    const taker: StepContext = { ...e.ctx, pool: poolFor(e, 'backfill-bot-taker', { lockTimeoutMs: 10_000 }) };
    expect(await executeStep(taker, ref)).toBe('done');
    expect(await alive(e.ctx.pool, holder?.pid ?? -1)).toBe(false);

    // Resumed, the worker finds its connection gone; the backfill goes on to the end, the canary published once.
    child.kill('SIGCONT');
    await waitUntil(async () => ['done', 'failed'].includes((await loadBackfillReport(e.ctx.pool, backfill.id)).backfill.state), 'the backfill to finish', 90_000);
    expect((await loadBackfillReport(e.ctx.pool, backfill.id)).backfill.state).toBe('done');
    const events = await listEvents(e.ctx.pool, backfill.id);
    const takeover = events.find((ev) => ev.kind === 'step_started' && ev.detail.step === 'publish' && ev.detail.key === CANARY && ev.detail.takeover === true);
    expect(takeover?.detail.endedSessions).toEqual([holder?.pid]);
    expect(events.filter((ev) => ev.kind === 'recomputed' && ev.detail.partition === '2026-11-15 05:00')).toHaveLength(1);
    const { rows: generations } = await e.ctx.pool.query(
      `SELECT generation FROM backfill.partition_generations WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [backfill.id, CANARY]);
    expect(generations).toHaveLength(1);
  }, 150_000);
});

describe('a worker process stopped (SIGSTOP) while it waits out a 429 of an announcement', () => {
  it('loses its claim when its lease runs out; the taker sends the DM; resumed (SIGCONT) it sends nothing: one DM per owner', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    slack = await startSlackEmulator();
    const emulator = slack;
    const payoutsDm = `D${OWNERS.payouts}`;
    const settleDm = `D${OWNERS.settlementLead}`;
    // One 429 for the payouts owner's DM whose Retry-After (5 s) outlasts the lease (1.5 s): the worker is stopped
    // in that wait, and its lease runs out long before the wait would have ended.
    emulator.rateLimit('chat.postMessage', 1, 5, payoutsDm);
    const child = await startWorkerProcess(e, emulator.url, children, { STEP_LEASE_MS: '1500' });
    const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: NIGHT, reason: 'currency parsed as text', actor: OPERATOR });
    const ref: StepRef = { backfillId: backfill.id, kind: 'announce', key: 'payout_export' };
    const stepRow = async () => (await e.ctx.pool.query<{ status: string; expired: boolean }>(
      `SELECT status, coalesce(lease_expires_at < clock_timestamp(), false) AS expired FROM backfill.backfill_steps
       WHERE backfill_id = $1::bigint AND kind = 'announce' AND step_key = 'payout_export'`, [backfill.id])).rows[0];
    await waitUntil(async () => {
      const { rows } = await e.ctx.pool.query(
        `SELECT 1 FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint AND owner = $2::text AND announce_retry_at IS NOT NULL`, [backfill.id, OWNERS.payouts]);
      return rows.length > 0;
    }, 'the payouts announcement to wait out its 429', 60_000);
    child.kill('SIGSTOP');
    const dms = (channel: string) => emulator.callsTo('chat.postMessage').filter((c) => c.params.channel === channel);
    expect(dms(payoutsDm)).toHaveLength(0);

    // Stopped, it renews nothing: once its lease has run out another worker takes the step over and sends the DM.
    await waitUntil(async () => (await stepRow())?.expired === true, "the stopped worker's lease to run out");
    const client = new webApi.WebClient('xoxb-test', { slackApiUrl: emulator.url, retryConfig: { retries: 0 } });
    const taker: StepContext = { ...e.ctx, pool: poolFor(e, 'backfill-bot-taker'), messenger: new SlackMessenger(client, e.ctx.pool, 0) };
    expect(await executeStep(taker, ref)).toBe('done');
    expect(dms(payoutsDm)).toHaveLength(1);

    // Resumed, the stopped worker's wait ends: it finds the claim gone and gives the attempt up, sending nothing.
    child.kill('SIGCONT');
    const abandoned = async () => (await listEvents(e.ctx.pool, backfill.id))
      .find((ev) => ev.kind === 'claim_lost' && ev.detail.step === 'announce' && ev.detail.key === 'payout_export');
    await waitUntil(async () => (await abandoned()) !== undefined, "the resumed worker to give up the announcement's claim", 30_000);
    expect(dms(payoutsDm)).toHaveLength(1);
    // Given up before its send, not at its commit after sending.
    expect(String((await abandoned())?.detail.message)).toMatch(/no longer this worker's .*sends nothing/);
    await waitUntil(async () => {
      const { rows } = await e.ctx.pool.query(`SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = 'announce' AND status = 'done'`, [backfill.id]);
      return rows.length === 2;
    }, 'both announcements to be done', 30_000);
    expect(dms(payoutsDm)).toHaveLength(1);
    expect(dms(settleDm)).toHaveLength(1);
    expect(emulator.messagesIn(payoutsDm)).toHaveLength(1);
    const { rows: intents } = await e.ctx.pool.query<{ ts: string | null }>(`SELECT ts FROM backfill.message_intents WHERE intent = $1::text`, [`bf${backfill.id}:announce:payout_export`]);
    expect(intents).toEqual([{ ts: dms(payoutsDm)[0]?.response.ts }]);
  }, 150_000);
});
