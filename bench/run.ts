// npm run bench [-- --rows-per-partition N --partitions P …]: a backfill at a given partition size against the
// same work written by hand. Runs on a database of its own (backfill_bot_bench), dropped and recreated at the
// start and dropped again at the end, seeded with the month-end demo, whose raw orders of the benchmarked
// hours are then replaced by N generated rows per hour (bench/data.ts). BullMQ runs on each queue backend
// asked (--queues: Redis, and/or its PostgreSQL backend in a schema of the bench database), each under a random
// QUEUE_PREFIX of its own; Redis's is obliterated afterwards, the schema goes with the database. The data is
// seeded once and shared: every backfill starts from the same state whichever backend carries its jobs. In one
// run, every figure a ratio to row 1 (the raw step):
//
//   1 raw step            per hour: BEGIN; DELETE; the step's INSERT … SELECT; COMMIT (one connection)
//   2 replacePartition    the engine's normal write path, one withTransaction per hour
//   3 start               the preview, the targets and the announced envelope (startBackfill)
//   4 jobs per second     per queue backend: N no-op jobs, addBulk, one Worker at concurrency 8 (bench/queueThroughput.ts)
//   5 whole backfill      approval → done through BullMQ, per queue backend, with 1, 2 and 4 worker processes (bench/worker.ts)
//   6 reconciliation      reconcileByKey of one partition, live against staged, against one scan of both sides
//   7 worker peak RSS     VmHWM of each worker process
//
// npm run bench -- --suite full runs every size of the suite (bench/suite.ts) on both target shapes, one after the
// other, each as one size's run on a database made anew, with 1 worker process, one queue backend and no rows 2 or 4;
// it writes each size's entry and the suite's record, from which npm run bench:table makes the docs' table.
//
// The backends take turns (ABBA) at each worker count and in each jobs-per-second pass, so drift falls on both.
//
// Every timed run starts from a vacuumed, analyzed table (autovacuum may be off): the VACUUM is never timed.
//
// npm run bench -- --cli [--runs N] measures the CLI's answer times instead (bench/cli.ts).

import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { openBackends, queueBackendOf, type QueueBackend, type RunConfig } from '../src/backends.js';
import { loadConfig } from '../src/config.js';
import type { EngineContext } from '../src/core/context.js';
import { readWatermark } from '../src/core/identify/identify.js';
import { formatHour, formatHourRange } from '../src/core/time.js';
import { migrate } from '../src/db/migrate.js';
import { requirePipeline, type Pipeline } from '../src/db/pipelines.js';
import { createPool, dropDatabase, sessionSettings, recreateDatabase, type Pool } from '../src/db/pool.js';
import { DEMO_PIPELINE } from '../dev/demo/constants.js';
import { seedDemo } from '../dev/demo/seed.js';
import { BackfillError, ErrorCode, isBackfillError } from '../src/errors.js';
import { createStepQueue } from '../src/queue/stepQueue.js';
import { parseBenchArgs, suiteSizeArgs, USAGE, type BenchArgs, type BenchRequest, type QueueKind } from './args.js';
import { benchCli, CLI_USAGE } from './cli.js';
import { autoExplainOptions, explainingPool, summarizePlans, type CapturedPlan, type StatementSummary } from './autoExplain.js';
import { rollBackStopped, runBackfill, type BackfillRun, type Phases } from './backfill.js';
import {
  benchmarkHours, buildOrdersAsInNovember, clearRowStore, inflateRawOrders, startOver, targetShape, vacuumAnalyze, vacuumTarget,
} from './data.js';
import { findStagedPartition, rawPass, replacePass, timeReconcile, timeScanBothSides, type Pass } from './passes.js';
import { jobsPass, NOOP_CONCURRENCY, noopQueueName, vacuumQueueSchema, type JobsPass } from './queueThroughput.js';
import {
  describeMachine, explainReport, measurementTable, phasesTable, queuesTable, targetsTable, writeResults, writeSuiteRecord,
  type BackfillPhases, type Machine, type Measurement, type QueueComparison, type RunResult, type TargetCheck,
} from './report.js';
import { SUITE_TARGETS, SUITE_WORKERS, SUITES, sizeLabel, TARGETS, type SuiteEntry, type SuiteName, type SuiteRecord } from './suite.js';
import { median, spread } from './stats.js';
import { readMemory, startWorkerProcesses, stopWorkerProcesses, type WorkerEnv, type WorkerProcess } from './workerProcesses.js';

const BENCH_DATABASE = 'backfill_bot_bench';
const RESULTS_FILE = fileURLToPath(new URL('./results.json', import.meta.url));

const benchStarted = performance.now();
function progress(message: string): void {
  console.log(`[${((performance.now() - benchStarted) / 1000).toFixed(1).padStart(6)} s] ${message}`);
}

function urlWithDatabase(base: string, database: string): string {
  const url = new URL(base);
  url.pathname = `/${encodeURIComponent(database)}`;
  return url.toString();
}

/**
 * BullMQ retries a Redis that is not there forever, so the bench would hang instead of failing: ask it once,
 * with a short timeout, before anything is created. Returns its version.
 */
async function checkRedis(url: string): Promise<string> {
  const redis = new Redis(url, {
    lazyConnect: true, connectTimeout: 3000, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null,
  });
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => {
    lastError = error;
  });
  try {
    await redis.connect();
    const info = await redis.info('server');
    return /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown';
  } catch (error) {
    const why = lastError?.message ?? (error as Error).message;
    throw new Error(`Redis at ${url} does not answer (${why}): start it, set REDIS_URL to one that does, or run --queues postgres`, { cause: error });
  } finally {
    redis.disconnect();
  }
}

async function postgresFacts(pool: Pool): Promise<{ postgres: string; settings: Record<string, string> }> {
  const names = ['server_version', 'shared_buffers', 'work_mem', 'maintenance_work_mem', 'effective_cache_size', 'autovacuum', 'synchronous_commit', 'max_parallel_workers_per_gather', 'jit'];
  const { rows } = await pool.query<{ name: string; setting: string }>(
    `SELECT name, current_setting(name) AS setting FROM unnest($1::text[]) AS name`, [names]);
  const settings = Object.fromEntries(rows.map((row) => [row.name, row.setting]));
  const { server_version: postgres = 'unknown', ...rest } = settings;
  return { postgres, settings: rest };
}

/** BullMQ on one backend, against the bench database: what a backfill on it is dispatched through and worked by. */
interface QueueRig {
  kind: QueueKind;
  backend: QueueBackend;
  /** The bench's configuration with this backend's QUEUE_PREFIX, and REDIS_URL only for Redis. */
  config: RunConfig;
  ctx: EngineContext;
  queue: Queue;
  /** Environment of worker processes: the bench database, the queue prefix, REDIS_URL set or taken out. */
  workerEnv: WorkerEnv;
  /** What its worker processes must say they took (bench/worker.ts's ready message). */
  expected: string;
  /** Where its queues live, for the report. */
  where: string;
}

interface Bench {
  args: BenchArgs;
  config: RunConfig;
  pool: Pool;
  pipeline: Pipeline;
  hours: Date[];
  watermark: Date;
  /** One per queue backend measured, in --queues order. */
  rigs: QueueRig[];
  /** performance.now() when this size's run began (a suite runs several in one process). */
  startedAt: number;
}

/**
 * Each backend under a QUEUE_PREFIX of its own (for PostgreSQL, a schema of its own in the bench database).
 * The backend comes from src/backends.ts's own rule: REDIS_URL set → Redis, so the PostgreSQL rig's
 * configuration and its workers' environment have no REDIS_URL.
 */
function queueRig(kind: QueueKind, config: RunConfig, pool: Pool, prefix: string, redisVersion: string | undefined): QueueRig {
  const redisUrl = kind === 'redis' ? config.REDIS_URL : undefined;
  if (kind === 'redis' && !redisUrl) throw new Error('--queues redis needs REDIS_URL');
  const rigConfig: RunConfig = { ...config, QUEUE_PREFIX: `${prefix}-${kind === 'redis' ? 'redis' : 'pg'}`, REDIS_URL: redisUrl };
  const backend = queueBackendOf(rigConfig);
  if (backend.kind !== kind) throw new Error(`the ${kind} rig came out on ${backend.kind}`);
  return {
    kind, backend, config: rigConfig, ctx: { pool, config: rigConfig }, queue: createStepQueue(rigConfig),
    workerEnv: { DATABASE_URL: rigConfig.DATABASE_URL, QUEUE_PREFIX: rigConfig.QUEUE_PREFIX, REDIS_URL: redisUrl },
    expected: backend.kind === 'redis' ? `redis:${backend.prefix}` : `postgres:${backend.schema}`,
    where: backend.kind === 'redis'
      ? `Redis ${redisVersion ?? '?'}, prefix ${backend.prefix}`
      : `BullMQ's PostgreSQL backend, schema ${backend.schema} of ${BENCH_DATABASE} (the same server as the data)`,
  };
}

/** ABBA: the rigs in order on even turns, reversed on odd ones. */
function inTurn<T>(items: T[], turn: number): T[] {
  return turn % 2 === 0 ? items : [...items].reverse();
}

// ---- 1, 2: the raw step and replacePartition, interleaved (ABBA) so drift falls on both alike ----------------

async function measureWritePath(bench: Bench): Promise<{ raw: Pass[]; replace: Pass[] }> {
  const { pool, pipeline, hours, args } = bench;
  const timed = async (pass: () => Promise<Pass>) => {
    await vacuumTarget(pool, pipeline);
    return pass();
  };
  const raw = () => timed(() => rawPass(pool, pipeline, hours));
  // Left out, the raw step's passes follow one another.
  const replace = args.measureReplacePartition ? () => timed(() => replacePass(pool, pipeline, hours)) : undefined;
  if (args.warmUp) {
    await raw();
    await replace?.();
  }
  const raws: Pass[] = [];
  const replaces: Pass[] = [];
  for (let rep = 0; rep < args.writeReps; rep += 1) {
    if (!replace) {
      raws.push(await raw());
    } else if (rep % 2 === 0) {
      raws.push(await raw());
      replaces.push(await replace());
    } else {
      replaces.push(await replace());
      raws.push(await raw());
    }
    progress(`write path ${rep + 1}/${args.writeReps}: raw ${raws.at(-1)?.seconds.toFixed(3)} s` +
      `${replace ? `, replacePartition ${replaces.at(-1)?.seconds.toFixed(3)} s` : ''}`);
  }
  const counts = new Set([...raws, ...replaces].map((pass) => pass.rows));
  if (counts.size !== 1) throw new Error(`the passes wrote different row counts: ${[...counts].join(', ')}`);
  return { raw: raws, replace: replaces };
}

// ---- 4: jobs per second, per queue backend ------------------------------------------------------------------

async function measureJobs(bench: Bench): Promise<Map<QueueKind, JobsPass[]>> {
  const { args, rigs } = bench;
  const passes = new Map<QueueKind, JobsPass[]>(rigs.map((rig) => [rig.kind, []]));
  if (args.jobsReps === 0) return passes;
  const options = { attempts: bench.config.JOB_ATTEMPTS, backoffMs: bench.config.JOB_BACKOFF_MS };
  // One warm-up pass each (the PostgreSQL backend creates its schema on first use), then the timed ones.
  for (let rep = -1; rep < args.jobsReps; rep += 1) {
    for (const rig of inTurn(rigs, rep + 1)) {
      await vacuumQueueSchema(bench.pool, rig.backend);
      const pass = await jobsPass(rig.backend, noopQueueName(rep < 0 ? 'warm-up' : rep), args.jobs, options);
      if (rep >= 0) passes.get(rig.kind)?.push(pass);
      progress(`${rep < 0 ? 'warm-up' : `jobs ${rep + 1}/${args.jobsReps}`}, queues on ${rig.kind}: ${args.jobs} no-op jobs added in ${pass.addSeconds.toFixed(3)} s ` +
        `(${(args.jobs / pass.addSeconds).toFixed(0)}/s), processed in ${pass.processSeconds.toFixed(3)} s (${(args.jobs / pass.processSeconds).toFixed(0)}/s)`);
    }
  }
  return passes;
}

// ---- 3, 5, 7: whole backfills, per queue backend, with each count of worker processes ------------------------

/** Untimed: the hours as November built them, the watermark back, an empty row store, fresh statistics. */
async function prepareBackfill(bench: Bench, rig: QueueRig): Promise<void> {
  await startOver(bench.pool, bench.pipeline, bench.hours, bench.watermark);
  await clearRowStore(bench.pool, bench.pipeline);
  await vacuumAnalyze(bench.pool, bench.pipeline);
  await vacuumQueueSchema(bench.pool, rig.backend);
}

interface WorkerRound {
  queue: QueueKind;
  workers: number;
  runs: BackfillRun[];
  idle: number[];
  peak: number[];
}

/**
 * A backfill that does not finish in time is stopped and rolled back (a stopped backfill with partitions
 * published holds its hours), and the round ends there.
 */
async function measureBackfills(bench: Bench, rig: QueueRig, workerCount: number, reps: number, timeoutSeconds: number): Promise<WorkerRound> {
  const processes = await startWorkerProcesses(workerCount, rig.workerEnv);
  const runs: BackfillRun[] = [];
  try {
    const wrong = processes.filter((p) => p.queue !== rig.expected);
    if (wrong.length > 0) throw new Error(`worker process(es) ${wrong.map((p) => `${p.pid} took ${p.queue}`).join(', ')}, not ${rig.expected}`);
    progress(`queues on ${rig.kind} (${rig.expected}): ${workerCount} worker process(es) ready (pids ${processes.map((p) => p.pid).join(', ')}, ` +
      `idle RSS ${processes.map((p) => p.idle.rssMb.toFixed(0)).join(', ')} MB)`);
    for (let rep = 0; rep < reps; rep += 1) {
      await prepareBackfill(bench, rig);
      const run = await runBackfill(rig.ctx, rig.queue, bench.hours, timeoutSeconds);
      runs.push(run);
      const peak = `peak RSS ${processes.map((p) => readMemory(p.pid).peakMb.toFixed(0)).join(', ')} MB`;
      if (!run.finished) {
        progress(`backfill #${run.id}, queues on ${rig.kind}, with ${workerCount} worker process(es) NOT DONE ${timeoutSeconds.toFixed(0)} s after its approval ` +
          `(${run.published} of ${bench.hours.length} partitions published): stopped; start took ${run.startSeconds.toFixed(2)} s, ${peak}`);
        const seconds = await rollBackStopped(rig.ctx, rig.queue, run, timeoutSeconds);
        if (run.published > 0) progress(`backfill #${run.id} rolled back in ${seconds.toFixed(1)} s`);
        break;
      }
      progress(`backfill #${run.id}, queues on ${rig.kind}, with ${workerCount} worker process(es), ${rep + 1}/${reps}: start ${run.startSeconds.toFixed(2)} s (preview by ${run.previewedBy}), ` +
        `approval → done ${run.seconds.toFixed(2)} s, diff ${run.diff ?? '?'}, ${peak}`);
    }
    return { queue: rig.kind, workers: workerCount, runs, idle: processes.map((p) => p.idle.rssMb), peak: processes.map((p) => readMemory(p.pid).peakMb) };
  } finally {
    await stopWorkerProcesses(processes);
  }
}

// ---- 6: reconciliation of one partition against one scan of both sides --------------------------------------

interface ReconcileFigures {
  reconcile: number[];
  scan: number[];
  rows: { live: number; staged: number };
  result: Record<string, unknown>;
}

/**
 * Right after a backfill: the live partition is put back as November built it (so live and staged differ as
 * they do when a partition is staged), the store keeps that backfill's staged rows, and both are analyzed.
 */
async function measureReconciliation(bench: Bench): Promise<ReconcileFigures | undefined> {
  const { pool, pipeline, hours, args } = bench;
  const hour = hours[0] as Date;
  await startOver(pool, pipeline, hours, bench.watermark);
  await vacuumAnalyze(pool, pipeline);
  const staged = await findStagedPartition(pool, pipeline, hour);
  if (!staged) {
    progress(`no staged rows of ${formatHour(hour)}: reconciliation not measured`);
    return undefined;
  }
  await timeReconcile(pool, staged);
  await timeScanBothSides(pool, staged);
  const reconcile: number[] = [];
  const scan: number[] = [];
  let rows = { live: 0, staged: 0 };
  let result: Record<string, unknown> = {};
  for (let rep = 0; rep < args.reconcileReps; rep += 1) {
    const r = await timeReconcile(pool, staged);
    const s = await timeScanBothSides(pool, staged);
    reconcile.push(r.seconds);
    scan.push(s.seconds);
    rows = { live: s.liveRows, staged: s.stagedRows };
    result = { ...r.result };
  }
  progress(`reconciliation of ${formatHour(hour)} (${rows.live} live, ${rows.staged} staged rows): ${(median(reconcile) * 1000).toFixed(1)} ms, ` +
    `one scan of both sides ${(median(scan) * 1000).toFixed(1)} ms`);
  return { reconcile, scan, rows, result };
}

// ---- --explain: one more backfill and the reconciliation under auto_explain ---------------------------------

/**
 * One backfill over the timed runs' hours, with every statement over a tenth of a raw step's partition logged
 * with its plan. All of them, not the canary and one wave (where every statement of a backfill runs already):
 * a plan depends on how many partitions were replaced before it, and the consumers' replays over 5 of 24 hours
 * were estimated under jit_above_cost where those over all 24 passed it and spent most of their time compiling. Per-node timing is
 * off there: under it a plan with a nested loop of 10⁹ iterations would run for many times as long; the row
 * counts (loops, rows removed by a join filter) are what tells such a plan apart. Then every statement of one
 * reconciliation, one scan of both sides and one raw step, with per-node timing, whatever they take.
 */
async function explainRun(bench: Bench, rawPerPartitionMs: number, timeoutSeconds: number): Promise<StatementSummary[]> {
  const thresholdMs = Math.max(5, rawPerPartitionMs / 10);
  const file = path.join(os.tmpdir(), `backfill-bench-explain-${process.pid}.jsonl`);
  rmSync(file, { force: true });
  const plans: CapturedPlan[] = [];
  const slowPool = explainingPool(bench.config.DATABASE_URL, thresholdMs, false, (plan) => plans.push(plan), bench.config.DATABASE_JIT);
  const everyPool = explainingPool(bench.config.DATABASE_URL, 0, true, (plan) => plans.push(plan), bench.config.DATABASE_JIT);
  const hours = bench.hours;
  const rig = bench.rigs[0] as QueueRig;
  let processes: WorkerProcess[] = [];
  try {
    await prepareBackfill(bench, rig);
    progress(`--explain: one backfill of ${hours.length} hours with 1 worker process, queues on ${rig.kind}, under auto_explain (statements over ${thresholdMs.toFixed(0)} ms; not timed)`);
    const env = { ...rig.workerEnv, PGOPTIONS: autoExplainOptions(thresholdMs, { nodeTiming: false }) };
    processes = await startWorkerProcesses(1, env, ['--explain-file', file]);
    const run = await runBackfill({ ...rig.ctx, pool: slowPool }, rig.queue, hours, timeoutSeconds);
    // Statements are logged when they end: one still running at the stop is cancelled and not in the file.
    if (!run.finished) progress(`--explain: the backfill was not done after ${timeoutSeconds.toFixed(0)} s; plans of the statements that ended by then`);
    await stopWorkerProcesses(processes);
    await startOver(bench.pool, bench.pipeline, bench.hours, bench.watermark);
    await vacuumAnalyze(bench.pool, bench.pipeline);
    const staged = await findStagedPartition(bench.pool, bench.pipeline, bench.hours[0] as Date);
    if (staged) {
      await timeReconcile(everyPool, staged);
      await timeScanBothSides(everyPool, staged);
    }
    await rawPass(everyPool, bench.pipeline, bench.hours.slice(0, 1));
    const fromWorkers = existsSync(file) ? readFileSync(file, 'utf8').split('\n') : [];
    for (const line of fromWorkers) if (line) plans.push(JSON.parse(line) as CapturedPlan);
  } finally {
    await stopWorkerProcesses(processes);
    await slowPool.end();
    await everyPool.end();
    rmSync(file, { force: true });
  }
  return summarizePlans(plans, 16);
}

// ---- results ------------------------------------------------------------------------------------------------

function timing(name: string, runs: number[], partitions: number | null, baseline: { median: number; name: string } | null): Measurement {
  const s = spread(runs);
  return {
    name, unit: 's', ...s,
    perPartitionMs: partitions === null ? null : (s.median / partitions) * 1000,
    ratio: baseline ? s.median / baseline.median : null,
    against: baseline?.name ?? null,
  };
}

/**
 * The whole backfill with one count of worker processes. A backfill that did not finish counts as the time it
 * was allowed, and the ratio is then a lower bound.
 */
function backfillTiming(round: WorkerRound, partitions: number, raw: { median: number; name: string }): Measurement {
  const unfinished = round.runs.find((run) => !run.finished);
  const measurement = timing(`whole backfill, approval → done, ${round.workers} worker process${round.workers === 1 ? '' : 'es'}, queues on ${round.queue}`,
    round.runs.map((run) => run.seconds), partitions, raw);
  if (!unfinished) return measurement;
  return { ...measurement, lowerBound: true, note: `not done after ${unfinished.seconds.toFixed(0)} s: ${unfinished.published} of ${partitions} partitions published, then stopped` };
}

/** Medians of each phase over the backfills that finished; null when none did. */
function medianPhases(runs: BackfillRun[]): Phases | null {
  const phases = runs.flatMap((run) => (run.phases ? [run.phases] : []));
  if (phases.length === 0) return null;
  const of = (key: Exclude<keyof Phases, 'swapMedianMs' | 'swapMaxMs'>) => median(phases.map((p) => p[key]));
  const swaps = phases.flatMap((p) => (p.swapMedianMs === null ? [] : [p.swapMedianMs]));
  const longest = phases.flatMap((p) => (p.swapMaxMs === null ? [] : [p.swapMaxMs]));
  return {
    toFirstStageMs: of('toFirstStageMs'), stageWallMs: of('stageWallMs'), stageBusyMs: of('stageBusyMs'), stageMedianMs: of('stageMedianMs'),
    publishWallMs: of('publishWallMs'), publishBusyMs: of('publishBusyMs'), publishMedianMs: of('publishMedianMs'), tailMs: of('tailMs'),
    swapMedianMs: swaps.length > 0 ? median(swaps) : null, swapMaxMs: longest.length > 0 ? Math.max(...longest) : null,
  };
}

function checkTargets(measurements: Measurement[], rounds: WorkerRound[], shape: 'partitioned' | 'plain', rowsPerPartition: number, swapMinRows: number): TargetCheck[] {
  const limit = shape === 'partitioned' ? TARGETS.backfillSwap : TARGETS.backfillRewrite;
  // Below it the per-step overhead, not the rows, takes the time: the ratios say nothing of the engine at scale.
  const atScale = rowsPerPartition >= TARGETS.atScaleRows;
  const scale = atScale ? {} : { met: null, note: `held from ${TARGETS.atScaleRows.toLocaleString('en-US')} rows a partition up` };
  const checks: TargetCheck[] = measurements.filter((m) => m.name.startsWith('whole backfill')).map((m) => {
    const notes = [m.note, scale.note].filter((note) => note !== undefined);
    return {
      target: `${m.name} ≤ ${limit.toFixed(1)}× raw (${shape === 'partitioned' ? 'partitioned, publish by swap' : 'not partitioned'})`,
      measured: `${m.lowerBound ? '> ' : ''}${(m.ratio ?? 0).toFixed(2)}×`,
      met: atScale ? !m.lowerBound && (m.ratio ?? Infinity) <= limit : null,
      ...(notes.length > 0 ? { note: notes.join('; ') } : {}),
    };
  });
  const start = measurements.find((m) => m.name.startsWith('start'));
  if (start) checks.push({ target: `start ≤ ${TARGETS.start.toFixed(1)}× raw`, measured: `${(start.ratio ?? 0).toFixed(2)}×`, met: (start.ratio ?? Infinity) <= TARGETS.start, ...scale });
  const reconcile = measurements.find((m) => m.name.startsWith('reconciliation'));
  if (reconcile) {
    checks.push({ target: `reconciliation ≤ ${TARGETS.reconcile}× one scan of both sides`, measured: `${(reconcile.ratio ?? 0).toFixed(2)}×`, met: (reconcile.ratio ?? Infinity) <= TARGETS.reconcile, ...scale });
  }
  const peak = Math.max(...rounds.flatMap((round) => round.peak));
  checks.push({ target: `worker peak RSS ≤ ${TARGETS.workerRssMb} MB`, measured: `${peak.toFixed(0)} MB`, met: peak <= TARGETS.workerRssMb });
  checks.push(swapCheck(rounds, shape, rowsPerPartition < swapMinRows));
  return checks;
}

/**
 * By swap, readers of the target wait only for the catalog window (DETACH … ATTACH, recorded per publish);
 * writers wait for the whole publish step, whose median is shown beside it. `belowSwapSize`: every partition has
 * fewer rows than SWAP_MIN_ROWS, so none is swapped and there is no window to check; otherwise no swap is a miss.
 */
function swapCheck(rounds: WorkerRound[], shape: 'partitioned' | 'plain', belowSwapSize: boolean): TargetCheck {
  const phases = rounds.flatMap((round) => medianPhases(round.runs) ?? []);
  const publish = phases.length > 0 ? `publish step ${median(phases.map((p) => p.publishMedianMs)).toFixed(0)} ms` : 'no backfill finished';
  const windows = phases.flatMap((p) => (p.swapMedianMs === null ? [] : [p.swapMedianMs]));
  const longest = Math.max(...phases.flatMap((p) => (p.swapMaxMs === null ? [] : [p.swapMaxMs])));
  return shape === 'partitioned'
    ? {
      target: `publish by swap < ${TARGETS.swapPublishMs} ms per partition (readers wait)`,
      measured: windows.length > 0 ? `${median(windows).toFixed(1)} ms median, ${longest.toFixed(1)} ms longest`
      : belowSwapSize ? 'no swap: every partition is below SWAP_MIN_ROWS, published by rewrite' : 'no swap recorded',
      met: windows.length > 0 ? longest < TARGETS.swapPublishMs : belowSwapSize ? null : false, note: `${publish} (writers of the target wait)`,
    }
    : { target: `publish by swap < ${TARGETS.swapPublishMs} ms per partition`, measured: `${publish} (delete + insert)`, met: null, note: 'the target is a plain table' };
}

// ---- main ---------------------------------------------------------------------------------------------------

interface Setting {
  args: BenchArgs;
  /** The results file the run is added to. */
  results: string;
  /** The suite this size's run is part of, if any: its entry is keyed apart from one size's runs. */
  suite: SuiteName | undefined;
  queues: QueueKind[];
  config: RunConfig;
  prefix: string;
  redisVersion: string | undefined;
  database: 'configured' | 'embedded';
}

async function setUp(setting: Setting, pool: Pool, startedAt: number): Promise<{ bench: Bench; machine: Machine; data: Record<string, unknown> }> {
  const { args, config } = setting;
  await migrate(pool);
  progress(`seeding the month-end demo into ${BENCH_DATABASE}`);
  const seed = await seedDemo(pool, { scenario: 'month-end', target: args.target });
  const pipeline = await requirePipeline(pool, DEMO_PIPELINE);
  const watermark = await readWatermark(pool, pipeline.name);
  const hours = benchmarkHours(args.partitions);
  const last = hours.at(-1) as Date;
  if (!watermark || watermark < last) throw new Error(`the seed's watermark (${watermark ? formatHour(watermark) : 'none'}) is before the last benchmarked hour ${formatHour(last)}`);
  progress(`seeded (${seed.orderRows} orders); generating ${args.rowsPerPartition.toLocaleString('en-US')} raw orders in each of ${args.partitions} hours`);
  const rawRows = await inflateRawOrders(pool, hours, args.rowsPerPartition);
  progress(`${rawRows.toLocaleString('en-US')} raw rows; building warehouse.orders of those hours with the November step (v1)`);
  const built = await buildOrdersAsInNovember(pool, pipeline, hours);
  await vacuumAnalyze(pool, pipeline);
  const { rows: sizes } = await pool.query<{ orders: string; raw: string }>(
    // A partitioned table has no storage of its own: its size is its partitions'. A plain one has no partition tree.
    `SELECT pg_size_pretty(coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('warehouse.orders')),
                                    pg_total_relation_size('warehouse.orders'))) AS orders,
            pg_size_pretty(pg_total_relation_size('warehouse.orders_raw')) AS raw`);
  progress(`built ${built.toLocaleString('en-US')} rows (warehouse.orders ${sizes[0]?.orders}, orders_raw ${sizes[0]?.raw}); vacuumed and analyzed`);
  const facts = await postgresFacts(pool);
  const machine = describeMachine({ ...facts, redis: setting.redisVersion ?? 'not used' }, config);
  const rigs = setting.queues.map((kind) => queueRig(kind, config, pool, setting.prefix, setting.redisVersion));
  const bench: Bench = { args, config, pool, pipeline, hours, watermark, rigs, startedAt };
  const data = {
    database: BENCH_DATABASE, server: setting.database, hours: formatHourRange(hours[0] as Date, last), rawRows, builtRows: built,
    seededOrderRows: seed.orderRows, ordersSize: sizes[0]?.orders, rawSize: sizes[0]?.raw, target: await targetShape(pool, pipeline),
    queueBackends: Object.fromEntries(rigs.map((rig) => [rig.kind, rig.where])),
  };
  return { bench, machine, data };
}

/** The whole backfill at each worker count on each queue backend, taking turns; a backend that does not finish is not run again. */
async function measureAllBackfills(bench: Bench, timeoutSeconds: number): Promise<WorkerRound[]> {
  const { args, rigs } = bench;
  const taken: WorkerRound[] = [];
  const gaveUp = new Set<QueueKind>();
  for (const [index, workers] of args.workers.entries()) {
    for (const rig of inTurn(rigs, index)) {
      if (gaveUp.has(rig.kind)) continue;
      const round = await measureBackfills(bench, rig, workers, index === 0 ? args.backfillReps : args.laterBackfillReps, timeoutSeconds);
      taken.push(round);
      if (round.runs.some((run) => !run.finished)) {
        gaveUp.add(rig.kind);
        const skipped = args.workers.slice(index + 1);
        if (skipped.length > 0) progress(`queues on ${rig.kind}: skipping the backfills with ${skipped.join(', ')} worker processes: they would not finish either`);
      }
    }
  }
  // Reported by backend, then worker count, whatever order they took turns in.
  const rounds = rigs.flatMap((rig) => taken.filter((round) => round.queue === rig.kind));
  return rounds;
}

/** Each queue backend's jobs per second and whole backfills, side by side. */
function compareQueues(bench: Bench, jobs: Awaited<ReturnType<typeof measureJobs>>, backfills: { round: WorkerRound; measurement: Measurement }[]): QueueComparison[] {
  const { args, rigs } = bench;
  return rigs.map((rig) => {
    const passes = jobs.get(rig.kind) ?? [];
    return {
      queue: rig.kind, where: rig.where,
      jobs: passes.length === 0 ? null : {
        jobs: args.jobs, concurrency: NOOP_CONCURRENCY,
        addPerSecond: spread(passes.map((pass) => args.jobs / pass.addSeconds)),
        processPerSecond: spread(passes.map((pass) => args.jobs / pass.processSeconds)),
      },
      backfills: backfills.filter(({ round }) => round.queue === rig.kind).map(({ round, measurement: m }) => ({
        workers: round.workers, seconds: spread(m.runs), ratio: m.ratio ?? 0, lowerBound: m.lowerBound ?? false,
      })),
    };
  });
}

async function measure(bench: Bench, machine: Machine, data: Record<string, unknown>, suite: SuiteName | undefined): Promise<RunResult> {
  const { args, hours, rigs } = bench;
  const partitions = hours.length;
  progress(`write path: ${args.writeReps} timed passes each of the raw step and replacePartition over ${partitions} hours${args.warmUp ? ', after one warm-up each' : ''}`);
  const write = await measureWritePath(bench);
  const raw = spread(write.raw.map((pass) => pass.seconds));
  const rawBaseline = { median: raw.median, name: 'raw step' };

  if (args.jobsReps > 0) {
    progress(`jobs per second: ${args.jobsReps} timed passes per queue backend (${rigs.map((rig) => rig.kind).join(', ')}) of ${args.jobs} no-op jobs, ` +
      `addBulk, one Worker at concurrency ${NOOP_CONCURRENCY}, after one warm-up each`);
  }
  const jobs = await measureJobs(bench);

  const timeoutSeconds = args.backfillTimeoutSeconds ?? Math.max(300, 100 * raw.median);
  const rounds = await measureAllBackfills(bench, timeoutSeconds);
  const reconcile = await measureReconciliation(bench);
  await clearRowStore(bench.pool, bench.pipeline);
  const explain = args.explain ? await explainRun(bench, (raw.median / partitions) * 1000, timeoutSeconds) : undefined;

  const allRuns = rounds.flatMap((round) => round.runs);
  const backfills = rounds.map((round) => ({ round, measurement: backfillTiming(round, partitions, rawBaseline) }));
  const measurements: Measurement[] = [
    timing('raw step: BEGIN; DELETE; step INSERT…SELECT; COMMIT', raw.runs, partitions, null),
    ...(write.replace.length > 0 ? [timing('replacePartition, one withTransaction per hour', write.replace.map((pass) => pass.seconds), partitions, rawBaseline)] : []),
    timing(`start (preview by ${allRuns[0]?.previewedBy ?? '?'}, targets, envelope)`, allRuns.map((run) => run.startSeconds), partitions, rawBaseline),
    ...backfills.map(({ measurement }) => measurement),
    ...(reconcile ? [
      timing(`reconciliation of one partition (${reconcile.rows.staged} rows a side)`, reconcile.reconcile, null, { median: median(reconcile.scan), name: 'one scan of both sides' }),
      timing('one scan of both sides: count(*), sum(amount_base)', reconcile.scan, null, null),
    ] : []),
    ...rounds.map((round) => ({
      name: `worker peak RSS (VmHWM), ${round.workers} process${round.workers === 1 ? '' : 'es'}, queues on ${round.queue}, max`, unit: 'MB' as const, ...spread(round.peak),
      median: Math.max(...round.peak), perPartitionMs: null, ratio: null, against: null,
    })),
  ];
  const queues = compareQueues(bench, jobs, backfills);
  return {
    at: new Date().toISOString(),
    args: { rowsPerPartition: args.rowsPerPartition, partitions: args.partitions, target: args.target, workers: args.workers, queues: rigs.map((rig) => rig.kind),
      jobs: args.jobs, jobsReps: args.jobsReps, writeReps: args.writeReps, measureReplacePartition: args.measureReplacePartition,
      backfillReps: args.backfillReps, laterBackfillReps: args.laterBackfillReps, reconcileReps: args.reconcileReps, explain: args.explain,
      ...(suite ? { suite } : {}) },
    machine, measurements, queues,
    data: { ...data, backfillTimeoutSeconds: timeoutSeconds, ...(reconcile ? { reconciliation: { hour: formatHour(hours[0] as Date), ...reconcile.rows, found: reconcile.result } } : {}) },
    phases: rounds.flatMap((round): BackfillPhases[] => {
      const phases = medianPhases(round.runs);
      return phases ? [{ queue: round.queue, workers: round.workers, phases }] : [];
    }),
    workerMemory: rounds.map((round) => ({ queue: round.queue, workers: round.workers, idleRssMb: round.idle, peakRssMb: round.peak })),
    targets: checkTargets(measurements, rounds, data.target === 'partitioned' ? 'partitioned' : 'plain', args.rowsPerPartition, machine.swapMinRows ?? 0),
    backfills: rounds.flatMap((round) => round.runs.map((run) => ({ queue: round.queue, workers: round.workers, ...run }))),
    ...(explain ? { explain } : {}),
    seconds: (performance.now() - bench.startedAt) / 1000,
  };
}

function print(result: RunResult): void {
  const m = result.machine;
  console.log('');
  console.log(`machine: ${m.nproc} cores (nproc), ${m.cpuModel}, ${m.memoryGb} GB, ${m.platform}; Node ${m.node}, PostgreSQL ${m.postgres} ` +
    `(${Object.entries(m.settings).map(([k, v]) => `${k} ${v}`).join(', ')}), Redis ${m.redis}; WORKER_CONCURRENCY ${m.workerConcurrency}, WAVE_SIZE ${m.waveSize}, SWAP_MIN_ROWS ${m.swapMinRows ?? 'unset'}`);
  console.log(`data: ${String(result.data.hours)}, ${Number(result.data.builtRows).toLocaleString('en-US')} rows ` +
    `(${Number(result.args.rowsPerPartition).toLocaleString('en-US')} per partition), target table ${String(result.data.target)}, ` +
    `PostgreSQL ${String(result.data.server)}`);
  if (result.data.reconciliation) {
    console.log(`reconciliation of one partition, live (as November built it) against staged: ${JSON.stringify(result.data.reconciliation)}`);
  }
  console.log('');
  console.log(measurementTable(result.measurements));
  console.log('');
  const raw = result.measurements[0]?.median ?? 1;
  if (result.queues && result.queues.length > 0) {
    const first = result.queues.find((queue) => queue.jobs)?.jobs;
    console.log(`queue backends side by side: jobs/s, medians of ${String(result.args.jobsReps)} passes of ${first?.jobs ?? '?'} no-op jobs ` +
      `(addBulk; one Worker, concurrency ${first?.concurrency ?? '?'}); the whole backfill, approval → done, and its ratio to the raw step (${fmtSeconds(raw)}):`);
    console.log(queuesTable(result.queues));
    for (const queue of result.queues) console.log(`  ${queue.queue}: ${queue.where}`);
    console.log('');
  }
  if (result.phases.length > 0) {
    console.log('whole backfill by phase (timeline; medians; busy = the steps\' own time summed over partitions):');
    console.log(phasesTable(result.phases, raw));
  }
  console.log('');
  console.log(targetsTable(result.targets));
  if (result.explain) {
    console.log('');
    console.log('EXPLAIN (ANALYZE, BUFFERS) by auto_explain, heaviest first: the statements over the threshold of one backfill over the timed runs\' hours ' +
      '(1 worker process, no per-node timing), and every statement of one reconciliation, one scan of both sides and one raw step:');
    console.log(explainReport(result.explain));
  }
}

function fmtSeconds(seconds: number): string {
  return seconds < 1 ? `${(seconds * 1000).toFixed(0)} ms` : `${seconds.toFixed(2)} s`;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  // --cli measures how long the CLI takes to answer instead (bench/cli.ts), with options of its own.
  if (argv.includes('--cli')) return benchCli(argv.filter((arg) => arg !== '--cli'), progress);
  const parsed = parseBenchArgs(argv);
  if (parsed === 'help') {
    console.log(`${USAGE}\n\n${CLI_USAGE}`);
    return;
  }
  const prefix = `bench-${randomBytes(6).toString('hex')}`;
  // Through loadConfig so the overrides are validated like any other configuration; the backends decide the
  // server (DATABASE_URL's, or the embedded one), and the bench works in a database of its own on it.
  const config = loadConfig({ ...process.env, QUEUE_PREFIX: prefix });
  const asked = parsed.kind === 'size' ? parsed.args.queues : parsed.queues;
  // A suite runs one backend, so its sizes fit in the time: Redis when there is one.
  const fallback: QueueKind[] = config.REDIS_URL ? (parsed.kind === 'suite' ? ['redis'] : ['redis', 'postgres']) : ['postgres'];
  const queues: QueueKind[] = asked ?? fallback;
  if (!asked && !config.REDIS_URL) {
    progress(`Redis was not configured (REDIS_URL unset): the queues run on PostgreSQL only. Set REDIS_URL to measure ${parsed.kind === 'suite' ? 'on Redis' : 'both backends side by side'}.`);
  }
  if (queues.includes('redis') && !config.REDIS_URL) throw new BackfillError(ErrorCode.Config, '--queues redis needs REDIS_URL (e.g. redis://127.0.0.1:6379)');
  // Asked once, before anything is created: BullMQ would retry a Redis that is not there forever.
  const redisVersion = queues.includes('redis') && config.REDIS_URL ? await checkRedis(config.REDIS_URL) : undefined;
  // The queue backend openBackends would pick is not the bench's: it runs each one asked, in the bench database.
  const backends = await openBackends(config, { log: progress, checkQueue: false });
  progress(backends.databaseSummary);
  try {
    const base = {
      queues, prefix, redisVersion, database: backends.database, results: parsed.results ?? RESULTS_FILE,
      config: { ...backends.config, DATABASE_URL: urlWithDatabase(backends.config.DATABASE_URL, BENCH_DATABASE) },
    };
    if (parsed.kind === 'size') await benchOn({ ...base, args: parsed.args, suite: undefined });
    else await benchSuite(base, parsed);
  } finally {
    await backends.close();
  }
}

/**
 * Every size of the suite on each target, one after the other, each a run of its own on a database made anew.
 * The suite's record is written after every size, so a suite cut short still names what it measured; a size that
 * fails is recorded with its error and the others still run (the suite then fails at the end).
 */
async function benchSuite(base: Omit<Setting, 'args' | 'suite'>, request: Extract<BenchRequest, { kind: 'suite' }>): Promise<void> {
  const { suite } = request;
  const sizes = SUITES[suite];
  const started = performance.now();
  const record: SuiteRecord = {
    suite, at: new Date().toISOString(), finishedAt: null, machine: null,
    args: { sizes: [...sizes], targets: SUITE_TARGETS, workers: SUITE_WORKERS, queues: base.queues, backfillTimeoutSeconds: request.backfillTimeoutSeconds ?? null },
    entries: [], seconds: 0,
  };
  const runs = sizes.flatMap((size) => SUITE_TARGETS.map((target) => ({ size, target })));
  progress(`suite ${suite}: ${runs.map(({ size, target }) => `${sizeLabel(size)} ${target}`).join(', ')}; results to ${base.results}`);
  for (const [index, { size, target }] of runs.entries()) {
    progress(`suite ${suite}, ${index + 1}/${runs.length}: ${sizeLabel(size)} on a ${target} target`);
    const entry: SuiteEntry = { ...size, target, key: null };
    try {
      const { key, result } = await benchOn({ ...base, suite, args: suiteSizeArgs(size, target, base.queues, request.backfillTimeoutSeconds) });
      entry.key = key;
      record.machine ??= result.machine;
    } catch (error) {
      entry.error = error instanceof Error ? error.message : String(error);
      progress(`suite ${suite}: ${sizeLabel(size)} on a ${target} target failed: ${entry.error}`);
    }
    record.entries.push(entry);
    record.seconds = (performance.now() - started) / 1000;
    if (index === runs.length - 1) record.finishedAt = new Date().toISOString();
    writeSuiteRecord(base.results, record);
  }
  progress(`suite ${suite} took ${(record.seconds / 60).toFixed(1)} min; wrote its record to ${path.relative(process.cwd(), base.results)}` +
    `${suite === 'full' ? ' (npm run bench:table makes the docs\' tables from it)' : ''}`);
  const failed = record.entries.filter((entry) => entry.error !== undefined);
  if (failed.length > 0) throw new Error(`suite ${suite}: ${failed.map((entry) => `${sizeLabel(entry)} ${entry.target}`).join(', ')} failed (above)`);
}

/** <rows>x<partitions>[-partitioned]-<queue backends>[-embedded][-suite-<name>]: a run replaces only the entry of its own kind. */
function resultKey(setting: Setting): string {
  const { args } = setting;
  return `${args.rowsPerPartition}x${args.partitions}${args.target === 'partitioned' ? '-partitioned' : ''}-${setting.queues.join('+')}` +
    `${setting.database === 'embedded' ? '-embedded' : ''}${setting.suite ? `-suite-${setting.suite}` : ''}`;
}

async function benchOn(setting: Setting): Promise<{ key: string; result: RunResult }> {
  const { args: parsed, config } = setting;
  const startedAt = performance.now();
  const benchUrl = config.DATABASE_URL;
  progress(`benchmark: ${parsed.rowsPerPartition.toLocaleString('en-US')} rows × ${parsed.partitions} partitions, ${parsed.target} target, worker processes ${parsed.workers.join(', ')}, ` +
    `queues on ${setting.queues.join(' and ')}; database ${BENCH_DATABASE}, queue prefix ${setting.prefix}-<backend>`);
  await recreateDatabase(benchUrl);
  const pool = createPool(benchUrl, 'backfill-bot-bench', sessionSettings(config));
  let rigs: QueueRig[] = [];
  let failure: unknown;
  let written: { key: string; result: RunResult } | undefined;
  try {
    const { bench, machine, data } = await setUp(setting, pool, startedAt);
    rigs = bench.rigs;
    for (const rig of rigs) progress(`queues on ${rig.kind}: ${rig.where}`);
    const result = await measure(bench, machine, data, setting.suite);
    const key = resultKey(setting);
    writeResults(setting.results, key, result);
    written = { key, result };
    print(result);
    console.log('');
    progress(`wrote ${path.relative(process.cwd(), setting.results)} (entry ${key})`);
  } catch (error) {
    failure = error;
  }

  // Clean up whatever happened above; a clean-up error is reported, but never hides the first failure.
  const cleanup: [string, () => Promise<unknown>][] = [
    ...rigs.map((rig): [string, () => Promise<unknown>] => [`close the bench queue on ${rig.kind}`, async () => {
      await rig.queue.close();
      // Queues in PostgreSQL go with the bench database, dropped below.
      if (rig.kind !== 'redis') return;
      const obliterate = createStepQueue(rig.config);
      try {
        await obliterate.obliterate({ force: true });
      } finally {
        await obliterate.close();
      }
    }]),
    ['close the pool', () => pool.end()],
    [`drop ${BENCH_DATABASE}`, () => dropDatabase(benchUrl)],
  ];
  for (const [what, step] of cleanup) {
    try {
      await step();
    } catch (error) {
      console.error(`clean-up: could not ${what}: ${(error as Error).message}`);
      failure ??= error;
    }
  }
  if (failure !== undefined) throw failure;
  if (!written) throw new Error('the run wrote no results');
  return written;
}

main().then(() => process.exit(0), (error: unknown) => {
  console.error(`bench failed: ${isBackfillError(error) ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
