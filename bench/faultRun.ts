// The core of `npm run faults`: night 15 of the month-end demo run by two worker processes (bench/worker.ts, the
// real step worker and dispatcher sweep), a fault injected while a partition is being published, and the time
// until the backfill makes progress again, held to the bound docs/operating.md promises ("Recovery bound"):
// STEP_LEASE_MS (a claim nobody renews runs out) plus one dispatcher sweep (src/worker.ts, every 5 s: it rebuilds
// lost jobs from the database and takes over expired claims) plus a margin for the step itself to run.
//
// Every run works in a database of its own, cloned from a template seeded once, and under a queue prefix of its
// own; only those are ever emptied, killed or dropped. The fault is injected at a known point: the script holds
// a row of one wave partition's hour (only that partition's publish writes it), waits until a worker's publish
// waits for it inside its transaction, injects the fault and lets the row go.
//
// What a run measures, by polling the step rows (every POLL_MS, on the script's clock, from the fault's end: a
// restart's server or Redis back on its port, which the script waits for; how long it was down is reported apart,
// as outageMs, since a PostgreSQL's crash recovery is the server's time, not the bot's):
//   held      the steps running at the fault (for a worker fault: the ones the victim held) are all done again
//   pending   the first step that was pending at the fault is done (work lost with the queue is back)
// The recovery is the later of the two; the backfill must then end `done` with night 15's exact figures.
//
// The PostgreSQL restarts run on an embedded PostgreSQL of the script's own (src/db/embeddedPostgres.ts, a data
// folder made for the script and removed after), the only server it ever restarts: the configured one, or the
// project's shared embedded one, serve other processes too, and there the PostgreSQL fault ends the run's
// database's sessions instead (postgres-connections-killed).

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { RunConfig } from '../src/backends.js';
import { loadConfig } from '../src/config.js';
import { overrideGate } from '../src/core/announce/gate.js';
import { startBackfill } from '../src/core/announce/start.js';
import type { EngineContext } from '../src/core/context.js';
import { freePort, openEmbeddedPostgres, type EmbeddedPostgres, type RestartMode } from '../src/db/embeddedPostgres.js';
import { migrate } from '../src/db/migrate.js';
import { createPool, dropDatabase, quoteIdent, recreateDatabase, type Pool } from '../src/db/pool.js';
import { DEMO_PIPELINE } from '../dev/demo/constants.js';
import { seedDemo } from '../dev/demo/seed.js';
import { createStepQueue, dispatch } from '../src/queue/stepQueue.js';
import { median } from './stats.js';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from './workerProcesses.js';

export const FAULTS = [
  'redis-emptied', 'redis-restarted', 'postgres-connections-killed', 'postgres-restarted-fast', 'postgres-restarted-immediate', 'worker-frozen',
  'worker-killed',
] as const;
export type Fault = (typeof FAULTS)[number];

/** The dispatcher sweep's interval (src/worker.ts SWEEP_MS). */
export const SWEEP_MS = 5_000;
const NIGHT = '2026-11-15';
/** Night 15's figure the other tests assert: the settlement report moves by this much. */
export const NIGHT_15_DIFF = '-12408.45';
const PARTITIONS = 6;
/** A partition of the first wave after the canary (WAVE_SIZE 4): its publish is where the fault comes. */
const HELD_HOUR = `${NIGHT}T07:00Z`;
const POLL_MS = 100;
const ACTOR = 'U07FAULTS';
const WORKERS = 2;

export interface FaultOptions {
  /** Any database URL of the server the runs use (each run makes databases of its own on it). */
  serverUrl: string;
  /** REDIS_URL: the queues of the runs without a Redis fault (unset: BullMQ's PostgreSQL backend in the run's database). */
  redisUrl: string | undefined;
  faults: readonly Fault[];
  runs: number;
  leaseMs: number;
  /** Time the step itself takes to run once recovered, on top of lease + sweep. */
  marginMs: number;
  /** A run whose backfill is not done this long after the fault fails. */
  timeoutMs: number;
  workerConcurrency: number;
  log: (line: string) => void;
}

export interface RunMeasure {
  fault: Fault;
  run: number;
  /** What was done, in words (e.g. "connections killed: pg_terminate_backend of 9 sessions"). */
  injected: string;
  /** fault → every step running at the fault done (the victim's, for a worker fault). */
  heldDoneMs: number | null;
  /** fault → the first step pending at the fault done. */
  pendingDoneMs: number | null;
  /** The later of the two: when the backfill was progressing again. */
  recoveryMs: number;
  /** How long the fault itself lasted (a server or Redis restart until it was back on its port; about 0 for a kill).
   * The times above count from its end: what the server spends coming back is not the bot's to shorten. */
  outageMs: number;
  /** How much of its lease the held step had left at the fault (it is taken over only after it). */
  leaseLeftMs: number | null;
  takeovers: number;
  /** Hours a publish staged again, having found their staged rows gone (a crash empties unlogged tables). */
  stagedAgain: number;
  state: string;
  diff: string | null;
  recomputed: number;
  withinBound: boolean;
  exact: boolean;
  error?: string;
}

export interface FaultSummary {
  fault: Fault;
  skipped?: string;
  /** What the fault is where it was injected (the server or queue it hit, the queue backend, the workers). */
  how: string;
  boundMs: number;
  runs: RunMeasure[];
  maxMs: number | null;
  medianMs: number | null;
  ok: boolean;
}

export function boundMs(options: Pick<FaultOptions, 'leaseMs' | 'marginMs'>): number {
  return options.leaseMs + SWEEP_MS + options.marginMs;
}

function urlWithDatabase(base: string, database: string): string {
  const url = new URL(base);
  url.pathname = `/${encodeURIComponent(database)}`;
  return url.toString();
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- a Redis of the script's own, for the fault of a restart ------------------------------------------------

interface OwnRedis {
  url: string;
  /** Stops the server (SIGTERM; nothing is persisted, so it comes back empty) and starts it again on its port. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

function redisServerBinary(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = path.join(dir, 'redis-server');
    if (dir && existsSync(candidate)) return candidate;
  }
  return undefined;
}

async function startOwnRedis(binary: string): Promise<OwnRedis> {
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'backfill-faults-redis-'));
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  const start = async () => {
    const started = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir,
      '--maxmemory-policy', 'noeviction'], { stdio: 'ignore' });
    child = started;
    for (let attempt = 0; attempt < 100; attempt += 1) {
      if (started.exitCode !== null) throw new Error(`redis-server on port ${port} exited with ${started.exitCode}`);
      const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      probe.on('error', () => undefined);
      try {
        await probe.connect();
        await probe.ping();
        return;
      } catch {
        await sleep(50);
      } finally {
        probe.disconnect();
      }
    }
    throw new Error(`redis-server on port ${port} did not answer`);
  };
  const stop = async () => {
    const running = child;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGTERM');
    await exited;
  };
  await start();
  return {
    url,
    restart: async () => {
      await stop();
      await start();
    },
    close: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Deletes the run's own queue keys (<prefix>:*) and nothing else of that Redis. Returns how many. */
async function deletePrefix(url: string, prefix: string): Promise<number> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    let deleted = 0;
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) deleted += await redis.unlink(...keys);
    } while (cursor !== '0');
    return deleted;
  } finally {
    redis.disconnect();
  }
}

// ---- a PostgreSQL of the script's own, for the faults of a restart ---------------------------------------------

interface OwnPostgres {
  server: EmbeddedPostgres;
  /** Its "postgres" database's URL, as the bot's role: the runs make their databases from it. */
  serverUrl: string;
  /** The month-end demo seeded on it, for the runs to clone. */
  template: string;
  /** Stops the server and removes its data folder (the template with it). */
  close(): Promise<void>;
}

async function startOwnPostgres(log: (line: string) => void): Promise<OwnPostgres> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'backfill-faults-pg-'));
  // mkdtemp makes it 0700; as root the server runs as "postgres", which must pass through it.
  chmodSync(dir, 0o755);
  let server: EmbeddedPostgres | undefined;
  const close = async () => {
    await server?.release();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    server = await openEmbeddedPostgres({ dataDir: path.join(dir, 'pg'), log: (line) => log(`own PostgreSQL: ${line}`) });
    const serverUrl = server.url('postgres');
    log(`a PostgreSQL of its own for the PostgreSQL restarts: 127.0.0.1:${server.port}; seeding the month-end demo there too`);
    return { server, serverUrl, template: await seedTemplate(serverUrl), close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** The pg_ctl shutdown mode of a restart fault; undefined for every other fault. */
function restartMode(fault: Fault): RestartMode | undefined {
  return fault === 'postgres-restarted-fast' ? 'fast' : fault === 'postgres-restarted-immediate' ? 'immediate' : undefined;
}

// ---- one run --------------------------------------------------------------------------------------------------

interface StepRow {
  kind: string;
  key: string;
  status: string;
  leaseLeftMs: number | null;
}

async function stepRows(pool: Pool, backfillId: number): Promise<StepRow[]> {
  const { rows } = await pool.query<StepRow>(
    `SELECT kind, step_key AS key, status,
            (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::float8 AS "leaseLeftMs"
     FROM backfill.backfill_steps WHERE backfill_id = $1::bigint`, [backfillId]);
  return rows;
}

/** The worker (host:pid, as stepClaims.ts records it) that claimed the step last. */
async function holderOf(pool: Pool, backfillId: number, kind: string, key: string): Promise<string | undefined> {
  const { rows } = await pool.query<{ worker: string }>(
    `SELECT detail->>'worker' AS worker FROM backfill.events
     WHERE backfill_id = $1::bigint AND kind = 'step_started' AND detail->>'step' = $2::text AND detail->>'key' = $3::text
     ORDER BY id DESC LIMIT 1`, [backfillId, kind, key]);
  return rows[0]?.worker;
}

interface RunPlan {
  fault: Fault;
  run: number;
  /** The server the run's database is made on (the script's own PostgreSQL for a restart), and its template there. */
  serverUrl: string;
  template: string;
  /** Where this run's queues are: a Redis URL, or undefined for BullMQ's PostgreSQL backend. */
  redisUrl: string | undefined;
  ownRedis: OwnRedis | undefined;
  ownPostgres: OwnPostgres | undefined;
}

/** A run's own database, queue prefix, configuration and worker processes. */
interface Rig {
  database: string;
  prefix: string;
  url: string;
  env: Record<string, string | undefined>;
  ctx: EngineContext & { pool: Pool };
  queue: Queue | undefined;
  workers: WorkerProcess[];
  blocker: pg.Client | undefined;
  frozen: WorkerProcess[];
}

async function openRig(options: FaultOptions, plan: RunPlan): Promise<Rig> {
  const tag = randomBytes(5).toString('hex');
  const database = `backfill_bot_faults_${tag}`;
  const prefix = `faults-${tag}`;
  const url = urlWithDatabase(plan.serverUrl, database);
  const env: Record<string, string | undefined> = {
    ...process.env, DATABASE_URL: url, REDIS_URL: plan.redisUrl, QUEUE_PREFIX: prefix, STEP_LEASE_MS: String(options.leaseMs),
    WORKER_CONCURRENCY: String(options.workerConcurrency),
    // Night 15's hours are small: they are staged as a production-sized hour is, in tables of their own (for a
    // rewrite of the plain target, the staged rows unlogged, which a crash of PostgreSQL empties).
    SWAP_MIN_ROWS: '0',
  };
  // The idle-in-transaction timeout follows the lease, as by default.
  delete env.IDLE_IN_TRANSACTION_TIMEOUT_MS;
  const loaded = loadConfig(Object.fromEntries(Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined)));
  const config: RunConfig = { ...loaded, DATABASE_URL: url };
  await withAdmin(plan.serverUrl, (admin) => admin.query(`CREATE DATABASE ${quoteIdent(database)} TEMPLATE ${quoteIdent(plan.template)}`));
  const pool = createPool(url, 'backfill-bot-faults');
  return { database, prefix, url, env, ctx: { pool, config }, queue: undefined, workers: [], blocker: undefined, frozen: [] };
}

async function closeRig(rig: Rig, plan: RunPlan, log: (line: string) => void): Promise<void> {
  for (const w of rig.frozen.splice(0)) w.child.kill('SIGCONT');
  await rig.blocker?.end().catch(() => undefined);
  await stopWorkerProcesses(rig.workers);
  await rig.queue?.close().catch(() => undefined);
  await rig.ctx.pool.end().catch(() => undefined);
  if (plan.redisUrl) await deletePrefix(plan.redisUrl, rig.prefix).catch((error: unknown) => log(`could not delete the queue keys ${rig.prefix}:*: ${(error as Error).message}`));
  await dropDatabase(rig.url).catch((error: unknown) => log(`could not drop ${rig.database}: ${(error as Error).message}`));
}

/**
 * Starts the workers and night 15 with a row of the wave partition's hour held, and waits until that partition's
 * publish waits for the row inside its transaction, holding its claim. Returns the backfill and its holder.
 */
async function startHeldBackfill(rig: Rig): Promise<{ id: number; holder: string; victim: WorkerProcess }> {
  const { ctx } = rig;
  rig.queue = createStepQueue(ctx.config);
  rig.workers = await startWorkerProcesses(WORKERS, { ...rig.env, LOG_LEVEL: process.env.FAULTS_WORKER_LOG_LEVEL ?? 'fatal' });
  const blocker = new pg.Client({ connectionString: rig.url, application_name: 'backfill-bot-faults-blocker' });
  rig.blocker = blocker;
  blocker.on('error', () => undefined);
  await blocker.connect();
  await blocker.query('BEGIN');
  await blocker.query('SELECT 1 FROM warehouse.orders WHERE partition_hour = $1::timestamptz LIMIT 1 FOR UPDATE', [HELD_HOUR]);
  const { backfill } = await startBackfill(ctx, { pipeline: DEMO_PIPELINE, target: NIGHT, reason: 'currency parsed as text', actor: ACTOR });
  await overrideGate(ctx, { backfillId: backfill.id, actor: ACTOR, reason: 'fault run on a throwaway database' });
  await dispatch(ctx, rig.queue, backfill.id);
  const id = backfill.id;
  await waitFor(async () => {
    const { rows } = await ctx.pool.query(
      `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE $1::text AND wait_event_type = 'Lock'`,
      [`backfill-bot bf${id} publish %`]);
    // Another partition's publish may wait on a lock a moment too: the held hour's must be claimed as well.
    return rows.length > 0 && (await stepRows(ctx.pool, id)).some((s) => s.kind === 'publish' && s.key === HELD_HOUR && s.status === 'running');
  }, `the publish of ${HELD_HOUR} to wait for its rows`, 120_000);
  const holder = await holderOf(ctx.pool, id, 'publish', HELD_HOUR);
  const victim = rig.workers.find((w) => holder === `${os.hostname()}:${w.pid}`);
  if (!holder || !victim) throw new Error(`the publish of ${HELD_HOUR} is held by ${holder ?? 'nobody'}, not by a worker of this run`);
  return { id, holder, victim };
}

interface Watched {
  heldDoneMs: number | null;
  pendingDoneMs: number | null;
  state: string;
  diff: string | null;
}

/** Polls the step rows from the fault on until the backfill settles (or the time allowed runs out). */
async function watch(rig: Rig, options: FaultOptions, id: number, faultAt: number, heldKeys: Set<string>, pending: Set<string>): Promise<Watched> {
  const watched: Watched = { heldDoneMs: null, pendingDoneMs: null, state: 'running', diff: null };
  const deadline = faultAt + options.timeoutMs;
  while (performance.now() < deadline) {
    const now = performance.now() - faultAt;
    // Queries fail while the fault lasts (connections killed, the server restarting): the next poll tries again.
    const rows = await stepRows(rig.ctx.pool, id).catch(() => undefined);
    const { rows: [b] } = await rig.ctx.pool.query<{ state: string; diff: string | null }>(
      'SELECT state, diff::text AS diff FROM backfill.backfills WHERE id = $1::bigint', [id]).catch(() => ({ rows: [] }));
    if (rows && b) {
      const done = new Set(rows.filter((s) => s.status === 'done' || s.status === 'undeliverable').map((s) => `${s.kind} ${s.key}`));
      if (watched.heldDoneMs === null && [...heldKeys].every((key) => done.has(key))) watched.heldDoneMs = now;
      if (watched.pendingDoneMs === null && [...pending].some((key) => done.has(key))) watched.pendingDoneMs = now;
      watched.state = b.state;
      watched.diff = b.diff;
      // The frozen worker goes on once the backfill went on without it (or after the bound, so a miss is seen whole).
      if (watched.heldDoneMs !== null || now > boundMs(options)) for (const w of rig.frozen.splice(0)) w.child.kill('SIGCONT');
      if (!['running', 'replaying', 'comparing', 'approved', 'announced'].includes(b.state)) break;
    }
    await sleep(POLL_MS);
  }
  return watched;
}

async function runOnce(options: FaultOptions, plan: RunPlan): Promise<RunMeasure> {
  const rig = await openRig(options, plan);
  try {
    const { id, holder, victim } = await startHeldBackfill(rig);
    const { pool } = rig.ctx;
    // What is in flight at the fault: the running steps (a worker fault: the victim's alone), and the pending ones.
    const before = await stepRows(pool, id);
    const held: StepRow[] = [];
    for (const step of before.filter((s) => s.status === 'running')) {
      if (plan.fault.startsWith('worker-') && (await holderOf(pool, id, step.kind, step.key)) !== holder) continue;
      held.push(step);
    }
    const pending = new Set(before.filter((s) => s.status === 'pending').map((s) => `${s.kind} ${s.key}`));

    const injectedAt = performance.now();
    const injected = await inject(plan, { pool, victim, frozen: rig.frozen, prefix: rig.prefix, database: rig.database });
    const faultAt = performance.now();
    // The held row goes at the fault (a killed connection let it go already).
    await rig.blocker?.query('COMMIT').catch(() => undefined);
    const watched = await watch(rig, options, id, faultAt, new Set(held.map((s) => `${s.kind} ${s.key}`)), pending);
    for (const w of rig.frozen.splice(0)) w.child.kill('SIGCONT');
    return await verdict(options, plan, { id, injected, outageMs: faultAt - injectedAt, watched, leaseLeft: held.map((s) => s.leaseLeftMs ?? 0), pool });
  } finally {
    await closeRig(rig, plan, options.log);
  }
}

/** Night 15 done exactly (its diff, each partition published once), and the recovery against the bound. */
async function verdict(options: FaultOptions, plan: RunPlan, r: { id: number; injected: string; outageMs: number; watched: Watched; leaseLeft: number[]; pool: Pool }): Promise<RunMeasure> {
  const { heldDoneMs, pendingDoneMs, state, diff } = r.watched;
  const { rows: events } = await r.pool.query<{ kind: string; partition: string | null; takeover: boolean; again: boolean }>(
    `SELECT kind, detail->>'partition' AS partition, coalesce((detail->>'takeover')::boolean, false) AS takeover, detail ? 'again' AS again
     FROM backfill.events WHERE backfill_id = $1::bigint AND kind IN ('recomputed', 'step_started', 'staged')`, [r.id]);
  const recomputedEvents = events.filter((e) => e.kind === 'recomputed');
  const recomputed = new Set(recomputedEvents.map((e) => e.partition)).size;
  const exact = state === 'done' && diff === NIGHT_15_DIFF && recomputed === PARTITIONS && recomputedEvents.length === PARTITIONS;
  const parts = [heldDoneMs, pendingDoneMs].filter((ms): ms is number => ms !== null);
  const recoveryMs = parts.length === 0 ? Number.POSITIVE_INFINITY : Math.max(...parts);
  const measure: RunMeasure = {
    fault: plan.fault, run: plan.run, injected: r.injected, heldDoneMs, pendingDoneMs, recoveryMs, outageMs: r.outageMs,
    leaseLeftMs: r.leaseLeft.length > 0 ? Math.max(...r.leaseLeft) : null,
    takeovers: events.filter((e) => e.kind === 'step_started' && e.takeover).length,
    stagedAgain: events.filter((e) => e.kind === 'staged' && e.again).length,
    state, diff, recomputed: recomputedEvents.length, withinBound: recoveryMs <= boundMs(options), exact,
  };
  options.log(`${plan.fault} ${plan.run}: ${r.injected}; held steps done after ${fmt(heldDoneMs)}, first pending step done after ${fmt(pendingDoneMs)} ` +
    `(lease left at the fault ${fmt(measure.leaseLeftMs)}, ${measure.takeovers} takeover(s), ${measure.stagedAgain} hour(s) staged again); backfill #${r.id} ${state}, diff ${diff ?? '?'}, ` +
    `${recomputedEvents.length} partition publishes`);
  return measure;
}

export function fmt(ms: number | null): string {
  return ms === null || !Number.isFinite(ms) ? '—' : `${(ms / 1000).toFixed(2)} s`;
}

async function withAdmin<T>(serverUrl: string, work: (admin: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: urlWithDatabase(serverUrl, 'postgres'), application_name: 'backfill-bot-faults-setup' });
  await admin.connect();
  try {
    return await work(admin);
  } finally {
    await admin.end();
  }
}

async function waitFor(check: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(50);
  }
}

interface InjectContext {
  pool: Pool;
  victim: WorkerProcess;
  frozen: WorkerProcess[];
  prefix: string;
  database: string;
}

async function inject(plan: RunPlan, c: InjectContext): Promise<string> {
  switch (plan.fault) {
    case 'redis-emptied': {
      if (!plan.redisUrl) throw new Error('redis-emptied needs a Redis');
      const deleted = await deletePrefix(plan.redisUrl, c.prefix);
      return `deleted the run's ${deleted} queue keys (${c.prefix}:*)`;
    }
    case 'redis-restarted': {
      if (!plan.ownRedis) throw new Error('redis-restarted needs a Redis of its own');
      await plan.ownRedis.restart();
      return 'redis-server stopped (SIGTERM) and started again, empty';
    }
    case 'postgres-connections-killed': {
      // On the configured server, or the project's shared embedded one, which serve other processes too: every
      // session of the run's database is ended, never the server restarted.
      const { rows } = await c.pool.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = $1::text AND pid <> pg_backend_pid()`, [c.database]);
      return `connections killed: pg_terminate_backend of all ${rows[0]?.n ?? 0} other sessions of the run's database`;
    }
    case 'postgres-restarted-fast':
    case 'postgres-restarted-immediate': {
      const mode = restartMode(plan.fault);
      if (!plan.ownPostgres || !mode) throw new Error(`${plan.fault} needs a PostgreSQL of its own`);
      const before = performance.now();
      await plan.ownPostgres.server.restart(mode);
      return `pg_ctl restart -m ${mode} of the script's own PostgreSQL (back on its port after ${fmt(performance.now() - before)})`;
    }
    case 'worker-frozen':
      c.victim.child.kill('SIGSTOP');
      c.frozen.push(c.victim);
      return `SIGSTOP of worker ${c.victim.pid} inside its publish (SIGCONT once the backfill went on)`;
    case 'worker-killed':
      c.victim.child.kill('SIGKILL');
      return `SIGKILL of worker ${c.victim.pid} inside its publish`;
  }
}

// ---- all faults -------------------------------------------------------------------------------------------------

/** Seeds the month-end demo once into a template database on the server; each run clones it. */
async function seedTemplate(serverUrl: string): Promise<string> {
  const template = `backfill_bot_faults_tpl_${randomBytes(5).toString('hex')}`;
  const url = urlWithDatabase(serverUrl, template);
  await recreateDatabase(url);
  const pool = createPool(url, 'backfill-bot-faults-seed');
  try {
    await migrate(pool);
    await seedDemo(pool, { scenario: 'month-end', target: 'plain' });
  } finally {
    await pool.end();
  }
  return template;
}

export async function runFaults(options: FaultOptions): Promise<FaultSummary[]> {
  const { log } = options;
  const bound = boundMs(options);
  log(`seeding the month-end demo into a template database`);
  const template = await seedTemplate(options.serverUrl);
  const redisBinary = redisServerBinary();
  const wantsOwnRedis = options.faults.includes('redis-restarted') || (options.faults.includes('redis-emptied') && !options.redisUrl);
  let ownRedis: OwnRedis | undefined;
  let ownPostgres: OwnPostgres | undefined;
  const summaries: FaultSummary[] = [];
  try {
    if (wantsOwnRedis && redisBinary) {
      ownRedis = await startOwnRedis(redisBinary);
      log(`a Redis of its own for the Redis faults: ${ownRedis.url}`);
    }
    if (options.faults.some((fault) => restartMode(fault))) ownPostgres = await startOwnPostgres(log);
    for (const fault of options.faults) {
      const redisUrl = fault === 'redis-restarted' ? ownRedis?.url : fault === 'redis-emptied' ? (options.redisUrl ?? ownRedis?.url) : options.redisUrl;
      const how = describeFault(fault, redisUrl, options);
      const skipped = fault === 'redis-restarted' && !ownRedis ? 'no redis-server binary on PATH: the script restarts only a Redis it started itself'
        : fault === 'redis-emptied' && !redisUrl ? 'no Redis: REDIS_URL is unset and there is no redis-server binary on PATH' : undefined;
      if (skipped) {
        log(`${fault}: skipped (${skipped})`);
        summaries.push({ fault, skipped, how, boundMs: bound, runs: [], maxMs: null, medianMs: null, ok: true });
        continue;
      }
      const runs: RunMeasure[] = [];
      for (let run = 1; run <= options.runs; run += 1) {
        try {
          const own = restartMode(fault) ? ownPostgres : undefined;
          runs.push(await runOnce(options, {
            fault, run, serverUrl: own?.serverUrl ?? options.serverUrl, template: own?.template ?? template, redisUrl,
            ownRedis: fault === 'redis-restarted' ? ownRedis : undefined, ownPostgres: own,
          }));
        } catch (error) {
          const message = (error as Error).message;
          log(`${fault} ${run}: the run failed: ${message}`);
          runs.push({ fault, run, injected: '—', heldDoneMs: null, pendingDoneMs: null, recoveryMs: Number.POSITIVE_INFINITY, outageMs: 0, leaseLeftMs: null,
            takeovers: 0, stagedAgain: 0, state: 'error', diff: null, recomputed: 0, withinBound: false, exact: false, error: message });
        }
      }
      summaries.push(summarise(fault, how, bound, runs));
    }
  } finally {
    await ownRedis?.close();
    // The server goes with its data folder, the template in it.
    await ownPostgres?.close().catch((error: unknown) => log(`could not stop the script's own PostgreSQL: ${(error as Error).message}`));
    await dropDatabase(urlWithDatabase(options.serverUrl, template)).catch((error: unknown) => log(`could not drop ${template}: ${(error as Error).message}`));
  }
  return summaries;
}

function summarise(fault: Fault, how: string, bound: number, runs: RunMeasure[]): FaultSummary {
  const times = runs.map((r) => r.recoveryMs);
  const finite = times.filter((ms) => Number.isFinite(ms));
  return {
    fault, how, boundMs: bound, runs,
    maxMs: finite.length === times.length && times.length > 0 ? Math.max(...times) : null,
    medianMs: finite.length > 0 ? median(finite) : null,
    ok: runs.every((r) => r.withinBound && r.exact),
  };
}

function describeFault(fault: Fault, redisUrl: string | undefined, options: FaultOptions): string {
  const queues = redisUrl ? `queues on Redis ${new URL(redisUrl).host}` : "queues in PostgreSQL (the run's database)";
  switch (fault) {
    case 'redis-emptied': return `the run's queue keys deleted (<prefix>:*); ${queues}`;
    case 'redis-restarted': return `the script's own redis-server restarted empty; ${queues}`;
    case 'postgres-connections-killed': return `connections killed (pg_terminate_backend of every session of the run's database; the server is not the script's to restart); ${queues}`;
    case 'postgres-restarted-fast':
    case 'postgres-restarted-immediate':
      return `the script's own embedded PostgreSQL, the run's database on it, restarted (pg_ctl restart -m ${restartMode(fault) ?? '?'}: ` +
        `${fault === 'postgres-restarted-fast' ? 'sessions ended, a shutdown checkpoint' : 'no shutdown checkpoint, crash recovery on start'}); ${queues}`;
    case 'worker-frozen': return `SIGSTOP of the worker holding a publish, SIGCONT after; ${WORKERS} workers × concurrency ${options.workerConcurrency}; ${queues}`;
    case 'worker-killed': return `SIGKILL of the worker holding a publish; ${WORKERS} workers × concurrency ${options.workerConcurrency}; ${queues}`;
  }
}
